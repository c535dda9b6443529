// Workers: each worker process's row, live, stale (no heartbeat within the window: killed or
// cut off) or stopped (a clean exit), and the jobs it runs. Read again every few seconds.

import { call } from "./api.js";
import { byId, fill, h, row, table } from "./dom.js";
import { ago, count, when } from "./format.js";
import { Poller } from "./poller.js";

const REFRESH_MS = 3000;
const STATE_ORDER = { live: 0, stale: 1, stopped: 2 };

export class Workers {
  constructor(onError) {
    this.list = byId("workers-list");
    this.window = byId("workers-window");
    this.poller = new Poller((signal) => this.load(signal), REFRESH_MS, onError);
  }

  show() {
    this.poller.start();
  }

  hide() {
    this.poller.stop();
  }

  async load(signal) {
    const data = await call("/workers", { signal });
    if (signal.aborted) return;
    this.window.textContent = `A worker is stale after ${data.heartbeat_window_s} s without a heartbeat.`;
    const workers = [...(data.workers || [])].sort(
      (a, b) => (STATE_ORDER[a.state] ?? 3) - (STATE_ORDER[b.state] ?? 3) || String(b.started_at).localeCompare(String(a.started_at)),
    );
    if (!workers.length) {
      fill(this.list, h("p", { class: "empty" }, "No worker has started."));
      return;
    }
    const rows = workers.map((w) =>
      row(
        [
          h("code", { title: w.id }, String(w.id).slice(-12)),
          h("span", { class: `badge state-${w.state}` }, w.state),
          `${w.host} · ${w.pid}`,
          w.version || "–",
          [{ class: "wrap" }, (w.job_names || []).join(", ") || "all"],
          [{ class: "num" }, count(w.slots)],
          when(w.started_at),
          w.stopped_at ? `stopped ${when(w.stopped_at)}` : ago(w.heartbeat_at),
          (w.running || []).length
            ? h("span", { class: "ids" }, w.running.map((r) =>
                h("a", { href: `#/jobs/${encodeURIComponent(r.job_id)}`, class: "mono", title: `${r.job_name}, attempt ${r.attempt}` }, `${r.short_id} `)))
            : "–",
        ],
        { dataset: { pid: w.pid, state: w.state } },
      ),
    );
    fill(
      this.list,
      table(["Worker", "State", "Host · pid", "Version", "Jobs", "Slots", "Started", "Heartbeat", "Running"], rows, {
        "data-testid": "workers",
      }),
    );
  }
}
