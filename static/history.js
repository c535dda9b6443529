// A job's history as the page shows it: one row per attempt, and links between a dead job and its
// retry (the job resource's attempt_history, retry_of and retried_as).
import { formatCost, shortId } from "./api.js";

const HISTORY_COLUMNS = ["#", "Outcome", "Error", "Tokens out", "Cost", "Took"];

export function jobLink(id) {
  const a = document.createElement("a");
  a.href = `/jobs/${encodeURIComponent(id)}`;
  a.dataset.nav = "";
  a.title = id;
  const code = document.createElement("code");
  code.textContent = shortId(id);
  a.append(code);
  return a;
}

export function historyRow(a) {
  const tr = document.createElement("tr");
  const took = a.started_at && a.finished_at
    ? `${((new Date(a.finished_at) - new Date(a.started_at)) / 1000).toFixed(1)} s`
    : "…";
  const cells = [
    a.attempt, a.outcome || "running", a.error ? a.error.class : "",
    a.output_tokens ?? "", `${a.cost_known === false ? "~" : ""}${formatCost(a.cost)}`, took,
  ];
  cells.forEach((value, i) => {
    const td = document.createElement("td");
    td.textContent = String(value);
    // A phone shows each row as a small card: every value carries its column's name.
    td.dataset.label = HISTORY_COLUMNS[i];
    tr.append(td);
  });
  return tr;
}
