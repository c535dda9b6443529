// The admin API as the dashboard calls it: the operator's key from sessionStorage (asked for
// once a tab, gone with it) as `Authorization: Bearer` on every call, JSON in and out.
// With keys off on loopback the server needs no key, and none is sent until one is asked for.

const STORAGE = "jobstream.admin-key";

export class AdminError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
  }

  // 401 or 403: the key is missing, wrong, or a tenant's. The page asks for the admin key.
  get unauthorized() {
    return this.status === 401 || this.status === 403;
  }
}

export const adminKey = {
  get: () => sessionStorage.getItem(STORAGE) || "",
  set: (key) => sessionStorage.setItem(STORAGE, key),
  clear: () => sessionStorage.removeItem(STORAGE),
};

// Whoever shows the key form and the error line listens here: one place learns of every
// refused call ("refused"), and of every answered one ("answered": a problem shown is past).
export const refusals = new EventTarget();

export async function call(path, { method = "GET", body, signal } = {}) {
  const headers = { Accept: "application/json" };
  const key = adminKey.get();
  if (key) headers.Authorization = `Bearer ${key}`;
  const init = { method, headers, signal, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`/admin/api${path}`, init);
  const type = response.headers.get("content-type") || "";
  const data = type.includes("json") ? await response.json() : null;
  if (!response.ok) {
    const error = new AdminError(response.status, data);
    if (error.unauthorized) refusals.dispatchEvent(new CustomEvent("refused", { detail: error }));
    throw error;
  }
  refusals.dispatchEvent(new Event("answered"));
  return data;
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
