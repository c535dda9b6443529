// The dashboard's entry point: sections routed by the URL's hash (#/overview, #/jobs,
// #/jobs/{id}, #/dead, #/workers), so /admin/ is one document the server serves as it is and
// every view has a link; the admin key asked for when a call is refused.

import { AdminError, adminKey, refusals } from "./api.js";
import { DeadLetters } from "./dead.js";
import { byId } from "./dom.js";
import { JobView } from "./job.js";
import { JobsList } from "./jobs.js";
import { Overview } from "./overview.js";
import { Workers } from "./workers.js";

const problem = byId("problem");

function showError(err) {
  if (err instanceof AdminError && err.unauthorized) return; // the key form says it
  problem.textContent = err instanceof AdminError ? `${err.message} (HTTP ${err.status})` : `The server cannot be reached: ${err.message}`;
  // An outage passes by itself; a refused action (a 409, say) stays until the next view.
  problem.dataset.passing = String(!(err instanceof AdminError) || err.status >= 500);
  problem.hidden = false;
}

// The server answers again (after a restart, say): the outage's line goes.
refusals.addEventListener("answered", () => {
  if (problem.dataset.passing === "true") problem.hidden = true;
});

const navigate = (hash) => {
  location.hash = hash;
};

const sections = {
  overview: { el: byId("overview"), view: new Overview(showError), title: "Overview" },
  jobs: { el: byId("jobs"), view: new JobsList(showError), title: "Jobs" },
  job: { el: byId("job"), view: new JobView(showError, navigate), title: "Job" },
  dead: { el: byId("dead"), view: new DeadLetters(showError), title: "Dead letters" },
  workers: { el: byId("workers"), view: new Workers(showError), title: "Workers" },
};
let current = null;

function parse(hash) {
  const [path, search = ""] = hash.replace(/^#\/?/, "").split("?");
  const params = new URLSearchParams(search);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) return { name: "job", params, id: parts[1] };
  return { name: sections[parts[0]] ? parts[0] : "overview", params };
}

function route() {
  const { name, params, id } = parse(location.hash);
  problem.hidden = true;
  if (current && current !== sections[name]) current.view.hide();
  current = sections[name];
  for (const section of Object.values(sections)) section.el.hidden = section !== current;
  for (const link of document.querySelectorAll("nav.sections a")) {
    const here = link.dataset.section === (name === "job" ? "jobs" : name);
    if (here) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${current.title} · jobstream admin`;
  current.view.show(params, id);
}

// The key: asked for when a call is refused (401/403), kept in sessionStorage for this tab.
const keyForm = byId("key-form");
const keyInput = byId("key-input");
const forget = byId("key-forget");
function keyState() {
  forget.hidden = !adminKey.get();
}
refusals.addEventListener("refused", (e) => {
  byId("key-reason").textContent = adminKey.get()
    ? `The server refused this key (HTTP ${e.detail.status}): ${e.detail.message}`
    : "This server needs the operator's admin key (JOBSTREAM_ADMIN_KEY).";
  if (!keyForm.hidden) return;
  keyForm.hidden = false;
  keyInput.focus();
});
keyForm.addEventListener("submit", (e) => {
  e.preventDefault();
  adminKey.set(keyInput.value.trim());
  keyInput.value = "";
  keyForm.hidden = true;
  keyState();
  route();
});
forget.addEventListener("click", () => {
  adminKey.clear();
  keyState();
  route();
});

window.addEventListener("hashchange", route);
keyState();
route();
