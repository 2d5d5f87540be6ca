// Compare: several jobs' metric curves overlaid, one chart per metric.
import { get } from "./api.js";
import { allPoints } from "./metrics.js";
import { byMetric, metricChart } from "./charts.js";
import { alertBox, h, page, params, stateBadge } from "./dom.js";

function picker(chosen) {
  const input = h("input", {
    id: "compare-jobs", name: "jobs", value: chosen.join(","), placeholder: "job ids, comma-separated",
    "aria-describedby": "compare-help",
  });
  return h("form", { class: "filters", "aria-label": "Jobs to compare" },
    h("label", { for: "compare-jobs" }, "Jobs"), input,
    h("button", { type: "submit" }, "Compare"),
    h("p", { id: "compare-help", class: "help" },
      "Pick jobs on the jobs page and press Compare selected, or list their ids here."));
}

export async function render() {
  const chosen = (params().get("jobs") || "").split(",").map((s) => s.trim()).filter(Boolean);
  const legend = h("ul", { class: "legend" });
  const charts = h("div", { class: "charts" });
  const status = h("div", { "aria-live": "polite" });
  page("compare", "Compare jobs", picker(chosen), status, legend, charts);
  if (chosen.length < 2) {
    status.replaceChildren(h("p", { class: "help" }, "Choose at least two jobs."));
    return;
  }
  const loaded = await Promise.all(chosen.map(async (id) => {
    try {
      const [job, points] = await Promise.all([get(`/v2/jobs/${id}`), allPoints(id)]);
      return { job, points };
    } catch (error) {
      return { id, error };
    }
  }));
  const problems = loaded.filter((one) => one.error);
  if (problems.length) {
    status.replaceChildren(...problems.map((one) => alertBox(`${one.id}: ${one.error.detail}`)));
  }
  const jobs = loaded.filter((one) => !one.error);
  legend.replaceChildren(...jobs.map(({ job }) => h("li", {},
    h("a", { href: `/ui/jobs/${encodeURIComponent(job.id)}` }, job.name), " ", h("span", { class: "id" }, job.id),
    " ", stateBadge(job.state))));
  const names = new Map(jobs.map(({ job }) => [job.id, job.name === job.id ? job.id : `${job.name} (${job.id})`]));
  const points = jobs.flatMap(({ job, points: list }) => list.map((p) => ({ ...p, job: job.id })));
  // one curve per job: its first learner's, as every learner of a job trains one model
  const metrics = byMetric(points.filter((p) => p.learner === 1), (p) => p.job);
  if (!metrics.size) charts.append(h("p", { class: "help" }, "These jobs reported no metrics."));
  for (const [name, series] of metrics) metricChart(charts, name, series, (id) => names.get(id));
}
