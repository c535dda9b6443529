// The job view at /jobs/{id}: renders what the JobFollower reports, and the cancel button.

import { ApiError, TERMINAL, formatCost, formatTime, getJob, jobTypes, request, shortId } from "./api.js";
import { historyRow, jobLink } from "./history.js";
import { JobFollower } from "./stream.js";
import { renderValue } from "./structured.js";

// Screen readers get the new text in batches at this pace, not one announcement per token.
const ANNOUNCE_MS = 4000;
const ANNOUNCE_MAX_CHARS = 600;
const DETAILS_MIN_GAP_MS = 1000;
const CANCELLABLE = new Set(["queued", "running"]);
const BUILT_IN = "llm";

const CONNECTION_TEXT = {
  idle: "",
  connecting: "connecting…",
  live: "live",
  reconnecting: "reconnecting…",
  polling: "polling",
  "polling-retry": "polling: server unreachable, retrying…",
  unreachable: "server unreachable, retrying…",
  closed: "",
};

const byId = (id) => document.getElementById(id);

export class JobView {
  constructor(recent) {
    this.recent = recent;
    this.el = {
      id: byId("job-id"), status: byId("job-status"), connection: byId("connection"),
      prompt: byId("job-prompt"), missing: byId("job-missing"), error: byId("job-error"),
      lineage: byId("job-lineage"),
      notes: byId("notes"), output: byId("output"), placeholder: byId("output-placeholder"),
      attempt: byId("output-attempt"), announcer: byId("announcer"), cancel: byId("cancel"),
      copy: byId("copy-link"), actionNote: byId("action-note"), attempts: byId("fact-attempts"),
      provider: byId("fact-provider"), tokens: byId("fact-tokens"), cost: byId("fact-cost"),
      created: byId("fact-created"), seq: byId("fact-seq"), history: byId("history"),
      historyRows: byId("history-rows"), historyFoot: byId("history-foot"), view: byId("job-view"),
      input: byId("job-input"), jobName: byId("job-name"), inputValues: byId("job-input-values"),
      progress: byId("progress"), progressBar: byId("progress-bar"), progressText: byId("progress-text"),
      resultCard: byId("result-card"), resultOutput: byId("result-output"),
    };
    // One text node, appended to: a long answer costs no re-layout of the whole string per token.
    this.text = document.createTextNode("");
    this.el.output.append(this.text);
    this.el.cancel.addEventListener("click", () => this.cancel());
    this.el.copy.addEventListener("click", () => this.copyLink());
    this.follower = null;
  }

  open(jobId) {
    this.close();
    this.jobId = jobId;
    this.job = null;
    this.statusValue = "";
    this.maxAttempts = null;
    this.usageByAttempt = new Map();
    this.failureNoted = new Set();
    this.announced = 0;
    this.pollingNoted = false;
    this.detailsAt = 0;
    this.detailsTimer = null;
    this.el.id.textContent = shortId(jobId);
    this.el.id.title = jobId;
    const prompt = this.recent.promptOf(jobId);
    this.el.prompt.textContent = prompt || "";
    this.el.prompt.hidden = !prompt;
    for (const key of ["missing", "error", "history", "lineage", "input", "resultCard"]) {
      this.el[key].hidden = true;
    }
    this.clearProgress();
    delete this.el.view.dataset.missing;
    this.el.notes.replaceChildren();
    this.el.actionNote.textContent = "";
    this.el.announcer.textContent = "";
    this.setText("");
    this.setStatus("");
    this.renderFacts();
    this.connection("idle");
    this.announceTimer = setInterval(() => this.announce(), ANNOUNCE_MS);
    this.follower = new JobFollower(this);
    this.follower.follow(jobId);
  }

  close() {
    if (this.follower) this.follower.stop();
    this.follower = null;
    clearInterval(this.announceTimer);
    clearTimeout(this.detailsTimer);
  }

  // --- what the follower reports -------------------------------------------------------------

  snapshot(job) {
    this.job = job;
    // The server's prompt: a job made elsewhere (the API, another device) is in no recent list,
    // and for a conversation (`messages`) it is the last user message.
    if (job.prompt) {
      this.el.prompt.textContent = job.prompt;
      this.el.prompt.hidden = false;
    }
    if (job.job && job.job !== BUILT_IN) this.showInput(job);
    if (job.status === "succeeded" && job.result) this.showOutput(job.result);
    // The current attempt's last progress: the bar where it is, not empty until the next event
    // (a page opened or reloaded mid-run, a finished job, a resync). None yet: no bar.
    if (job.progress) this.progress(job.progress);
    else this.clearProgress();
    this.setText(job.output.text);
    this.announced = this.text.length;
    this.setStatus(job.status, { force: true });
    this.renderDetails(job);
    if (job.status === "failed" || job.status === "dead") this.showError(job.error);
    this.el.attempt.textContent = job.output.attempt ? `attempt ${job.output.attempt}` : "";
    // A delayed job (run_at / delay_s) or a scheduled retry: say when it starts.
    const later = job.status === "queued" && job.run_at && Date.parse(job.run_at) > Date.now();
    this.el.placeholder.textContent = later
      ? `Scheduled to start at ${formatTime(job.run_at)}.`
      : "Waiting for the first token…";
  }

  append(chunk) {
    const box = this.el.output;
    const following = box.scrollHeight - box.scrollTop - box.clientHeight < 48;
    const first = this.text.length === 0;
    this.text.appendData(chunk);
    if (first) this.markJson();
    this.el.placeholder.hidden = true;
    if (following) box.scrollTop = box.scrollHeight;
  }

  reset(evt) {
    const discarded = this.text.length;
    if (evt.attempt > 1 || discarded > 0) {
      const why = evt.reason ? ` (${evt.reason})` : "";
      this.note(
        `Attempt ${evt.attempt} started${why}. The partial text of the earlier attempt` +
          (discarded ? ` (${discarded} characters) was discarded.` : " was discarded."),
        "reset",
      );
    }
    this.setText("");
    this.clearProgress();
    this.announced = 0;
    this.el.attempt.textContent = `attempt ${evt.attempt}`;
    this.el.attempts.textContent = this.attemptsText(evt.attempt);
    this.scheduleDetails();
  }

  status(evt) {
    this.setStatus(evt.status);
    if (evt.error && !this.failureNoted.has(evt.attempt)) this.attemptError({ ...evt, ...evt.error });
    if (evt.retry_at) {
      const next = ` Attempt ${evt.attempt + 1} is scheduled for ${formatTime(evt.retry_at)}.`;
      const last = this.el.notes.lastElementChild;
      if (last && last.dataset.attempt === String(evt.attempt)) last.append(next);
      else this.note(next.trim(), "retry");
    }
    this.scheduleDetails();
  }

  // An attempt ended in error; `status` or `done` follows with what happens next.
  attemptError(evt) {
    this.failureNoted.add(evt.attempt);
    const message = evt.message ? ` (${evt.message})` : "";
    // A graceful hand-back is no failure: the worker stopped and the job went back to the queue.
    const what = evt.class === "interrupted" ? "was interrupted" : `failed: ${evt.class}`;
    const li = this.note(`Attempt ${evt.attempt} ${what}${message}.`, "retry");
    li.dataset.attempt = String(evt.attempt);
  }

  // A job's own report of how far it is: the bar, and its message beside the percentage.
  progress(evt) {
    const fraction = Math.min(1, Math.max(0, Number(evt.fraction) || 0));
    this.el.progress.hidden = false;
    this.el.progressBar.value = fraction;
    const percent = `${Math.round(fraction * 100)}%`;
    this.el.progressText.textContent = evt.message ? `${percent} · ${evt.message}` : percent;
  }

  usage(evt) {
    this.usageByAttempt.set(evt.attempt, {
      input: evt.input_tokens, output: evt.output_tokens, cost: evt.cost, known: evt.cost_known !== false,
    });
    this.renderUsage();
  }

  done(evt) {
    this.setStatus(evt.status, { force: true });
    if (evt.status === "failed" || evt.status === "dead") this.showError(evt.error);
    if (evt.status === "succeeded" && evt.result && typeof evt.result.text === "string"
        && evt.result.text !== this.text.data) {
      // Should never happen; if it does, say so rather than quietly swapping the text.
      this.note("The streamed text differs from the final result; showing the result.", "mismatch");
      this.setText(evt.result.text);
    }
    if (evt.status === "succeeded" && evt.result) this.showOutput(evt.result);
    this.announce();
    this.el.announcer.textContent += ` Job ${evt.status}.`;
    this.scheduleDetails(true);
  }

  connection(state, detail) {
    const el = this.el.connection;
    el.dataset.state = state;
    el.textContent = CONNECTION_TEXT[state] ?? state;
    el.title = detail || "";
    if (detail && state === "polling" && !this.pollingNoted) {
      this.pollingNoted = true;
      this.note(detail, "polling");
    }
  }

  gone(err) {
    const box = this.el.missing;
    const unknown = err instanceof ApiError && err.status === 404;
    const expired = err instanceof ApiError && err.status === 410;
    box.hidden = false;
    if (expired) {
      box.textContent = "This job ended longer ago than it was kept for, and was deleted.";
    } else {
      box.textContent = unknown
        ? "There is no job with this id here. It may have been created against another database."
        : `Could not load this job: ${err.message}`;
    }
    this.setStatus("");
    this.el.status.textContent = expired ? "deleted" : unknown ? "not found" : "unavailable";
    this.el.status.dataset.status = "missing";
    this.connection("idle");
    // Nothing will stream, and there is nothing to show or act on: only the message stays
    // (style.css hides the output, its placeholder, the facts and the job's buttons).
    this.el.view.dataset.missing = "";
  }

  seq(value) {
    this.el.seq.textContent = `#${value}`;
  }

  // --- rendering -----------------------------------------------------------------------------

  setText(value) {
    this.text.data = value;
    this.markJson();
    this.el.placeholder.hidden = value.length > 0 || TERMINAL.has(this.statusValue);
  }

  // A structured answer streams as JSON: set in a code face, which shows it for what it is.
  markJson() {
    this.el.output.classList.toggle("output-json", /^\s*[[{]/.test(this.text.data));
  }

  setStatus(status, { force = false } = {}) {
    // A late reply (say, to the cancel request) must not walk a finished job back.
    if (!force && TERMINAL.has(this.statusValue) && !TERMINAL.has(status)) return;
    this.statusValue = status;
    const el = this.el.status;
    el.textContent = status;
    el.dataset.status = status;
    const cancel = this.el.cancel;
    const hide = !(CANCELLABLE.has(status) || status === "cancelling");
    // Focus must not vanish with the button: keyboard users land on the job's heading.
    if (hide && document.activeElement === cancel) document.getElementById("job-title").focus();
    cancel.hidden = hide;
    cancel.disabled = status === "cancelling";
    cancel.textContent = status === "cancelling" ? "Cancelling…" : "Cancel job";
    if (TERMINAL.has(status)) this.el.placeholder.hidden = true;
    if (status && this.jobId) this.recent.update(this.jobId, status);
  }

  note(message, kind) {
    const li = document.createElement("li");
    li.className = `note note-${kind}`;
    li.dataset.kind = kind;
    const time = document.createElement("time");
    time.textContent = formatTime(new Date().toISOString());
    li.append(time, " ", message);
    this.el.notes.append(li);
    return li;
  }

  clearProgress() {
    this.el.progress.hidden = true;
    this.el.progressBar.value = 0;
    this.el.progressText.textContent = "";
  }

  // A named job has no prompt: its name and input say what was asked.
  async showInput(job) {
    this.el.prompt.hidden = true;
    this.el.input.hidden = false;
    this.el.jobName.textContent = job.job;
    const schema = await this.schemaOf(job.job, "input_schema");
    if (schema === undefined) return;
    // What was given: an optional field left out (null: a text, or else a file) is no news.
    const given = Object.fromEntries(Object.entries(job.input || {}).filter(([, v]) => v !== null));
    this.el.inputValues.replaceChildren(renderValue(given, schema));
  }

  // A structured output (a job with an output model), beside the text.
  async showOutput(result) {
    if (!("output" in result)) return;
    const schema = await this.schemaOf(this.job && this.job.job, "output_schema");
    if (schema === undefined) return;
    this.el.resultCard.hidden = false;
    this.el.resultOutput.replaceChildren(renderValue(result.output, schema));
  }

  // One of a job type's schemas, to order and name its fields ({} if unknown); undefined when
  // another job was opened meanwhile.
  async schemaOf(name, which) {
    const jobId = this.jobId;
    const type = (await jobTypes()).get(name);
    if (jobId !== this.jobId) return undefined;
    return (type && type[which]) || {};
  }

  showError(error) {
    if (!error) return;
    const box = this.el.error;
    box.hidden = false;
    const cls = document.createElement("strong");
    cls.dataset.testid = "error-class";
    cls.textContent = error.class;
    box.replaceChildren("Failed: ", cls, error.message ? ` — ${error.message}` : "");
  }

  attemptsText(current) {
    const max = this.maxAttempts ? ` of ${this.maxAttempts}` : "";
    return current ? `${current}${max}` : `none yet${max ? ` (up to ${this.maxAttempts})` : ""}`;
  }

  renderFacts() {
    for (const key of ["attempts", "provider", "tokens", "cost", "created", "seq"]) {
      this.el[key].textContent = "–";
    }
  }

  renderDetails(job) {
    this.maxAttempts = job.max_attempts;
    this.el.attempts.textContent = this.attemptsText(job.attempts);
    this.el.provider.textContent = job.model ? `${job.provider} · ${job.model}` : job.provider;
    this.el.created.textContent = formatTime(job.created_at);
    this.seq(Math.max(job.last_seq, this.follower ? this.follower.lastSeq : 0));
    const rows = job.attempt_history || [];
    for (const a of rows) {
      if (a.output_tokens !== null || a.cost !== null) {
        this.usageByAttempt.set(a.attempt, {
          input: a.input_tokens, output: a.output_tokens, cost: a.cost, known: a.cost_known !== false,
        });
      }
    }
    this.renderUsage();
    this.el.history.hidden = rows.length === 0;
    this.el.historyRows.replaceChildren(...rows.map(historyRow));
    this.el.historyFoot.hidden = !rows.some((a) => a.cost_known === false);
    this.renderLineage(job);
  }

  // An operator's retry of a dead job is a new job with a log of its own: the dead job's stream
  // ended with its `done`, so the job resource is where either learns of the other.
  renderLineage(job) {
    const links = [["A retry of job", job.retry_of], ["Retried as job", job.retried_as]]
      .filter(([, id]) => id);
    const box = this.el.lineage;
    box.hidden = links.length === 0;
    box.replaceChildren(...links.flatMap(([text, id], i) => [i ? " " : "", `${text} `, jobLink(id), "."]));
  }

  renderUsage() {
    if (this.usageByAttempt.size === 0) return;
    let input = 0, output = 0, cost = 0, estimated = false;
    for (const u of this.usageByAttempt.values()) {
      input += Number(u.input) || 0;
      output += Number(u.output) || 0;
      cost += Number(u.cost) || 0;
      estimated ||= !u.known;
    }
    // Summed over every attempt: a failed attempt's tokens were generated (and billed) too.
    this.el.tokens.textContent = `${input} / ${output}`;
    this.el.cost.textContent = `${estimated ? "~" : ""}${formatCost(cost)}`;
    this.el.cost.title = estimated
      ? "Includes an estimate: a provider did not report the usage of an attempt."
      : "";
  }

  // Attempt history, usage and cost come from the job resource; fetch it at most once a second.
  scheduleDetails(final = false) {
    clearTimeout(this.detailsTimer);
    const wait = final ? 0 : Math.max(0, this.detailsAt + DETAILS_MIN_GAP_MS - Date.now());
    const jobId = this.jobId;
    this.detailsTimer = setTimeout(async () => {
      this.detailsAt = Date.now();
      try {
        const job = await getJob(jobId);
        if (jobId === this.jobId) this.renderDetails(job);
      } catch {
        // The stream is what matters; details catch up on the next event.
      }
    }, wait);
  }

  announce() {
    const text = this.text.data;
    if (text.length <= this.announced) return;
    let end = text.length;
    if (!this.follower || !this.follower.finished) {
      const space = text.lastIndexOf(" ");
      if (space <= this.announced) return;
      end = space;
    }
    let chunk = text.slice(this.announced, end);
    if (chunk.length > ANNOUNCE_MAX_CHARS) chunk = `… ${chunk.slice(-ANNOUNCE_MAX_CHARS)}`;
    this.el.announcer.textContent = chunk;
    this.announced = end;
  }

  // --- actions -------------------------------------------------------------------------------

  async cancel() {
    const button = this.el.cancel;
    button.disabled = true;
    this.el.actionNote.textContent = "Asking the server to cancel…";
    const url = (this.job && this.job.cancel_url) || `/api/jobs/${this.jobId}/cancel`;
    try {
      const { data } = await request(url, { method: "POST" });
      this.setStatus(data.status);
      this.el.actionNote.textContent = data.status === "cancelling"
        ? "The worker is stopping this job."
        : `The server says: ${data.status}.`;
    } catch (err) {
      button.disabled = false;
      this.el.actionNote.textContent = `Cancel failed: ${err.message}`;
    }
  }

  async copyLink() {
    const url = location.href;
    try {
      await navigator.clipboard.writeText(url);
      this.el.actionNote.textContent = "Link copied.";
    } catch {
      // No clipboard outside a secure context: show the link to copy by hand.
      this.el.actionNote.textContent = url;
    }
  }
}
