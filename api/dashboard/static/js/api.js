// The dashboard's client of the /v2 API: the same bearer token, errors and cursors as the CLI.

const TOKEN_KEY = "dlaas.token";

export function token() {
  return localStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  localStorage.setItem(TOKEN_KEY, value);
}

export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
}

// A refusal of the API's: `field` names what to fix, `detail` says how.
export class ApiError extends Error {
  constructor(status, body) {
    const detail = (body && body.detail) || `the API answered ${status}`;
    super(detail);
    this.status = status;
    this.code = (body && body.error) || "error";
    this.detail = detail;
    this.field = (body && body.field) || null;
  }
}

function headers(extra) {
  const all = { ...extra };
  const current = token();
  if (current) all.Authorization = `Bearer ${current}`;
  return all;
}

async function refusal(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (response.status === 401) window.dispatchEvent(new CustomEvent("dlaas:unauthorized"));
  return new ApiError(response.status, body);
}

export async function request(method, path, { body, query, raw, signal } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value === undefined || value === null || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) url.searchParams.append(name, one);
  }
  const extra = {};
  if (method !== "GET" && method !== "HEAD") extra["Idempotency-Key"] = crypto.randomUUID();
  if (body !== undefined && !(body instanceof FormData)) extra["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(url, {
      method,
      headers: headers(extra),
      body: body === undefined || body instanceof FormData ? body : JSON.stringify(body),
      signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, { error: "unreachable", detail: "the dlaas API did not answer; is it up?" });
  }
  if (!response.ok) throw await refusal(response);
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

export const get = (path, query, options) => request("GET", path, { ...options, query });
export const post = (path, body) => request("POST", path, { body });
export const del = (path) => request("DELETE", path);

// Every item of a paged list, following `next` until the end or `max` items.
export async function all(path, key, query = {}, max = Infinity) {
  const items = [];
  let cursor = null;
  do {
    const page = await get(path, { ...query, limit: 1000, cursor });
    items.push(...page[key]);
    cursor = page.next;
  } while (cursor && items.length < max);
  return items;
}

// A file the API serves, saved by the browser under `name`.
export async function download(path, name) {
  const response = await request("GET", path, { raw: true });
  const blob = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
}

// Server-Sent Events over fetch (EventSource cannot send the bearer token). Calls
// onEvent({event, data, id}) per event; resolves when the stream ends or `signal` aborts.
export async function events(path, query, onEvent, { signal, lastEventId } = {}) {
  const extra = { Accept: "text/event-stream" };
  if (lastEventId) extra["Last-Event-ID"] = lastEventId;
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null) url.searchParams.set(name, value);
  }
  const response = await fetch(url, { headers: headers(extra), signal });
  if (!response.ok) throw await refusal(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = "message";
  let data = [];
  let id = lastEventId || null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut).replace(/\r$/, "");
      buffer = buffer.slice(cut + 1);
      if (line === "") {
        if (data.length) onEvent({ event, data: data.join("\n"), id });
        event = "message";
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const name = colon < 0 ? line : line.slice(0, colon);
      let field = colon < 0 ? "" : line.slice(colon + 1);
      if (field.startsWith(" ")) field = field.slice(1);
      if (name === "data") data.push(field);
      else if (name === "event") event = field;
      else if (name === "id") id = field;
    }
  }
}
