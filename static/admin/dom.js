// Building the dashboard's elements from data: text always goes in as text, never as HTML, so a
// job's input, a tenant's name or an error message can hold anything without becoming markup.

// h("td", { class: "num", dataset: { status: "dead" } }, "3", child...)
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") el.className = value;
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name in el && typeof value !== "string") el[name] = value;
    else el.setAttribute(name, value === true ? "" : value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

// Replaces an element's children: each refresh draws its section anew from the latest answer.
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export const byId = (id) => document.getElementById(id);

// A table with a caption-less header row; `rows` are arrays of cells (a cell: text, a node,
// or [props, ...children] for a td with attributes). A column whose first row's cell is a
// number gets its header aligned with it, right.
export function table(headers, rows, props = {}) {
  const first = rows[0]?.children ?? [];
  const numeric = (i) => (first[i]?.classList.contains("num") ? "num" : undefined);
  const head = h("thead", {}, h("tr", {}, headers.map((title, i) => h("th", { scope: "col", class: numeric(i) }, title))));
  const body = h("tbody", {}, rows);
  return h("div", { class: "table-wrap" }, h("table", props, head, body));
}

export function row(cells, props = {}) {
  return h("tr", props, cells.map((cell) => (Array.isArray(cell) ? h("td", ...cell) : h("td", {}, cell))));
}

// A block of JSON as the operator reads it: indented, monospace, selectable.
export function json(value) {
  return h("pre", { class: "json" }, value === undefined ? "–" : JSON.stringify(value, null, 2));
}

// Redraws `el` with `draw()`, keeping open the folds (<details data-fold="name">) the operator
// opened: a section read again every few seconds must not snap a traceback shut under them.
export function keepingFolds(el, draw) {
  const open = new Set([...el.querySelectorAll("details[data-fold][open]")].map((d) => d.dataset.fold));
  draw();
  for (const fold of el.querySelectorAll("details[data-fold]")) {
    if (open.has(fold.dataset.fold)) fold.open = true;
  }
}
