// Halt, resume and delete, with confirmation where work would be lost.
import { del, post } from "./api.js";
import { confirmAction, h, isFinal } from "./dom.js";

const HALTABLE = new Set(["QUEUED", "DEPLOYING", "DOWNLOADING", "RUNNING", "RECOVERING", "RESCALING"]);

export function jobActions(job, { onDone, onError }) {
  const run = async (work) => {
    try {
      await work();
      onDone();
    } catch (error) {
      onError(error);
    }
  };
  const label = job.name || job.id;
  const buttons = [];
  if (HALTABLE.has(job.state)) {
    buttons.push(h("button", {
      type: "button", class: "small", "aria-label": `Halt ${label}`,
      onclick: () => run(() => post(`/v2/jobs/${job.id}/halt`)),
    }, "Halt"));
  }
  if (job.state === "HALTED") {
    buttons.push(h("button", {
      type: "button", class: "small", "aria-label": `Resume ${label}`,
      onclick: () => run(() => post(`/v2/jobs/${job.id}/resume`)),
    }, "Resume"));
  }
  buttons.push(h("button", {
    type: "button", class: "small danger", "aria-label": `Delete ${label}`,
    onclick: async () => {
      const lost = isFinal(job.state) ? "" : " It stops its learners first.";
      const sure = await confirmAction(
        `Delete ${label}?`,
        `Its logs, checkpoints and results are deleted with it.${lost}`,
        "Delete",
      );
      if (sure) await run(() => del(`/v2/jobs/${job.id}`));
    },
  }, "Delete"));
  return h("span", { class: "actions" }, buttons);
}
