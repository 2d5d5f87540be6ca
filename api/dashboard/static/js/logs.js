// A job's log, per learner: the stored part then the live tail, followed as it grows,
// searchable, downloadable. The page keeps the newest lines; the download has them all.
import { download, events } from "./api.js";
import { h, showError } from "./dom.js";

const KEPT_LINES = 20000;

export function logViewer(job, active) {
  const learners = Array.from({ length: job.learners }, (_, i) => i + 1);
  const learner = h("select", { id: "log-learner" },
    learners.length > 1 ? h("option", { value: "" }, "all learners") : null,
    learners.map((n) => h("option", { value: n }, `learner ${n}`)));
  const follow = h("input", { id: "log-follow", type: "checkbox", checked: active });
  const search = h("input", { id: "log-search", type: "search", placeholder: "text in a line" });
  const count = h("span", { class: "help", "aria-live": "polite" });
  const status = h("div", { "aria-live": "polite" });
  const output = h("pre", { class: "log", tabindex: 0, "aria-label": "Log lines" });
  const save = h("button", { type: "button", class: "small" }, "Download log");
  const root = h("section", { "aria-labelledby": "logs-title", class: "card" },
    h("h2", { id: "logs-title" }, "Logs"),
    h("div", { class: "toolbar" },
      h("label", { for: "log-learner" }, "Learner"), learner,
      h("label", { for: "log-follow", class: "check" }, follow, " Follow"),
      h("label", { for: "log-search" }, "Search"), search, save, count),
    status, output);

  let lines = []; // [learner, text]
  let dropped = 0;
  let pending = [];
  let stream = null;
  let lastId = null;
  const shownLearner = () => learner.value;
  const prefix = () => job.learners > 1 && !shownLearner();

  const lineNode = ([from, text]) => {
    const node = h("div", { class: "line" }, prefix() ? `[${from}] ${text}` : text);
    if (text.startsWith("[dlaas]")) node.classList.add("notice");
    return node;
  };
  const matches = ([, text]) => !search.value || text.toLowerCase().includes(search.value.toLowerCase());
  const describe = () => {
    const shown = search.value ? `${lines.filter(matches).length} matching of ` : "";
    const earlier = dropped ? ` (${dropped} earlier lines: download the log for them)` : "";
    count.textContent = `${shown}${lines.length} lines${earlier}`;
  };
  const redraw = () => {
    output.replaceChildren(...lines.filter(matches).map(lineNode));
    describe();
  };
  const flush = () => {
    const batch = pending;
    pending = [];
    if (!batch.length) return;
    const atBottom = output.scrollTop + output.clientHeight >= output.scrollHeight - 8;
    lines.push(...batch);
    const over = lines.length - KEPT_LINES;
    if (over > 0) {
      lines = lines.slice(over);
      dropped += over;
      for (let i = 0; i < over && output.firstChild; i += 1) output.firstChild.remove();
    }
    output.append(...batch.filter(matches).map(lineNode));
    describe();
    if (atBottom || follow.checked) output.scrollTop = output.scrollHeight;
  };
  let flushing = false;
  const queue = (item) => {
    pending.push(item);
    if (!flushing) {
      flushing = true;
      requestAnimationFrame(() => { flushing = false; flush(); });
    }
  };

  const stop = () => { if (stream) stream.abort(); stream = null; };
  const start = async () => {
    stop();
    const controller = new AbortController();
    stream = controller;
    try {
      await events(`/v2/jobs/${job.id}/logs`, { follow: "true", learner: shownLearner() || undefined },
        ({ event, data, id }) => {
          lastId = id;
          if (event === "end") {
            status.replaceChildren(h("p", { class: "help" }, `The job is ${JSON.parse(data).state}; its log is complete.`));
            return;
          }
          const { learner: from, line } = JSON.parse(data);
          queue([from, line]);
        }, { signal: controller.signal, lastEventId: lastId });
    } catch (error) {
      if (error.name !== "AbortError") showError(status, error);
    } finally {
      if (stream === controller) stream = null;
    }
  };
  const restart = () => {
    lines = [];
    dropped = 0;
    lastId = null;
    output.replaceChildren();
    start();
  };
  learner.addEventListener("change", restart);
  follow.addEventListener("change", () => { if (follow.checked) start(); else stop(); });
  search.addEventListener("input", redraw);
  save.addEventListener("click", () => {
    const which = shownLearner();
    download(`/v2/jobs/${job.id}/logs${which ? `?learner=${which}` : ""}`,
      `${job.id}${which ? `-learner-${which}` : ""}.log`).catch((error) => showError(status, error));
  });
  // a finished job's log is read once, whole; a running one's is followed
  start();
  // a halted job that was resumed writes on: follow it again where the view stopped
  const resume = () => { if (!stream) start(); };
  return { root, stop, resume };
}
