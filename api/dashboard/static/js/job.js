// A job's page: summary, timeline, logs, metric charts, checkpoints and results.
import { all, download, get } from "./api.js";
import { jobActions } from "./actions.js";
import { byMetric, metricChart, throughput } from "./charts.js";
import { alertBox, bytes, duration, h, isFinal, page, showError, stateBadge, when } from "./dom.js";
import { logViewer } from "./logs.js";
import { watchPoints } from "./metrics.js";
import { drawTimeline, restartList, restarts, stateSpans, timeInStates } from "./timeline.js";

const REFRESH_MS = 2000;
const HISTORY_EVERY = 5;
const STOPPED = new Set(["COMPLETED", "FAILED", "HALTED"]);

// The learners the job runs at now (an elastic job's change as it is resized), and the range
// an elastic job may take.
function learnerCount(job) {
  const elastic = job.manifest.elastic;
  if (!elastic) return String(job.learners);
  const most = elastic.max_learners ?? "any";
  return `${job.learners} (elastic, ${elastic.min_learners ?? 1} to ${most})`;
}

function resources(job) {
  const manifest = job.manifest;
  const fields = [["cpus", "CPUs per learner"], ["gpus", "GPUs per learner"], ["memory", "Memory per learner"]];
  return [["Learners", learnerCount(job)], ...fields.filter(([key]) => manifest[key] !== undefined)
    .map(([key, label]) => [label, key === "memory" ? bytes(manifest[key]) : String(manifest[key])])];
}

function definitionList(pairs) {
  return h("dl", { class: "facts" }, pairs.flatMap(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]));
}

function summary(job, events, now) {
  const spans = stateSpans(events, now);
  const totals = timeInStates(spans);
  const took = (isFinal(job.state) ? Date.parse(job.updated_at) : now) - Date.parse(job.created_at);
  return [
    definitionList([
      ["State", stateBadge(job.state)],
      ["Reason", job.reason || "—"],
      ["Owner", job.owner],
      ["Submitted", when(job.created_at)],
      ["Duration", duration(took / 1000)],
      ["Attempt", String(job.attempt)],
      ["Restarts", String(job.restarts)],
      ...resources(job),
    ]),
    h("table", { class: "compact", "aria-label": "Time in each state" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "State"), h("th", { scope: "col" }, "Time"))),
      h("tbody", {}, [...totals].map(([state, ms]) =>
        h("tr", {}, h("td", {}, stateBadge(state)), h("td", {}, duration(ms / 1000)))))),
  ];
}

function fileTable(jobId, kind, files) {
  if (!files.length) return h("p", { class: "help" }, `No ${kind} yet.`);
  return h("table", { class: "compact", "aria-label": kind },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "File"), h("th", { scope: "col" }, "Size"),
      h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Download")))),
    h("tbody", {}, files.map((file) => h("tr", {},
      h("td", {}, file.path), h("td", { class: "num" }, bytes(file.size)),
      h("td", {}, h("button", {
        type: "button", class: "small", "aria-label": `Download ${file.path}`,
        onclick: () => download(`/v2/jobs/${jobId}/${kind}/${file.path.split("/").map(encodeURIComponent).join("/")}`,
          file.path.split("/").pop()),
      }, "Download"))))));
}

function eventList(events) {
  return h("ol", { class: "events" }, events.map((event) => h("li", {},
    when(event.time), " ",
    h("span", { class: "kind" }, event.kind),
    event.to_state ? [" ", event.from_state || "", " → ", stateBadge(event.to_state)] : null,
    event.reason ? ` — ${event.reason}` : "")));
}

export async function render({ args: [jobId] }) {
  let job;
  try {
    job = await get(`/v2/jobs/${jobId}`);
  } catch (error) {
    page("job", "Job not found", alertBox(`${error.detail}`),
      h("p", {}, h("a", { href: "/ui/" }, "Back to the jobs")));
    return;
  }
  const status = h("div", { "aria-live": "polite" });
  const header = h("div", { class: "job-head" });
  const summaryCard = h("section", { class: "card", "aria-labelledby": "summary-title" });
  const timelineCard = h("section", { class: "card", "aria-labelledby": "timeline-title" });
  const charts = h("div", { class: "charts" });
  const chartsCard = h("section", { class: "card", "aria-labelledby": "charts-title" },
    h("h2", { id: "charts-title" }, "Metrics"), charts);
  const filesCard = h("section", { class: "card", "aria-labelledby": "files-title" });
  const manifestCard = h("details", { class: "card" },
    h("summary", {}, "Manifest"), h("pre", {}, JSON.stringify(job.manifest, null, 2)));
  const viewer = logViewer(job, !STOPPED.has(job.state));
  page("job", job.name, header, status, summaryCard, timelineCard, viewer.root, chartsCard, filesCard, manifestCard);
  document.getElementById("main").dataset.job = job.id;

  const drawHeader = () => {
    header.replaceChildren(h("span", { class: "id" }, job.id), " ", stateBadge(job.state), " ",
      jobActions(job, { onDone: refresh, onError: (e) => showError(status, e) }));
    header.dataset.state = job.state;
  };
  const drawHistory = async () => {
    const events = await all(`/v2/jobs/${job.id}/events`, "events");
    const now = Date.now();
    summaryCard.replaceChildren(h("h2", { id: "summary-title" }, "Summary"), ...summary(job, events, now));
    const found = restarts(events);
    const marks = found.map((r) => ({ at: r.at, label: `restart: ${r.cause}` }))
      .concat(events.filter((e) => e.kind === "checkpoint")
        .map((e) => ({ at: Date.parse(e.time), label: `checkpoint ${e.detail.name}` })));
    timelineCard.replaceChildren(h("h2", { id: "timeline-title" }, "Timeline"),
      drawTimeline(stateSpans(events, now), marks), restartList(found),
      h("details", {}, h("summary", {}, `All events (${events.length})`), eventList(events)));
  };
  const drawFiles = async () => {
    const [checkpoints, results] = await Promise.all([
      all(`/v2/jobs/${job.id}/checkpoints`, "files"), all(`/v2/jobs/${job.id}/results`, "files")]);
    filesCard.replaceChildren(h("h2", { id: "files-title" }, "Checkpoints and results"),
      h("h3", {}, "Checkpoints"), fileTable(job.id, "checkpoints", checkpoints),
      h("h3", {}, "Results"), fileTable(job.id, "results", results));
  };

  const chartsByMetric = new Map();
  const label = (learner) => `learner ${learner}`;
  const drawCharts = (points) => {
    if (!points.length) {
      if (!charts.children.length) charts.append(h("p", { class: "help", id: "no-metrics" }, "No metrics yet."));
      return;
    }
    document.getElementById("no-metrics")?.remove();
    const metrics = byMetric(points, (p) => p.learner);
    const rate = throughput(points, (p) => p.learner);
    if (rate.size && !metrics.has("throughput")) metrics.set("throughput (steps/s)", rate);
    for (const [name, series] of metrics) {
      if (chartsByMetric.has(name)) chartsByMetric.get(name).update(series);
      else chartsByMetric.set(name, metricChart(charts, name, series, label));
    }
  };
  const stopCharts = watchPoints(job.id, drawCharts, () => !isFinal(job.state));

  // The job is read every tick; its events and files (whole lists) when it changed, or
  // every few ticks for the checkpoints a running job commits meanwhile.
  let tick = 0;
  let seen = "";
  async function refresh() {
    try {
      job = await get(`/v2/jobs/${job.id}`);
    } catch (error) {
      showError(status, error);
      if (error.status === 404) { clearInterval(timer); stopCharts(); viewer.stop(); }
      return;
    }
    status.replaceChildren();
    if (header.dataset.state !== job.state) {
      if (STOPPED.has(header.dataset.state) && !STOPPED.has(job.state)) viewer.resume();
      drawHeader();
    }
    const version = `${job.state}|${job.attempt}|${job.restarts}|${job.updated_at}`;
    tick += 1;
    if (version === seen && tick % HISTORY_EVERY !== 0) return;
    seen = version;
    await Promise.all([drawHistory(), drawFiles()]).catch((error) => showError(status, error));
  }
  drawHeader();
  await refresh();
  const timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
  window.addEventListener("pagehide", () => { clearInterval(timer); stopCharts(); viewer.stop(); });
}
