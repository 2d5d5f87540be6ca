// Metric charts with uPlot: one chart per metric, a series per learner (or per job when
// comparing), plus the training throughput in steps a second.

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

export function colour(index) {
  return COLOURS[index % COLOURS.length];
}

// A series in step order, one value a step: a restarted job reports its steps again from
// its checkpoint, and the later report of a step is the one that stands.
function settled(pairs) {
  const byX = new Map();
  for (const [x, y] of pairs) byX.set(x, y);
  return [...byX].sort((a, b) => a[0] - b[0]);
}

// points: [{learner, time, step, values}] -> Map(metric -> Map(seriesKey -> [[x, y]]))
export function byMetric(points, seriesOf) {
  const metrics = new Map();
  for (const point of points) {
    const x = point.step ?? point.time;
    for (const [name, value] of Object.entries(point.values)) {
      if (!metrics.has(name)) metrics.set(name, new Map());
      const series = metrics.get(name);
      const key = seriesOf(point);
      if (!series.has(key)) series.set(key, []);
      series.get(key).push([x, value]);
    }
  }
  for (const series of metrics.values()) {
    for (const [key, pairs] of series) series.set(key, settled(pairs));
  }
  return metrics;
}

// Steps a second over a sliding window of each series' points, within each run of rising
// steps (a restart starts a new run).
export function throughput(points, seriesOf, span = 10) {
  const runs = new Map(); // series -> the current run of points
  const series = new Map();
  for (const point of points) {
    if (point.step === null || point.step === undefined) continue;
    const key = seriesOf(point);
    let run = runs.get(key);
    if (!run || point.step <= run[run.length - 1].step) {
      run = [];
      runs.set(key, run);
    }
    run.push(point);
    if (run.length <= span) continue;
    const from = run[run.length - 1 - span];
    const seconds = point.time - from.time;
    if (seconds <= 0) continue;
    if (!series.has(key)) series.set(key, []);
    series.get(key).push([point.step, (point.step - from.step) / seconds]);
  }
  for (const [key, pairs] of series) series.set(key, settled(pairs));
  return series;
}

// uPlot wants one x array and every series aligned to it.
export function aligned(series) {
  const keys = [...series.keys()];
  if (keys.length === 1) {
    const only = series.get(keys[0]);
    return { keys, data: [only.map((p) => p[0]), only.map((p) => p[1])] };
  }
  const xs = [...new Set(keys.flatMap((key) => series.get(key).map((p) => p[0])))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const data = [xs];
  for (const key of keys) {
    const ys = new Array(xs.length).fill(null);
    for (const [x, y] of series.get(key)) ys[index.get(x)] = y;
    data.push(ys);
  }
  return { keys, data };
}

export function chartOptions(title, keys, labelOf, width, few = false, onDraw = null) {
  return {
    hooks: onDraw ? { draw: [onDraw] } : {},
    title,
    width,
    height: 220,
    scales: { x: { time: false } },
    series: [{ label: "step" }, ...keys.map((key, i) => ({
      label: labelOf(key), stroke: colour(i), width: 1.5, spanGaps: true, points: { show: few, size: 7 },
    }))],
    axes: [{ label: "step" }, {}],
  };
}

// A chart in a labelled figure; `update(series)` redraws it with new data.
export function metricChart(container, title, series, labelOf) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  figure.dataset.metric = title;
  const caption = document.createElement("figcaption");
  caption.className = "visually-hidden";
  figure.append(caption);
  container.append(figure);
  let keys = [];
  let plot = null;
  const width = () => Math.max(320, Math.min(container.clientWidth - 8, 900));
  let started = null;
  let drawing = 0;
  // how long a redraw took, from the data's arrival to the drawn canvas (bench/dashboard.py)
  const drawn = () => {
    if (started === null) return;
    performance.measure(`dlaas:chart:${title}`, { start: started, detail: { points: drawing } });
    started = null;
  };
  const update = (next) => {
    started = performance.now();
    const { keys: nextKeys, data } = aligned(next);
    const count = data[0].length;
    const last = nextKeys.map((key) => {
      const points = next.get(key);
      const [x, y] = points[points.length - 1];
      return `${labelOf(key)}: ${y.toPrecision(4)} at step ${x}`;
    });
    caption.textContent = `${title}, ${count} points. Latest: ${last.join("; ")}`;
    figure.dataset.points = String(count);
    drawing = count;
    const few = count <= 20; // a handful of points (a final test score) are drawn as dots
    if (plot && nextKeys.join() === keys.join() && few === plot.dlaasFew) {
      plot.setData(data);
    } else {
      keys = nextKeys;
      if (plot) plot.destroy();
      plot = new window.uPlot(chartOptions(title, keys, labelOf, width(), few, drawn), data, figure);
      plot.dlaasFew = few;
      plot.root.setAttribute("role", "img");
      plot.root.setAttribute("aria-label", `${title} chart`);
    }
  };
  update(series);
  return { update, figure };
}
