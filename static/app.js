// The page's entry point: one document for `/` (the form) and `/jobs/{id}` (a job's view),
// routed from location.pathname so a job's link opens its view directly, on any device.

import { shortId } from "./api.js";
import { NewJobForm } from "./form.js";
import { JobView } from "./jobview.js";
import { RecentJobs } from "./recent.js";

const byId = (id) => document.getElementById(id);
const JOB_PATH = /^\/jobs\/([^/]+)\/?$/;

const recent = new RecentJobs({
  list: byId("recent-list"), empty: byId("recent-empty"), clear: byId("recent-clear"),
});
const jobView = new JobView(recent);
new NewJobForm(byId("job-form"), (job, prompt) => {
  recent.remember(job, prompt);
  navigate(`/jobs/${job.id}`);
});

function route({ focus }) {
  const match = JOB_PATH.exec(location.pathname);
  byId("new-view").hidden = Boolean(match);
  byId("job-view").hidden = !match;
  if (match) {
    const id = decodeURIComponent(match[1]);
    document.title = `Job ${shortId(id)} · jobstream`;
    recent.setCurrent(id);
    jobView.open(id);
    if (focus) byId("job-title").focus();
  } else {
    document.title = "jobstream";
    jobView.close();
    recent.setCurrent(null);
    if (focus) byId("new-title").focus();
  }
}

function navigate(path) {
  history.pushState(null, "", path);
  route({ focus: true });
}

document.addEventListener("click", (e) => {
  const link = e.target.closest("a[data-nav]");
  if (!link || e.defaultPrevented || e.button !== 0) return;
  if (e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  if (link.pathname !== location.pathname) navigate(link.pathname);
});
// The phone's way to the recent list: a scroll, not a navigation (a fragment link would fire
// popstate, and the route would focus the view's heading back at the top).
byId("to-recent").addEventListener("click", (e) => {
  e.preventDefault();
  byId("recent-title").focus({ preventScroll: true });
  byId("recent-title").scrollIntoView({ block: "start" });
});
window.addEventListener("popstate", () => route({ focus: true }));
window.addEventListener("pagehide", () => jobView.close());

route({ focus: false });
// Back from the back/forward cache: the stream was closed on the way out, follow again.
window.addEventListener("pageshow", (e) => {
  if (e.persisted) route({ focus: false });
});
