// Submitting a job: a manifest and the model as a folder or a zip, dropped or picked; the
// upload's progress shown, and the API's refusal shown beside the field it names.
import { ApiError, token } from "./api.js";
import { alertBox, h, page } from "./dom.js";

// what `dlaas train` leaves out of a model folder too
const SKIPPED_DIRS = new Set(["__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache"]);
const SKIPPED_SUFFIXES = [".pyc", ".pyo"];
const REQUEST_FIELDS = new Set(["body", "request", "Authorization", "Content-Length", "Idempotency-Key"]);

function kept(path) {
  const parts = path.split("/");
  return !parts.slice(0, -1).some((part) => SKIPPED_DIRS.has(part)) &&
    !SKIPPED_SUFFIXES.some((suffix) => path.endsWith(suffix));
}

async function zipFolder(files) {
  const entries = {};
  for (const [path, file] of files) {
    if (kept(path)) entries[path] = new Uint8Array(await file.arrayBuffer());
  }
  if (!Object.keys(entries).length) throw new Error("the folder holds no files to send");
  const zipped = window.fflate.zipSync(entries, { level: 6 });
  return new Blob([zipped], { type: "application/zip" });
}

function withoutTopFolder(file) {
  const path = file.webkitRelativePath || file.name;
  return path.includes("/") ? path.slice(path.indexOf("/") + 1) : path;
}

function readEntries(reader) {
  return new Promise((resolve, reject) => reader.readEntries(resolve, reject));
}

async function walk(entry, prefix, found) {
  if (entry.isFile) {
    const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
    found.push([prefix + entry.name, file]);
    return;
  }
  const reader = entry.createReader();
  for (let batch = await readEntries(reader); batch.length; batch = await readEntries(reader)) {
    for (const child of batch) await walk(child, `${prefix}${entry.name}/`, found);
  }
}

function upload(form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/v2/jobs");
    xhr.setRequestHeader("Authorization", `Bearer ${token()}`);
    xhr.setRequestHeader("Idempotency-Key", crypto.randomUUID());
    xhr.responseType = "json";
    xhr.upload.addEventListener("progress", (event) => {
      if (event.lengthComputable) onProgress(event.loaded / event.total);
    });
    xhr.addEventListener("load", () => {
      if (xhr.status === 201) resolve(xhr.response);
      else reject(new ApiError(xhr.status, xhr.response));
    });
    xhr.addEventListener("error", () => reject(new ApiError(0, {
      error: "unreachable", detail: "the upload did not reach dlaas; is it up?",
    })));
    xhr.send(form);
  });
}

function fieldBlock(id, label, input, help) {
  const error = h("p", { id: `${id}-error`, class: "field-error", role: "alert", hidden: true });
  input.setAttribute("aria-describedby", `${id}-help ${id}-error`);
  return {
    error,
    block: h("div", { class: "field", dataset: { field: id } },
      h("label", { for: input.id }, label), input,
      h("p", { id: `${id}-help`, class: "help" }, help), error),
  };
}

export async function render() {
  let manifestFile = null;
  let modelFolder = null; // [[path, File]]
  let modelZip = null;

  const manifestInput = h("input", { id: "manifest", name: "manifest", type: "file", accept: ".yml,.yaml,text/yaml" });
  const folderInput = h("input", { id: "model-folder", type: "file", webkitdirectory: true, multiple: true });
  const zipInput = h("input", { id: "model-zip", type: "file", accept: ".zip,application/zip" });
  const manifest = fieldBlock("manifest", "Manifest (YAML)", manifestInput,
    "The job's manifest.yml: learners, resources, framework command.");
  const model = fieldBlock("model", "Model folder", folderInput,
    "The folder with the training code, or a zip of it below.");
  const zipLabel = h("div", { class: "field" }, h("label", { for: "model-zip" }, "or a model archive (.zip)"), zipInput);
  const chosen = h("p", { class: "chosen", "aria-live": "polite" });
  const progress = h("progress", { max: 1, value: 0, hidden: true, "aria-label": "Upload progress" });
  const status = h("div", { "aria-live": "polite" });
  const send = h("button", { type: "submit" }, "Submit job");
  const drop = h("div", { class: "drop", tabindex: -1 },
    "Drop a manifest and a model folder or zip here, or pick them below.");

  const describe = () => {
    const what = [];
    if (manifestFile) what.push(`manifest ${manifestFile.name}`);
    if (modelFolder) what.push(`model folder (${modelFolder.length} files)`);
    if (modelZip) what.push(`model archive ${modelZip.name}`);
    chosen.textContent = what.length ? `Chosen: ${what.join(", ")}` : "";
  };
  manifestInput.addEventListener("change", () => { manifestFile = manifestInput.files[0] || null; describe(); });
  folderInput.addEventListener("change", () => {
    modelFolder = [...folderInput.files].map((file) => [withoutTopFolder(file), file]);
    modelZip = null;
    zipInput.value = "";
    describe();
  });
  zipInput.addEventListener("change", () => {
    modelZip = zipInput.files[0] || null;
    modelFolder = null;
    folderInput.value = "";
    describe();
  });
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    for (const item of [...event.dataTransfer.items]) {
      const entry = item.webkitGetAsEntry && item.webkitGetAsEntry();
      if (entry && entry.isDirectory) {
        const found = [];
        const reader = entry.createReader();
        for (let batch = await readEntries(reader); batch.length; batch = await readEntries(reader)) {
          for (const child of batch) await walk(child, "", found);
        }
        modelFolder = found;
        modelZip = null;
        continue;
      }
      const file = item.getAsFile();
      if (!file) continue;
      if (/\.ya?ml$/i.test(file.name)) manifestFile = file;
      else if (/\.zip$/i.test(file.name)) { modelZip = file; modelFolder = null; }
    }
    describe();
  });

  const clearErrors = () => {
    for (const block of [manifest, model]) { block.error.hidden = true; block.error.textContent = ""; }
    status.replaceChildren();
  };
  const showRefusal = (error) => {
    const field = error.field || "";
    // the API names a manifest's own field by its path in the manifest (learners,
    // data_stores[0].training_data.container); the request's fields by their own names
    const block = field.startsWith("model") ? model
      : !field || REQUEST_FIELDS.has(field) ? null : manifest;
    const named = field && field !== "manifest" && field !== "model" ? ` (${field})` : "";
    if (block) {
      block.error.textContent = `${error.detail}${named}`;
      block.error.hidden = false;
    } else {
      status.replaceChildren(alertBox(`${error.detail}${named}`));
    }
  };

  const form = h("form", { class: "card", dataset: { form: "submit" } },
    drop, manifest.block, model.block, zipLabel, chosen, progress, status, send);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    if (!manifestFile) return showRefusal({ field: "manifest", detail: "choose the job's manifest (a .yml file)" });
    if (!modelFolder && !modelZip) return showRefusal({ field: "model", detail: "choose the model folder or its zip" });
    send.disabled = true;
    try {
      const archive = modelZip || await zipFolder(modelFolder);
      const body = new FormData();
      body.append("manifest", manifestFile, manifestFile.name);
      body.append("model", archive, modelZip ? modelZip.name : "model.zip");
      progress.hidden = false;
      const job = await upload(body, (share) => { progress.value = share; });
      const jobPage = `/ui/jobs/${encodeURIComponent(job.id)}`;
      const warnings = job.warnings || [];
      if (!warnings.length) return location.assign(jobPage);
      // accepted, but the API has something to say of the manifest: say it before leaving
      progress.hidden = true;
      status.replaceChildren(
        h("div", { role: "status", class: "alert", dataset: { warnings: "" } },
          h("p", {}, `Submitted ${job.id}, with ${warnings.length === 1 ? "a warning" : "warnings"}:`),
          h("ul", {}, ...warnings.map((warning) => h("li", {}, warning))),
          h("a", { href: jobPage }, "Open the job")));
    } catch (error) {
      progress.hidden = true;
      showRefusal(error instanceof ApiError ? error : { detail: error.message });
    } finally {
      send.disabled = false;
    }
  });
  page("submit", "Submit a job", form);
}
