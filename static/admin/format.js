// How the dashboard writes money, times and durations: the same way in every section.

export function usd(value) {
  if (value === null || value === undefined || value === "") return "–";
  const n = Number(value);
  if (!Number.isFinite(n)) return String(value);
  // Calls cost fractions of a cent: six places, as the job page shows them.
  return n.toLocaleString("en-US", {
    style: "currency", currency: "USD", minimumFractionDigits: 2, maximumFractionDigits: 6,
  });
}

// A moment as an operator on call reads it: the time alone today, the date too before that.
export function when(iso) {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const time = d.toLocaleTimeString([], { hour12: false });
  return d.toDateString() === new Date().toDateString()
    ? time
    : `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  const s = Number(value);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.round(s / 60)} min`;
}

// How long ago, from the server's `now` when there is one: the browser's clock may be off.
export function ago(iso, now) {
  if (!iso) return "–";
  const s = Math.max(0, ((now ? new Date(now) : new Date()) - new Date(iso)) / 1000);
  return `${seconds(s)} ago`;
}

export const count = (n) => Number(n || 0).toLocaleString("en-US");

// A short id where the server gave only the whole one: its random tail, as the API's short_id
// (jobstream/short_ids.py), never its head, which every job of the same minute shares.
export function shortOf(id) {
  return String(id).replaceAll("-", "").toLowerCase().slice(-8);
}
