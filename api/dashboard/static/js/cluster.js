// The cluster: each node's capacity and what runs on it, and the queue with each waiting
// job's reason.
import { get } from "./api.js";
import { ago, bytes, duration, h, page, showError } from "./dom.js";

const REFRESH_MS = 3000;

function nodeTable(cluster) {
  return h("table", { class: "compact", "aria-label": "Nodes" },
    h("thead", {}, h("tr", {}, ["Node", "CPUs used / total", "Memory used / total", "GPUs used / total", "Learners"]
      .map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, cluster.nodes.map((node) => h("tr", { dataset: { node: node.name } },
      h("td", {}, node.name),
      h("td", { class: "num" }, `${node.cpus_used ?? "?"} / ${node.cpus}`),
      h("td", { class: "num" }, `${bytes(node.memory_bytes_used ?? 0)} / ${bytes(node.memory_bytes)}`),
      h("td", { class: "num" }, gpus(node)),
      h("td", { class: "num" }, node.learners ?? "?")))));
}

function startsIn(iso) {
  if (!iso) return "-";
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  return seconds <= 0 ? "now" : `in ${duration(seconds)}`;
}

function queueTable(jobs) {
  if (!jobs.length) return h("p", { class: "help" }, "Nothing is waiting.");
  return h("table", { class: "compact", "aria-label": "Queue" },
    h("thead", {}, h("tr", {}, ["Position", "Job", "Team", "Owner", "Waiting", "Why it waits", "Expected start"]
      .map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, jobs.map((job) => h("tr", { dataset: { job: job.id } },
      h("td", { class: "num" }, job.position),
      h("td", {}, h("a", { href: `/ui/jobs/${encodeURIComponent(job.id)}` }, job.name)),
      h("td", {}, job.team),
      h("td", {}, job.owner),
      h("td", {}, ago(job.submitted_at)),
      h("td", { class: "reason" }, job.reason),
      h("td", {}, startsIn(job.estimated_start))))));
}

function gpus(node) {
  const product = node.gpu_product ? ` ${node.gpu_product}${node.pretend_gpus ? " (pretend)" : ""}` : "";
  return `${node.gpus_used ?? "?"} / ${node.gpus}${product}`;
}

export async function render() {
  const status = h("div", { "aria-live": "polite" });
  const nodes = h("section", { class: "card", "aria-labelledby": "nodes-title" });
  const queue = h("section", { class: "card", "aria-labelledby": "queue-title" });
  page("cluster", "Cluster", status, nodes, queue);
  const refresh = async () => {
    try {
      const [cluster, waiting] = await Promise.all([
        get("/v2/cluster"), get("/v2/queue", { limit: 200 })]);
      const jobs = waiting.jobs;
      nodes.replaceChildren(h("h2", { id: "nodes-title" }, `Nodes (${cluster.backend} backend)`),
        cluster.nodes.length ? nodeTable(cluster) : h("p", { class: "help" }, "No nodes reported."),
        h("p", { class: "help" }, `${cluster.active_learners} learners active.`));
      queue.replaceChildren(h("h2", { id: "queue-title" }, `Queue (${jobs.length}${waiting.next ? "+" : ""})`),
        queueTable(jobs));
      status.replaceChildren();
    } catch (error) {
      showError(status, error);
    }
  };
  await refresh();
  const timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  window.addEventListener("pagehide", () => clearInterval(timer));
}
