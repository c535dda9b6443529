// This browser's recent jobs, kept in localStorage, with statuses kept live by polling the jobs
// that have not finished (the open job reports its own status from its stream).

import { ApiError, TERMINAL, formatTime, getJob } from "./api.js";

const STORAGE_KEY = "jobstream.recent";
const KEEP = 20;
const REFRESH_MS = 2000;

function load() {
  try {
    const items = JSON.parse(localStorage.getItem(STORAGE_KEY) || "[]");
    return Array.isArray(items) ? items.filter((item) => item && typeof item.id === "string") : [];
  } catch {
    return [];
  }
}

export class RecentJobs {
  constructor({ list, empty, clear }) {
    this.list = list;
    this.empty = empty;
    this.clear = clear;
    this.items = load();
    this.currentId = null;
    this.timer = null;
    clear.addEventListener("click", () => {
      this.items = [];
      this.save();
    });
    // Another tab of this browser changed the list.
    window.addEventListener("storage", (e) => {
      if (e.key === STORAGE_KEY) { this.items = load(); this.render(); }
    });
    this.render();
    this.schedule();
  }

  remember(job, prompt) {
    this.items = [
      { id: job.id, status: job.status, prompt: prompt.slice(0, 120), created_at: job.created_at },
      ...this.items.filter((item) => item.id !== job.id),
    ].slice(0, KEEP);
    this.save();
  }

  promptOf(id) {
    const item = this.items.find((i) => i.id === id);
    return item ? item.prompt : null;
  }

  setCurrent(id) {
    this.currentId = id;
    this.render();
  }

  update(id, status) {
    const item = this.items.find((i) => i.id === id);
    if (!item || item.status === status) return;
    item.status = status;
    this.persist();
    // In place, not a re-render: keyboard focus on a row must survive a status change.
    const pill = this.list.querySelector(`li[data-id="${CSS.escape(id)}"] .pill`);
    if (pill) {
      pill.dataset.status = status;
      pill.textContent = status;
    }
  }

  persist() {
    try {
      localStorage.setItem(STORAGE_KEY, JSON.stringify(this.items));
    } catch {
      // Storage full or disabled (private mode): the list lives for this page only.
    }
  }

  save() {
    this.persist();
    this.render();
  }

  render() {
    this.empty.hidden = this.items.length > 0;
    this.clear.hidden = this.items.length === 0;
    this.list.replaceChildren(...this.items.map((item) => this.row(item)));
  }

  row(item) {
    const li = document.createElement("li");
    li.dataset.id = item.id;
    const link = document.createElement("a");
    link.href = `/jobs/${item.id}`;
    link.dataset.nav = "";
    if (item.id === this.currentId) link.setAttribute("aria-current", "page");
    const prompt = document.createElement("span");
    prompt.className = "recent-prompt";
    prompt.textContent = item.prompt || item.id;
    const meta = document.createElement("span");
    meta.className = "recent-meta";
    const status = document.createElement("span");
    status.className = "pill";
    status.dataset.status = item.status;
    status.textContent = item.status;
    const time = document.createElement("time");
    time.dateTime = item.created_at || "";
    time.textContent = formatTime(item.created_at);
    meta.append(status, time);
    link.append(prompt, meta);
    li.append(link);
    return li;
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh().finally(() => this.schedule()), REFRESH_MS);
  }

  async refresh() {
    const pending = this.items.filter((i) => !TERMINAL.has(i.status) && i.id !== this.currentId);
    for (const item of pending) {
      try {
        const job = await getJob(item.id);
        this.update(item.id, job.status);
      } catch (err) {
        // Gone (deleted by retention, another database): forget it. Unreachable: try later.
        if (err instanceof ApiError && (err.status === 404 || err.status === 410)) {
          this.items = this.items.filter((i) => i.id !== item.id);
          this.save();
        }
      }
    }
  }
}
