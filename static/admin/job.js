// One job as an operator sees it: input, envelope, metadata, result or error, the timeline of
// its events, the live text, each attempt (worker, outcome, error kind, traceback, tokens,
// cost), its webhook deliveries; Cancel and Retry, each after a confirmation. Read again every
// few seconds until the job ends; the text between reads comes over the events stream.

import { call } from "./api.js";
import { confirmAction } from "./confirm.js";
import { byId, fill, h, json, keepingFolds, row, table } from "./dom.js";
import { count, seconds, shortOf, usd, when } from "./format.js";
import { LiveText } from "./live_text.js";
import { Poller } from "./poller.js";

const REFRESH_MS = 3000;
const ISO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d/;
const KEY_FACTS = new Set([
  "provider", "model", "attempts", "max_attempts", "idempotency_key", "created_at", "started_at",
  "finished_at", "charged_usd",
]);
const TERMINAL = new Set(["succeeded", "failed", "cancelled", "dead"]);
// The job row's fields the header and the blocks below already show; the rest are its facts.
const SHOWN = new Set([
  "id", "short_id", "tenant", "tenant_id", "job_name", "status", "input", "payload", "metadata",
  "result", "error",
]);

export class JobView {
  constructor(onError, navigate) {
    this.onError = onError;
    this.navigate = navigate;
    this.jobId = null;
    this.job = null;
    this.el = {
      title: byId("job-title"),
      status: byId("job-status"),
      facts: byId("job-facts"),
      cancel: byId("job-cancel"),
      retry: byId("job-retry"),
      notice: byId("job-notice"),
      input: byId("job-input"),
      envelope: byId("job-envelope"),
      metadata: byId("job-metadata"),
      outcome: byId("job-outcome"),
      text: byId("job-text"),
      attempts: byId("job-attempts"),
      events: byId("job-events"),
      deliveries: byId("job-deliveries"),
    };
    this.live = new LiveText(this.el.text, byId("job-text-state"), () => this.poller.refresh());
    this.poller = new Poller((signal) => this.load(signal), REFRESH_MS, onError);
    this.el.cancel.addEventListener("click", () => this.cancel());
    this.el.retry.addEventListener("click", () => this.retry());
  }

  show(params, jobId) {
    if (jobId !== this.jobId) {
      this.jobId = jobId;
      this.job = null;
      this.live.stop();
      this.el.title.textContent = "Job";
      this.el.notice.hidden = true;
      for (const name of ["facts", "input", "envelope", "metadata", "outcome", "attempts", "events", "deliveries"]) {
        fill(this.el[name]);
      }
      this.el.text.textContent = "";
    }
    this.poller.start();
  }

  hide() {
    this.poller.stop();
    this.live.stop();
  }

  async load(signal) {
    const data = await call(`/jobs/${encodeURIComponent(this.jobId)}`, { signal });
    if (signal.aborted) return;
    const job = data.job;
    const wasRunning = this.job && !TERMINAL.has(this.job.status);
    this.job = job;
    this.draw(data);
    const ended = TERMINAL.has(job.status);
    if (ended) {
      this.poller.stop();
      this.live.stop();
      this.live.setState("closed");
      this.el.text.textContent = data.text || "";
    } else if (!this.live.source && (data.events_url || data.events_token)) {
      this.live.follow(job.id, data.events_url, data.events_token);
    } else if (!this.live.source && !wasRunning) {
      this.el.text.textContent = data.text || "";
    }
  }

  draw(data) {
    const job = data.job;
    document.title = `Job ${job.short_id} · jobstream admin`;
    this.el.title.textContent = `Job ${job.short_id}`;
    this.el.title.title = job.id;
    this.el.status.textContent = job.status;
    this.el.status.className = `badge status-${job.status}`;
    this.el.cancel.hidden = TERMINAL.has(job.status) || job.status === "cancelling";
    // The API retries a dead job alone (a new job; docs/design.md, "An operator's retry"), once.
    this.el.retry.hidden = job.status !== "dead" || Boolean(job.retried_as);
    if (job.retried_as) this.linkNote("Retried as job ", job.retried_as);
    else if (job.retry_of) this.linkNote("A retry of job ", job.retry_of);
    // What an operator looks for first; the row's other fields behind a fold (on a phone they
    // would push the text and the attempts three screens down).
    const fact = (name, value) => [h("dt", {}, name.replaceAll("_", " ")), h("dd", {}, show(value))];
    const scalars = Object.entries(job).filter(
      ([name, value]) => !SHOWN.has(name) && (value === null || typeof value !== "object"),
    );
    keepingFolds(this.el.facts, () => fill(
      this.el.facts,
      h("dl", { class: "facts" },
        fact("id", h("code", {}, job.id)), fact("job", job.job_name), fact("tenant", job.tenant),
        scalars.filter(([name]) => KEY_FACTS.has(name)).map(([name, value]) => fact(name, value))),
      h("details", { dataset: { fold: "fields" } },
        h("summary", {}, "Every field"),
        h("dl", { class: "facts" }, scalars.filter(([name]) => !KEY_FACTS.has(name)).map(([name, value]) => fact(name, value)))),
    ));
    fill(this.el.input, json(job.input));
    // The envelope: the create as stored (the job's payload: provider, model, limits...).
    fill(this.el.envelope, json(job.payload ?? job.spec ?? job.envelope));
    fill(this.el.metadata, json(job.metadata ?? {}));
    fill(this.el.outcome, job.error ? json(job.error) : json(job.result ?? null));
    this.drawAttempts(data.attempts || []);
    this.drawEvents(data.events || []);
    this.drawDeliveries(data.deliveries || []);
  }

  drawAttempts(attempts) {
    if (!attempts.length) {
      fill(this.el.attempts, h("p", { class: "empty" }, "No attempt yet."));
      return;
    }
    const rows = attempts.flatMap((a) => {
      const line = row(
        [
          [{ class: "num" }, a.attempt],
          h("code", { title: a.worker_id || "" }, shortWorker(a.worker_id)),
          a.outcome ? h("span", { class: `badge outcome-${a.outcome}` }, a.outcome) : "running",
          a.error_class || "",
          [{ class: "num" }, `${count(a.input_tokens)} / ${count(a.output_tokens)}`],
          [{ class: "num", dataset: { cost: a.cost_usd ?? "" } }, usd(a.cost_usd)],
          when(a.started_at),
          a.ended_at ? seconds((new Date(a.ended_at) - new Date(a.started_at)) / 1000) : "–",
        ],
        { dataset: { attempt: a.attempt } },
      );
      if (!a.error_detail && !a.error_trace) return [line];
      // The traceback is the job's own code's: operators only, so it is here and not in the API.
      const detail = h(
        "tr", { class: "attempt-error" },
        h("td", { colSpan: 8 },
          h("p", { class: "error-detail" }, a.error_detail || ""),
          a.error_trace
            ? h("details", { dataset: { fold: `trace-${a.attempt}` } }, h("summary", {}, "Traceback"), h("pre", { class: "trace" }, a.error_trace))
            : null),
      );
      return [line, detail];
    });
    const total = attempts.reduce((sum, a) => sum + Number(a.cost_usd || 0), 0);
    rows.push(row([[{ colSpan: 5 }, h("strong", {}, "Total")], [{ class: "num" }, h("strong", {}, usd(total))], "", ""], { class: "total" }));
    keepingFolds(this.el.attempts, () => fill(
      this.el.attempts,
      table(["#", "Worker", "Outcome", "Error kind", "Tokens in / out", "Cost", "Started", "Took"], rows, {
        "data-testid": "attempts",
      }),
    ));
  }

  drawEvents(events) {
    if (!events.length) {
      fill(this.el.events, h("p", { class: "empty" }, "No events kept."));
      return;
    }
    const items = events.map((e) =>
      h("li", { dataset: { type: e.type } },
        h("time", { dateTime: e.at || "" }, when(e.at)), " ",
        h("span", { class: `badge event-${e.type}` }, e.type), " ",
        e.attempt ? h("span", { class: "muted" }, `attempt ${e.attempt} `) : null,
        h("span", { class: "event-data" }, describe(e))),
    );
    fill(this.el.events, h("ol", { class: "timeline" }, items));
  }

  drawDeliveries(deliveries) {
    if (!deliveries.length) {
      fill(this.el.deliveries, h("p", { class: "empty" }, "No webhook deliveries."));
      return;
    }
    // Whatever columns the server keeps for a delivery, in its order.
    const names = [...new Set(deliveries.flatMap((d) => Object.keys(d)))];
    const cell = (name, value) =>
      value !== null && typeof value === "object" ? h("code", {}, JSON.stringify(value)) : name.endsWith("_at") ? when(value) : value ?? "–";
    fill(
      this.el.deliveries,
      table(names.map((n) => n.replaceAll("_", " ")), deliveries.map((d) => row(names.map((n) => cell(n, d[n]))))),
    );
  }

  async cancel() {
    const job = this.job;
    const ok = await confirmAction({
      title: `Cancel job ${job.short_id}?`,
      message: `${job.job_name} for ${job.tenant} stops: a running attempt is told to end, and the job ends cancelled.`,
      action: "Cancel job",
    });
    if (!ok) return;
    try {
      await call(`/jobs/${encodeURIComponent(job.id)}/cancel`, { method: "POST" });
      this.note(`Cancel asked for job ${job.short_id}.`);
      this.poller.start();
    } catch (err) {
      this.onError(err);
    }
  }

  async retry() {
    const job = this.job;
    const ok = await confirmAction({
      title: `Retry job ${job.short_id}?`,
      message: `A new job runs ${job.job_name} for ${job.tenant} again with the same input; this one stays as it ended.`,
      action: "Retry as a new job",
    });
    if (!ok) return;
    try {
      const made = await call(`/jobs/${encodeURIComponent(job.id)}/retry`, { method: "POST" });
      this.navigate(`#/jobs/${encodeURIComponent(made.job_id)}`);
    } catch (err) {
      this.onError(err);
    }
  }

  note(text) {
    fill(this.el.notice, text);
    this.el.notice.hidden = false;
  }

  linkNote(text, id) {
    fill(this.el.notice, text, h("a", { href: `#/jobs/${encodeURIComponent(id)}`, class: "mono", title: id }, shortOf(id)), ".");
    this.el.notice.hidden = false;
  }
}

function show(value) {
  if (value instanceof Node) return value;
  return ISO_TIME.test(value) ? when(value) : value ?? "–";
}

function shortWorker(id) {
  return id ? String(id).slice(-12) : "–";
}

// An event's data in a line: its status, progress, error or usage; tokens never reach here.
function describe(e) {
  const d = e.data || {};
  if (e.type === "status") return d.status || "";
  if (e.type === "progress") return `${Math.round(Number(d.progress ?? d.value ?? 0) * 100)}% ${d.message || ""}`.trim();
  if (e.type === "attempt_error") return [d.kind || d.error_class, d.message].filter(Boolean).join(": ");
  // A run of text chunks, summed by the server: the text itself is in "Live text".
  if (e.type === "token") return `${count(d.chunks)} chunks, ${count(d.chars)} characters of text`;
  if (e.type === "usage") return `${d.input_tokens ?? "?"} in, ${d.output_tokens ?? "?"} out, ${usd(d.cost_usd)}`;
  const text = JSON.stringify(d);
  return text === "{}" ? "" : text.length > 160 ? `${text.slice(0, 160)}…` : text;
}
