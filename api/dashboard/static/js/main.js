// Signs in, then draws the page the path names.
import { ApiError, forgetToken, get, setToken, token } from "./api.js";
import { alertBox, h, page } from "./dom.js";

const PAGES = [
  [/^\/ui\/?$/, "jobs", () => import("./jobs.js")],
  [/^\/ui\/jobs\/new\/?$/, "submit", () => import("./submit.js")],
  [/^\/ui\/jobs\/([^/]+)\/?$/, "jobs", () => import("./job.js")],
  [/^\/ui\/compare\/?$/, "compare", () => import("./compare.js")],
  [/^\/ui\/cluster\/?$/, "cluster", () => import("./cluster.js")],
];

function takeTokenFromLink() {
  // `dlaas up` and `dlaas ui` link to /ui/#token=...: the fragment never reaches a server
  const match = location.hash.match(/^#token=([^&]+)/);
  if (!match) return false;
  setToken(decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + location.search);
  return true;
}

async function whoAmI() {
  try {
    return await get("/v2/users/me");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return null;
    throw error;
  }
}

function showSignedOut() {
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  document.getElementById("who-name").textContent = "";
}

function signInForm(problem) {
  showSignedOut();
  const input = h("input", {
    id: "token", name: "token", type: "password", autocomplete: "current-password",
    required: true, "aria-describedby": "token-help",
  });
  const status = h("div", { "aria-live": "polite" }, problem ? alertBox(problem) : null);
  const form = h("form", { class: "card narrow", dataset: { form: "signin" } },
    h("label", { for: "token" }, "API token"),
    input,
    h("p", { id: "token-help", class: "help" },
      "dlaas up prints a sign-in link; the token is also in ~/.dlaas/client.json ",
      "(or ask your admin for one)."),
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    const user = await whoAmI().catch(() => null);
    if (user) {
      location.reload();
    } else {
      forgetToken();
      status.replaceChildren(alertBox("dlaas does not know this token: check it and try again."));
      input.focus();
    }
  });
  page("signin", "Sign in to dlaas", form);
  input.focus();
}

function showSignedIn(user, section) {
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = false;
  document.getElementById("who-name").textContent = user.admin ? `${user.name} (admin)` : user.name;
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === section) link.setAttribute("aria-current", "page");
  }
  document.getElementById("sign-out").addEventListener("click", () => {
    forgetToken();
    location.assign("/ui/");
  });
}

async function start() {
  takeTokenFromLink();
  // the link opened in a tab already showing the dashboard changes only the fragment
  window.addEventListener("hashchange", () => { if (takeTokenFromLink()) location.reload(); });
  if (!token()) return signInForm();
  let user;
  try {
    user = await whoAmI();
  } catch (error) {
    page("error", "dlaas is not answering", alertBox(error.message));
    return;
  }
  if (!user) {
    forgetToken();
    return signInForm("dlaas does not know this token: sign in again.");
  }
  // a token revoked while a page is open
  window.addEventListener("dlaas:unauthorized", () => {
    forgetToken();
    signInForm("Your token is no longer accepted: sign in again.");
  });
  for (const [pattern, section, load] of PAGES) {
    const match = location.pathname.match(pattern);
    if (!match) continue;
    showSignedIn(user, section);
    const module = await load();
    await module.render({ user, args: match.slice(1).map(decodeURIComponent) });
    return;
  }
  showSignedIn(user, "");
  page("missing", "No such page", h("p", {}, h("a", { href: "/ui/" }, "Back to the jobs")));
}

start();
