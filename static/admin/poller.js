// A section's refresh while it is shown: load, wait, load again; never two loads at once (a
// slow answer is not overtaken by the next), and nothing left running once the section hides.

export class Poller {
  constructor(load, intervalMs, onError) {
    this.load = load;
    this.intervalMs = intervalMs;
    this.onError = onError;
    this.timer = null;
    this.stopper = null;
  }

  start() {
    this.stop();
    this.stopper = new AbortController();
    this.tick(this.stopper.signal);
  }

  // Now, not at the next tick: after an action, the operator sees its effect at once.
  refresh() {
    if (this.stopper) this.start();
  }

  async tick(signal) {
    try {
      await this.load(signal);
    } catch (err) {
      if (!signal.aborted) this.onError(err);
    }
    if (!signal.aborted) this.timer = setTimeout(() => this.tick(signal), this.intervalMs);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    if (this.stopper) this.stopper.abort();
    this.stopper = null;
  }
}
