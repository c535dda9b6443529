// The HTTP API as the page uses it: JSON in and out, problem+json turned into ApiError.

export const TERMINAL = new Set(["succeeded", "failed", "cancelled", "dead"]);

// A job's short id: its last 8 hex digits, the random tail. Ids are version-7 UUIDs, whose first
// 8 digits are the time, the same for every job made within a minute (jobstream/short_ids.py
// spells it the same way for the API and the CLI).
export function shortId(id) {
  return String(id).replaceAll("-", "").toLowerCase().slice(-8);
}

export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }
}

export async function request(path, { method = "GET", body, headers = {}, signal } = {}) {
  const init = { method, signal, cache: "no-store", headers: { Accept: "application/json", ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) throw new ApiError(response.status, data);
  return { status: response.status, data };
}

// The server's job types (GET /api/job-types) by name, in its order, asked for once: the form
// builds its picker from them, the job view orders and names a job's fields by their schemas.
// Empty when they cannot be read (an older server, or none reachable: asked again next time).
let jobTypesRequest = null;
export function jobTypes() {
  jobTypesRequest ||= request("/api/job-types").then(
    ({ data }) => new Map((data.jobs || []).map((job) => [job.name, job])),
    () => {
      jobTypesRequest = null;
      return new Map();
    },
  );
  return jobTypesRequest;
}

export const getJob = (id, signal) =>
  request(`/api/jobs/${encodeURIComponent(id)}`, { signal }).then((r) => r.data);

// `url` may already carry a query (a signed `?token=`): add to it, never replace it.
export function withParams(url, params) {
  const u = new URL(url, location.origin);
  for (const [key, value] of Object.entries(params)) u.searchParams.set(key, String(value));
  return u.pathname + u.search;
}

export function newKey() {
  // randomUUID needs a secure context; a phone opening http://<lan-ip>:8000 is not one.
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function formatCost(value) {
  if (value === null || value === undefined || value === "") return "–";
  const n = Number(value);
  if (!Number.isFinite(n)) return String(value);
  return n.toLocaleString("en-US", {
    style: "currency", currency: "USD", minimumFractionDigits: 2, maximumFractionDigits: 6,
  });
}

export function formatTime(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : d.toLocaleTimeString([], { hour12: false });
}
