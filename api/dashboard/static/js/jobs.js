// The jobs page: filter, search, page by cursor, act, pick jobs to compare; refreshed live.
import { get } from "./api.js";
import { jobActions } from "./actions.js";
import { ago, duration, h, isFinal, page, params, showError, stateBadge } from "./dom.js";

const STATES = ["QUEUED", "DEPLOYING", "DOWNLOADING", "RUNNING", "RECOVERING", "RESCALING",
  "STORING", "COMPLETED", "FAILED", "HALTED"];
const PAGE_SIZE = 50;
const REFRESH_MS = 2000;

function jobDuration(job, now) {
  const end = isFinal(job.state) || job.state === "HALTED" ? Date.parse(job.updated_at) : now;
  return duration((end - Date.parse(job.created_at)) / 1000);
}

function filtersForm(query, user) {
  const state = h("select", { id: "filter-state", name: "state" },
    h("option", { value: "" }, "any state"),
    STATES.map((s) => h("option", { value: s, selected: query.get("state") === s }, s)));
  const name = h("input", {
    id: "filter-name", name: "name", type: "search", value: query.get("name") || "",
    placeholder: "part of a job's name",
  });
  const owner = user.admin ? [
    h("label", { for: "filter-owner" }, "Owner"),
    h("input", { id: "filter-owner", name: "owner", type: "search", value: query.get("owner") || "" }),
  ] : [];
  return h("form", { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("label", { for: "filter-state" }, "State"), state,
    h("label", { for: "filter-name" }, "Name"), name,
    owner,
    h("button", { type: "submit" }, "Filter"));
}

function row(job, selected, now, refresh, report) {
  const box = h("input", {
    type: "checkbox", "aria-label": `Select ${job.name} to compare`, checked: selected.has(job.id),
    onchange: (event) => {
      if (event.target.checked) selected.add(job.id);
      else selected.delete(job.id);
      document.dispatchEvent(new CustomEvent("dlaas:selection"));
    },
  });
  return h("tr", { dataset: { job: job.id, state: job.state } },
    h("td", {}, box),
    h("td", {}, h("a", { href: `/ui/jobs/${encodeURIComponent(job.id)}` }, job.name),
      h("div", { class: "id" }, job.id)),
    h("td", {}, stateBadge(job.state),
      job.reason && (!isFinal(job.state) || job.state === "FAILED")
        ? h("div", { class: "reason" }, job.reason) : null),
    h("td", { class: "num" }, job.learners),
    h("td", {}, job.owner),
    h("td", {}, ago(job.created_at, now)),
    h("td", {}, jobDuration(job, now)),
    h("td", {}, jobActions(job, { onDone: refresh, onError: report })),
  );
}

export async function render({ user }) {
  const query = params();
  const selected = new Set();
  const status = h("div", { "aria-live": "polite" });
  const body = h("tbody");
  const table = h("table", { class: "jobs" },
    h("caption", { class: "visually-hidden" }, "Your jobs, newest first"),
    h("thead", {}, h("tr", {},
      h("th", { scope: "col" }, h("span", { class: "visually-hidden" }, "Select")),
      ["Name", "State", "Learners", "Owner", "Age", "Duration", "Actions"].map((name) =>
        h("th", { scope: "col" }, name)))),
    body);
  const compare = h("button", { type: "button", disabled: true, id: "compare-selected" },
    "Compare selected");
  compare.addEventListener("click", () => {
    location.assign(`/ui/compare?jobs=${[...selected].map(encodeURIComponent).join(",")}`);
  });
  document.addEventListener("dlaas:selection", () => {
    compare.disabled = selected.size < 2;
  });
  const cursor = query.get("cursor");
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  page("jobs", "Jobs",
    h("div", { class: "toolbar" }, filtersForm(query, user),
      h("a", { class: "button", href: "/ui/jobs/new" }, "Submit a job"), compare),
    status, table, pager);

  const refresh = async () => {
    let list;
    try {
      list = await get("/v2/jobs", {
        limit: PAGE_SIZE, cursor, state: query.get("state"), name: query.get("name"),
        owner: query.get("owner"),
      });
    } catch (error) {
      showError(status, error);
      return;
    }
    const now = Date.now();
    const rows = list.jobs.map((job) => row(job, selected, now, refresh, (e) => showError(status, e)));
    if (!rows.length) {
      rows.push(h("tr", {}, h("td", { colspan: 8, class: "empty" },
        cursor || query.toString() ? "No jobs match." :
          "No jobs yet: submit one, or run `dlaas train MANIFEST MODEL_DIR`.")));
    }
    body.replaceChildren(...rows);
    const links = [];
    if (cursor) {
      const first = new URLSearchParams(query);
      first.delete("cursor");
      links.push(h("a", { href: `?${first}` }, "First page"));
    }
    if (list.next) {
      const next = new URLSearchParams(query);
      next.set("cursor", list.next);
      links.push(h("a", { href: `?${next}`, rel: "next" }, "Next page"));
    }
    pager.replaceChildren(...links);
    table.dataset.loaded = "true";
  };
  await refresh();
  performance.mark("dlaas:interactive");
  if (status.querySelector(".alert")) return;
  const timer = setInterval(() => {
    // a row redrawn under the keyboard's focus would drop it
    if (!document.hidden && !body.contains(document.activeElement)) refresh();
  }, REFRESH_MS);
  window.addEventListener("pagehide", () => clearInterval(timer));
}

