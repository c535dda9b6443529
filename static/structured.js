// A JSON value as something to read rather than parse: an object as a definition list of its
// fields, a list of plain values as a row of chips, a list of objects as a numbered list of
// records, a scalar as text. With the value's JSON Schema, fields come in the schema's order
// under its titles (the stored JSON keeps no order); without, keys become words
// ("longest_word" → "Longest word").

import { resolve } from "./schema_form.js";

export function humanize(key) {
  const words = String(key).replace(/[_-]+/g, " ").replace(/([a-z])([A-Z])/g, "$1 $2").trim();
  return words ? words[0].toUpperCase() + words.slice(1) : String(key);
}

function span(className, text) {
  const el = document.createElement("span");
  el.className = className;
  el.textContent = text;
  return el;
}

const isPlain = (v) => v === null || typeof v !== "object";
const none = () => span("value-empty", "none");

export function renderValue(value, schema = {}, root = schema) {
  const own = resolve(schema, root);
  if (value === null || value === undefined) return none();
  if (Array.isArray(value)) {
    if (value.length === 0) return none();
    const plain = value.every(isPlain);
    const list = document.createElement(plain ? "ul" : "ol");
    list.className = plain ? "value-chips" : "value-records";
    for (const item of value) {
      const li = document.createElement("li");
      li.append(renderValue(item, own.items || {}, root));
      list.append(li);
    }
    return list;
  }
  if (typeof value === "object") return Object.keys(value).length ? fieldList(value, own, root) : none();
  if (typeof value === "boolean") return span("value-text", value ? "yes" : "no");
  return span("value-text", String(value));
}

export function fieldList(object, schema = {}, root = schema) {
  const props = resolve(schema, root).properties || {};
  const keys = [
    ...Object.keys(props).filter((key) => key in object),
    ...Object.keys(object).filter((key) => !(key in props)),
  ];
  const dl = document.createElement("dl");
  dl.className = "record";
  for (const key of keys) {
    const prop = props[key] ? resolve(props[key], root) : {};
    const dt = document.createElement("dt");
    dt.textContent = prop.title || humanize(key);
    const dd = document.createElement("dd");
    dd.dataset.key = key;
    dd.append(renderValue(object[key], prop, root));
    dl.append(dt, dd);
  }
  return dl;
}
