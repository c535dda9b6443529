// Following one job: the snapshot first, then its events over SSE, or long-polling where the
// browser has no EventSource or the stream is refused (a non-200, which EventSource never retries).
//
// Reassembly: start from the snapshot text of the current attempt; on `reset` clear; on `token`
// append; ignore every event whose seq is not above the last one applied, so a replay after a
// reconnect can never duplicate text.

import { ApiError, TERMINAL, getJob, withParams } from "./api.js";

const EVENT_TYPES = [
  "status", "reset", "token", "progress", "usage", "attempt_error", "resync", "done",
];
const POLL_WAIT_S = 25;

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });

export class JobFollower {
  // `view` receives: snapshot(job), append(text), reset(evt), status(evt), progress(evt),
  // usage(evt), attemptError(evt), done(evt), seq(n), connection(state, detail), gone(error).
  constructor(view) {
    this.view = view;
    this.stopper = new AbortController();
    this.source = null;
    this.finished = false;
    this.lastSeq = 0;
    this.attempt = 0;
    this.eventsUrl = null;
    this.jobId = null;
    this.refused = 0; // streams refused in a row
  }

  async follow(jobId) {
    this.jobId = jobId;
    const job = await this.loadSnapshot();
    if (!job || this.finished) return;
    if (TERMINAL.has(job.status)) {
      this.finish();
    } else if (typeof window.EventSource !== "function") {
      this.poll("This browser has no EventSource, so the page polls for events instead.");
    } else {
      this.openStream();
    }
  }

  stop() {
    this.finished = true;
    this.closeStream();
    this.stopper.abort();
  }

  // The job resource, retried while the server is unreachable or answers 5xx (a restart or a
  // deploy under a page being reloaded); a 4xx means the job is gone, and following stops.
  async loadSnapshot() {
    const signal = this.stopper.signal;
    for (let failures = 1; ; failures += 1) {
      try {
        const job = await getJob(this.jobId, signal);
        this.lastSeq = job.last_seq;
        this.attempt = job.output.attempt;
        this.eventsUrl = job.events_url;
        this.view.snapshot(job);
        return job;
      } catch (err) {
        if (signal.aborted) return null;
        if (err instanceof ApiError && err.status < 500) {
          this.finish();
          this.view.gone(err);
          return null;
        }
        this.view.connection("unreachable", err.message);
        await sleep(Math.min(10_000, 250 * 2 ** failures), signal);
        if (signal.aborted) return null;
      }
    }
  }

  openStream() {
    const source = new EventSource(withParams(this.eventsUrl, { after: this.lastSeq }));
    this.source = source;
    this.view.connection("connecting");
    source.onopen = () => {
      this.refused = 0;
      this.view.connection("live");
    };
    source.onerror = async () => {
      if (this.source !== source || this.finished) return;
      if (source.readyState !== EventSource.CLOSED) {
        this.view.connection("reconnecting"); // the browser retries by itself
        return;
      }
      // The browser gave up: the server answered with something other than a 200 stream.
      // Once, try again with a fresh events_url (its signed token may have expired); then poll.
      this.closeStream();
      this.refused += 1;
      let fresh = false;
      try {
        fresh = this.refused === 1 && (await this.refreshUrl());
      } catch (err) {
        this.finish();
        this.view.gone(err);
        return;
      }
      if (this.finished) return;
      if (fresh) this.openStream();
      else this.poll("The live stream was refused, so the page polls for events instead.");
    };
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (message) => {
        if (this.source !== source) return;
        const evt = JSON.parse(message.data);
        if (this.apply({ type, ...evt }) === "resync") this.resync();
      });
    }
  }

  closeStream() {
    if (this.source) {
      this.source.close();
      this.source = null;
    }
  }

  // Applies one event; returns "resync" when the caller must reload the snapshot.
  apply(evt) {
    if (this.finished || !(evt.seq > this.lastSeq)) return "skip";
    this.lastSeq = evt.seq;
    switch (evt.type) {
      case "token":
        // A token of an attempt already superseded can only be a stale write: never show it.
        if (evt.attempt === undefined || evt.attempt >= this.attempt) this.view.append(evt.text);
        break;
      case "reset":
        this.attempt = evt.attempt;
        this.view.reset(evt);
        break;
      case "status":
        this.view.status(evt);
        break;
      case "progress":
        if (evt.attempt === undefined || evt.attempt >= this.attempt) this.view.progress(evt);
        break;
      case "usage":
        this.view.usage(evt);
        break;
      case "attempt_error":
        this.view.attemptError(evt);
        break;
      case "resync":
        return "resync";
      case "done":
        this.finish();
        this.view.done(evt);
        break;
      default:
        break;
    }
    this.view.seq(this.lastSeq);
    return "ok";
  }

  // Our cursor is older than what the server keeps: start over from a fresh snapshot.
  async resync() {
    const polling = !this.source;
    this.closeStream();
    const job = await this.loadSnapshot();
    if (!job || this.finished) return;
    if (TERMINAL.has(job.status)) this.finish();
    else if (!polling) this.openStream();
  }

  finish() {
    this.finished = true;
    this.closeStream();
    this.stopper.abort();
    this.view.connection("closed");
  }

  async poll(reason) {
    const signal = this.stopper.signal;
    let failures = 0;
    let refreshed = false;
    this.view.connection("polling", reason);
    while (!this.finished && !signal.aborted) {
      let body;
      try {
        const url = withParams(this.eventsUrl, { after: this.lastSeq, wait: POLL_WAIT_S });
        const response = await fetch(url, {
          headers: { Accept: "application/json" }, cache: "no-store", signal,
        });
        if ([401, 403, 404].includes(response.status)) {
          // The server answers 404 for a bad token too: its signature may have expired, so
          // fetch a fresh events_url once; if the job itself is gone, that says so.
          if (!refreshed) {
            refreshed = true;
            await this.refreshUrl();
            continue;
          }
          throw new ApiError(response.status, await response.json().catch(() => null));
        }
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        body = await response.json();
      } catch (err) {
        if (signal.aborted) return;
        if (err instanceof ApiError) {
          this.finish();
          this.view.gone(err);
          return;
        }
        failures += 1;
        this.view.connection("polling-retry", reason);
        await sleep(Math.min(10_000, 250 * 2 ** failures), signal);
        continue;
      }
      if (failures) this.view.connection("polling", reason);
      failures = 0;
      refreshed = false;
      let resync = false;
      for (const evt of body.events) {
        if (this.apply(evt) === "resync") { resync = true; break; }
        if (this.finished) return;
      }
      if (resync) { await this.resync(); continue; }
      if (typeof body.next_after === "number" && body.next_after > this.lastSeq) {
        this.lastSeq = body.next_after;
      }
      if (body.done && !this.finished) {
        // Terminal, yet its `done` is behind our cursor: the snapshot holds the final state.
        const job = await this.loadSnapshot();
        if (job) this.finish();
      }
    }
  }

  // A fresh events_url (with a freshly signed token) from the job resource. Throws ApiError
  // when the job is gone; false when the server cannot be reached.
  async refreshUrl() {
    try {
      const job = await getJob(this.jobId, this.stopper.signal);
      this.eventsUrl = job.events_url;
      return true;
    } catch (err) {
      if (err instanceof ApiError) throw err;
      return false;
    }
  }
}
