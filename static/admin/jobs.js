// Jobs: every tenant's jobs, newest first, filtered by status, job name, tenant, time range and
// a search (id, idempotency key, metadata), a page at a time. Paging is the server's keyset:
// "Next" sends its next_cursor; the cursors behind us are kept, so "Previous" is exact too.

import { call, query } from "./api.js";
import { byId, fill, h, row, table } from "./dom.js";
import { count, usd, when } from "./format.js";

const PAGE_SIZE = 25;

export class JobsList {
  constructor(onError) {
    this.onError = onError;
    this.form = byId("jobs-filters");
    this.results = byId("jobs-results");
    this.summary = byId("jobs-summary");
    this.next = byId("jobs-next");
    this.previous = byId("jobs-previous");
    this.cursors = [null]; // the cursor of each page shown so far; the last is this page's
    this.nextCursor = null;
    this.stopper = null;
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.cursors = [null];
      this.load();
    });
    this.form.addEventListener("reset", () => setTimeout(() => this.form.requestSubmit()));
    this.next.addEventListener("click", () => {
      this.cursors.push(this.nextCursor);
      this.load();
    });
    this.previous.addEventListener("click", () => {
      this.cursors.pop();
      this.load();
    });
  }

  show(params) {
    // A link may carry filters (#/jobs?status=dead&job=...): the overview's counts link here.
    if (params.size) {
      for (const field of this.form.elements) {
        if (field.name) field.value = params.get(field.name) || "";
      }
      this.cursors = [null];
    }
    this.load();
  }

  hide() {
    if (this.stopper) this.stopper.abort();
  }

  filters() {
    const values = Object.fromEntries(new FormData(this.form));
    // datetime-local is the browser's local time, without a zone: sent as an instant.
    for (const name of ["since", "until"]) {
      if (values[name]) values[name] = new Date(values[name]).toISOString();
    }
    values.q = (values.q || "").trim();
    return values;
  }

  async load() {
    if (this.stopper) this.stopper.abort();
    const stopper = new AbortController();
    this.stopper = stopper;
    const cursor = this.cursors[this.cursors.length - 1];
    const filters = this.filters();
    this.results.setAttribute("aria-busy", "true");
    let data;
    try {
      data = await call(`/jobs${query({ ...filters, cursor, limit: PAGE_SIZE })}`, { signal: stopper.signal });
    } catch (err) {
      if (!stopper.signal.aborted) this.onError(err);
      return;
    } finally {
      if (this.stopper === stopper) this.results.removeAttribute("aria-busy");
    }
    if (stopper.signal.aborted) return;
    this.nextCursor = data.next_cursor || null;
    this.draw(data.jobs || []);
    // Which filters and page the table shows (the form may say more already): for whoever
    // reads the page by script, a browser test among them, to know the answer is this one's.
    this.results.dataset.filters = JSON.stringify(Object.fromEntries(Object.entries(filters).filter(([, v]) => v)));
    this.results.dataset.page = String(this.cursors.length);
  }

  draw(jobs) {
    const page = this.cursors.length;
    // A page reads a bounded stretch of history (admin_jobs.py): a rare match can leave one
    // empty with more behind it, which "Next" reads.
    if (jobs.length) {
      this.summary.textContent = `Page ${page}: ${count(jobs.length)} job${jobs.length === 1 ? "" : "s"}${this.nextCursor ? ", more after" : ""}`;
    } else if (this.nextCursor) {
      this.summary.textContent = `Page ${page}: none in this stretch of history; Next reads further back.`;
    } else {
      this.summary.textContent = page > 1 ? `Page ${page}: no more jobs.` : "No job matches.";
    }
    this.next.disabled = !this.nextCursor;
    this.previous.disabled = page === 1;
    if (!jobs.length) {
      fill(this.results);
      return;
    }
    const rows = jobs.map((job) =>
      row(
        [
          h("a", { href: `#/jobs/${encodeURIComponent(job.id)}`, class: "mono", title: job.id }, job.short_id),
          job.job_name,
          job.tenant,
          h("span", { class: `badge status-${job.status}` }, job.status),
          when(job.created_at),
          when(job.finished_at),
          [{ class: "num" }, count(job.attempts)],
          [{ class: "num" }, usd(job.cost_usd)],
          job.error_class || "",
        ],
        { dataset: { id: job.id } },
      ),
    );
    fill(
      this.results,
      table(["Job id", "Job", "Tenant", "Status", "Created", "Finished", "Attempts", "Cost", "Error"], rows, {
        "data-testid": "jobs-table",
      }),
    );
  }
}
