// Dead letters: the jobs that ended dead or failed, grouped by error kind and message, the
// largest group first; tick groups and retry them all (each a new job, as the API's retry).

import { call } from "./api.js";
import { confirmAction } from "./confirm.js";
import { byId, fill, h, row, table } from "./dom.js";
import { count, shortOf, when } from "./format.js";

export class DeadLetters {
  constructor(onError) {
    this.onError = onError;
    this.list = byId("dead-groups");
    this.retryButton = byId("dead-retry");
    this.result = byId("dead-result");
    this.scope = byId("dead-scope");
    this.groups = [];
    this.retryButton.addEventListener("click", () => this.retry());
    this.list.addEventListener("change", () => this.updateButton());
  }

  show() {
    this.result.hidden = true;
    this.load();
  }

  hide() {}

  async load() {
    try {
      const data = await call("/dead");
      this.groups = data.groups || [];
      // The server groups the newest failed and dead jobs, not all history: say how many.
      this.scope.textContent = data.window
        ? `Grouped from the newest ${count(data.window)} failed and dead jobs; up to 5 of each group's are linked.`
        : "";
    } catch (err) {
      this.onError(err);
      return;
    }
    this.draw();
  }

  draw() {
    if (!this.groups.length) {
      fill(this.list, h("p", { class: "empty" }, "No dead or failed jobs."));
      this.updateButton();
      return;
    }
    const rows = this.groups.map((g, i) =>
      row(
        [
          h("input", { type: "checkbox", value: String(i), "aria-label": `Select ${g.error_class}: ${g.message}` }),
          h("code", {}, g.error_class || "–"),
          h("span", { class: "message" }, g.message || ""),
          [{ class: "num" }, count(g.count)],
          when(g.newest_at),
          h("span", { class: "ids" }, (g.job_ids || []).slice(0, 5).map((id) =>
            h("a", { href: `#/jobs/${encodeURIComponent(id)}`, class: "mono", title: id }, `${shortOf(id)} `))),
        ],
        { dataset: { errorClass: g.error_class || "" } },
      ),
    );
    fill(this.list, table(["", "Error kind", "Message", "Jobs", "Newest", "Some of them"], rows, { "data-testid": "dead-groups" }));
    this.updateButton();
  }

  selected() {
    return [...this.list.querySelectorAll("input[type=checkbox]:checked")].map((box) => this.groups[Number(box.value)]);
  }

  updateButton() {
    const ids = this.selected().flatMap((g) => g.job_ids || []);
    this.retryButton.disabled = !ids.length;
    this.retryButton.textContent = ids.length ? `Retry ${count(ids.length)} selected` : "Retry selected";
  }

  async retry() {
    const ids = [...new Set(this.selected().flatMap((g) => g.job_ids || []))];
    if (!ids.length) return;
    const ok = await confirmAction({
      title: `Retry ${count(ids.length)} job${ids.length === 1 ? "" : "s"}?`,
      message: "Each runs again as a new job with the same input; the dead ones stay as they ended.",
      action: "Retry them",
    });
    if (!ok) return;
    let answer;
    try {
      answer = await call("/dead/retry", { method: "POST", body: { ids } });
    } catch (err) {
      this.onError(err);
      return;
    }
    const retried = answer.retried || [];
    const refused = answer.refused || [];
    fill(
      this.result,
      `Retried ${count(retried.length)} as new jobs`,
      refused.length ? `; ${count(refused.length)} refused` : "",
      ".",
    );
    this.result.hidden = false;
    this.load();
  }
}
