// Metric charts with uPlot: one chart per metric, a series per learner (or per job when
// comparing), plus the training throughput in steps a second.

const COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

export function colour(index) {
  return COLOURS[index % COLOURS.length];
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
  return metrics;
}

// Steps a second over a sliding window of each series' points.
export function throughput(points, seriesOf, window = 10) {
  const bySeries = new Map();
  for (const point of points) {
    if (point.step === null || point.step === undefined) continue;
    const key = seriesOf(point);
    if (!bySeries.has(key)) bySeries.set(key, []);
    bySeries.get(key).push(point);
  }
  const series = new Map();
  for (const [key, list] of bySeries) {
    const rates = [];
    for (let i = window; i < list.length; i += 1) {
      const seconds = list[i].time - list[i - window].time;
      if (seconds > 0) rates.push([list[i].step, (list[i].step - list[i - window].step) / seconds]);
    }
    if (rates.length) series.set(key, rates);
  }
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
