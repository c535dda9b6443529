// A running job's text as it is written, through the public events stream
// (/api/jobs/{id}/events?token=...), which the admin answer's events token opens: EventSource
// cannot send the admin key. Read from the log's start (after=0) and reassembled as every
// client does (docs/design.md): clear on `reset`, append on `token`, skip a seq already seen.

export class LiveText {
  constructor(output, state, onEnd) {
    this.output = output;
    this.state = state;
    this.onEnd = onEnd;
    this.source = null;
  }

  // `eventsUrl`: the job's events_url as the API gives it (its token in the query), else the
  // URL made from the bare token.
  follow(jobId, eventsUrl, token) {
    this.stop();
    this.output.textContent = "";
    let lastSeq = 0;
    const u = new URL(eventsUrl || `/api/jobs/${encodeURIComponent(jobId)}/events`, location.origin);
    if (!eventsUrl) u.searchParams.set("token", token);
    u.searchParams.set("after", "0");
    const url = u.pathname + u.search;
    const source = new EventSource(url);
    this.source = source;
    this.setState("connecting");
    source.onopen = () => this.setState("live");
    source.onerror = () => {
      if (this.source !== source) return;
      // CLOSED: refused (a token past its life, say); the view's next refresh shows the text.
      this.setState(source.readyState === EventSource.CLOSED ? "closed" : "reconnecting");
      if (source.readyState === EventSource.CLOSED) this.stop();
    };
    const on = (type, apply) =>
      source.addEventListener(type, (message) => {
        const evt = JSON.parse(message.data);
        if (this.source !== source || !(evt.seq > lastSeq)) return;
        lastSeq = evt.seq;
        apply(evt);
      });
    on("token", (evt) => this.output.append(evt.text));
    on("reset", () => { this.output.textContent = ""; });
    on("done", () => {
      this.stop();
      this.setState("closed");
      this.onEnd();
    });
    // A cursor older than the log keeps: the view reloads, which shows the job's text whole.
    on("resync", () => {
      this.stop();
      this.onEnd();
    });
  }

  setState(state) {
    this.state.dataset.state = state;
    this.state.textContent = state;
  }

  stop() {
    if (this.source) this.source.close();
    this.source = null;
  }
}
