// Building the page: elements, times and the shared controls (alerts, confirmation).

export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

export function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) element.append(child);
  }
  return element;
}

export function main() {
  return document.getElementById("main");
}

export function page(name, title, ...children) {
  document.title = `${title} · dlaas`;
  const root = main();
  root.dataset.page = name;
  root.replaceChildren(h("h1", {}, title), ...children);
  return root;
}

export function alertBox(message) {
  return h("p", { role: "alert", class: "alert" }, message);
}

// Shows an API refusal where the user looks: with the field it names and the fix.
export function showError(container, error) {
  const field = error.field ? ` (${error.field})` : "";
  container.replaceChildren(alertBox(`${error.detail}${field}`));
}

const FINAL = new Set(["COMPLETED", "FAILED"]);
export const isFinal = (state) => FINAL.has(state);

export function stateBadge(state) {
  return h("span", { class: `state state-${state.toLowerCase()}` }, state);
}

export function seconds(ms) {
  return ms / 1000;
}

export function duration(totalSeconds) {
  if (totalSeconds < 10) return `${Math.max(0, totalSeconds).toFixed(1)}s`;
  const s = Math.round(totalSeconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function ago(iso, now = Date.now()) {
  return `${duration((now - Date.parse(iso)) / 1000)} ago`;
}

export function when(iso) {
  const date = new Date(iso);
  return h("time", { datetime: date.toISOString(), title: date.toLocaleString() },
    date.toLocaleString());
}

export function bytes(count) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

// A modal confirmation; resolves true when the user confirms.
export function confirmAction(title, text, action = "Confirm") {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = action;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

export function params() {
  return new URLSearchParams(location.search);
}
