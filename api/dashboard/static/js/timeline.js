// A job's history from its events: how long it spent in each state, its restarts (their
// cause, the checkpoint resumed from and the work lost), drawn as a timeline.
import { duration, h, svg } from "./dom.js";

const ENDS = new Set(["COMPLETED", "FAILED"]);

export function stateSpans(events, now) {
  const changes = events.filter((e) => e.to_state).map((e) => ({ state: e.to_state, at: Date.parse(e.time) }));
  changes.sort((a, b) => a.at - b.at);
  return changes.map((change, i) => {
    const last = i === changes.length - 1;
    const end = last ? (ENDS.has(change.state) ? change.at : now) : changes[i + 1].at;
    return { state: change.state, start: change.at, end };
  });
}

export function timeInStates(spans) {
  const totals = new Map();
  for (const span of spans) totals.set(span.state, (totals.get(span.state) || 0) + (span.end - span.start));
  return totals;
}

// Each restart with what it cost: the time since the checkpoint it resumed from (or since
// the learners started, when none had been committed).
export function restarts(events) {
  const sorted = [...events].sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
  let lastCheckpoint = null;
  let runningSince = null;
  const found = [];
  for (const event of sorted) {
    const at = Date.parse(event.time);
    if (event.to_state === "RUNNING" && runningSince === null) runningSince = at;
    if (event.kind === "checkpoint") lastCheckpoint = { name: event.detail.name, at };
    if (event.kind !== "restart") continue;
    const failure = event.detail.failure || {};
    const since = lastCheckpoint ? lastCheckpoint.at : runningSince;
    found.push({
      at,
      learner: failure.learner,
      cause: failure.cause || "exit",
      reason: event.reason,
      checkpoint: failure.checkpoint || (lastCheckpoint ? lastCheckpoint.name : null),
      lostSeconds: since === null ? null : Math.max(0, (at - since) / 1000),
    });
    runningSince = null;
  }
  return found;
}

export function drawTimeline(spans, marks) {
  if (!spans.length) return h("p", {}, "No state changes yet.");
  const start = spans[0].start;
  const end = Math.max(spans[spans.length - 1].end, start + 1);
  const x = (t) => ((t - start) / (end - start)) * 1000;
  const bars = spans.map((span) => svg("rect", {
    x: x(span.start).toFixed(2), y: 8, height: 28,
    width: Math.max(0.5, x(span.end) - x(span.start)).toFixed(2),
    class: `span state-${span.state.toLowerCase()}`,
  }, svg("title", {}, `${span.state}: ${duration((span.end - span.start) / 1000)}`)));
  const ticks = marks.map((mark) => svg("g", { class: "mark" },
    svg("line", { x1: x(mark.at), x2: x(mark.at), y1: 2, y2: 42 }),
    svg("title", {}, mark.label)));
  const label = `Timeline from ${new Date(start).toLocaleString()} to ${new Date(end).toLocaleString()}: ` +
    spans.map((s) => `${s.state} ${duration((s.end - s.start) / 1000)}`).join(", ");
  return svg("svg", {
    class: "timeline", viewBox: "0 0 1000 44", preserveAspectRatio: "none", role: "img", "aria-label": label,
  }, bars, ticks);
}

export function restartList(found) {
  if (!found.length) return h("p", { class: "help" }, "No restarts.");
  return h("ul", { class: "restarts" }, found.map((r) => h("li", {},
    h("strong", {}, `Restart at ${new Date(r.at).toLocaleTimeString()}`),
    ` — learner ${r.learner ?? "?"}, cause ${r.cause}: ${r.reason}. `,
    r.checkpoint ? `Resumed from checkpoint ${r.checkpoint}` : "Started over (no checkpoint yet)",
    r.lostSeconds === null ? "." : `; work lost ${duration(r.lostSeconds)}.`)));
}
