// Overview: what is waiting, running and dead, by job name and tenant; the last hour as live
// charts; what the last hour and day cost, and who spent it; each provider's state. Read again
// every few seconds while shown (GET /admin/api/overview: the per-minute series, never history).

import { call } from "./api.js";
import { LiveChart, loadCharts } from "./charts.js";
import { byId, fill, h, row, table } from "./dom.js";
import { count, usd, when } from "./format.js";
import { Poller } from "./poller.js";

const REFRESH_MS = 3000;
// The lifecycle's order; a status the server adds later still shows, after these. The server
// counts the jobs not finished and the failed and dead ones (an index each), not the rest.
const STATUS_ORDER = ["queued", "running", "cancelling", "succeeded", "failed", "cancelled", "dead"];

export class Overview {
  constructor(onError) {
    this.el = {
      counts: byId("overview-counts"),
      spendHour: byId("spend-hour"),
      spendDay: byId("spend-day"),
      providers: byId("providers"),
      updated: byId("overview-updated"),
    };
    this.charts = null;
    this.chartsLoading = false;
    this.lastSeries = null;
    this.poller = new Poller((signal) => this.load(signal), REFRESH_MS, onError);
  }

  show() {
    this.poller.start();
    this.makeCharts();
  }

  // Made when first shown: uPlot sizes itself from its container, which is hidden until then.
  async makeCharts() {
    if (this.charts || this.chartsLoading) return;
    this.chartsLoading = true;
    let uPlot;
    try {
      uPlot = await loadCharts();
    } catch {
      for (const id of ["chart-throughput", "chart-latency"]) {
        fill(byId(id), h("p", { class: "empty" }, "No charts: uPlot is not installed (make admin-assets)."));
      }
      return;
    } finally {
      this.chartsLoading = false;
    }
    this.charts = [
      new LiveChart(uPlot, byId("chart-throughput"), {
        title: "Jobs a minute", unit: "",
        series: [
          { key: "created", label: "created" },
          { key: "succeeded", label: "succeeded" },
          { key: "failed", label: "failed" },
        ],
      }),
      new LiveChart(uPlot, byId("chart-latency"), {
        title: "Queue wait and run time", unit: " s", floor: 0.1, points: true,
        series: [
          { key: "queue_wait_p50_s", label: "wait p50" },
          { key: "queue_wait_p95_s", label: "wait p95", dash: [6, 4] },
          { key: "run_p50_s", label: "run p50" },
          { key: "run_p95_s", label: "run p95", dash: [6, 4] },
        ],
      }),
    ];
    if (this.lastSeries) for (const chart of this.charts) chart.update(this.lastSeries);
  }

  hide() {
    this.poller.stop();
  }

  async load(signal) {
    const data = await call("/overview", { signal });
    if (signal.aborted) return;
    this.drawCounts(data.counts || []);
    this.lastSeries = data.series || {};
    for (const chart of this.charts || []) chart.update(this.lastSeries);
    this.drawSpend(this.el.spendHour, (data.spend || {}).hour || []);
    this.drawSpend(this.el.spendDay, (data.spend || {}).day || []);
    this.drawProviders(data.providers || [], data.now);
    this.el.updated.textContent = `Updated ${when(data.now)}`;
    this.el.updated.dateTime = data.now || "";
  }

  // One row per job name and tenant, one column per status: where the backlog is, at a glance.
  drawCounts(counts) {
    const statuses = [...new Set(counts.map((c) => c.status))].sort(
      (a, b) => rank(a) - rank(b) || a.localeCompare(b),
    );
    // Of the queued, those not due yet (a retry's backoff, a delay): a column after "queued".
    if (counts.some((c) => c.scheduled)) statuses.splice(statuses.indexOf("queued") + 1, 0, "scheduled");
    const groups = new Map();
    for (const { job_name: job, tenant, status, n, scheduled } of counts) {
      const key = JSON.stringify([job, tenant]);
      if (!groups.has(key)) groups.set(key, { job, tenant, n: {} });
      const group = groups.get(key);
      group.n[status] = (group.n[status] || 0) + n;
      if (scheduled) group.n.scheduled = (group.n.scheduled || 0) + scheduled;
    }
    const rows = [...groups.values()]
      .sort((a, b) => a.job.localeCompare(b.job) || a.tenant.localeCompare(b.tenant))
      .map((g) =>
        row(
          [g.job, g.tenant, ...statuses.map((s) => [{ class: "num", dataset: { status: s } }, countLink(g, s)])],
          { dataset: { job: g.job, tenant: g.tenant } },
        ),
      );
    if (!rows.length) {
      fill(this.el.counts, h("p", { class: "empty" }, "No jobs."));
      return;
    }
    fill(this.el.counts, table(["Job", "Tenant", ...statuses], rows, { "data-testid": "counts" }));
  }

  drawSpend(el, lines) {
    const sorted = [...lines].sort((a, b) => Number(b.usd) - Number(a.usd));
    const total = sorted.reduce((sum, line) => sum + Number(line.usd || 0), 0);
    const rows = sorted.map((l) => row([l.tenant, l.job_name, l.model || "–", [{ class: "num" }, usd(l.usd)]]));
    rows.push(row([[{ colSpan: 3 }, h("strong", {}, "Total")], [{ class: "num" }, h("strong", {}, usd(total))]], { class: "total" }));
    fill(el, table(["Tenant", "Job", "Model", "USD"], rows));
  }

  drawProviders(providers, now) {
    if (!providers.length) {
      fill(this.el.providers, h("p", { class: "empty" }, "No provider has run a call yet."));
      return;
    }
    const rows = providers.map((p) => {
      const paused = p.paused_until && new Date(p.paused_until) > new Date(now || Date.now());
      return row(
        [
          p.name,
          [{ class: "num" }, `${count(p.in_use)}${p.limit === null || p.limit === undefined ? "" : ` / ${count(p.limit)}`}`],
          paused ? h("span", { class: "badge warn" }, `paused until ${when(p.paused_until)}`) : h("span", { class: "badge ok" }, "open"),
        ],
        { dataset: { provider: p.name } },
      );
    });
    fill(this.el.providers, table(["Provider", "In use / limit", "State"], rows));
  }
}

// A count opens those jobs in the jobs list (the scheduled ones among the queued).
function countLink(group, status) {
  const n = group.n[status];
  if (!n) return "0";
  const params = new URLSearchParams({ status: status === "scheduled" ? "queued" : status, job: group.job, tenant: group.tenant });
  return h("a", { href: `#/jobs?${params}` }, count(n));
}

function rank(status) {
  const i = STATUS_ORDER.indexOf(status);
  return i === -1 ? STATUS_ORDER.length : i;
}
