// A JSON value as something to read rather than parse: an object as a definition list of its
// fields, a list of short plain values as a row of chips (longer ones, sentences say, as a
// bulleted list), a list of objects as a numbered list of records, an enum's value as a badge,
// a base64 file as its type and size, a scalar as text. With the value's JSON Schema, fields
// come in the schema's order under its titles (the stored JSON keeps no order); without, keys
// become words ("longest_word" → "Longest word").

import { formatBytes, labelOf, mediaName, resolve } from "./schema_form.js";

// Longer than this, a list's strings are read one a line, not as chips.
const CHIP_CHARS = 24;

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
    const chips = plain && value.every((v) => String(v).length <= CHIP_CHARS);
    const list = document.createElement(plain ? "ul" : "ol");
    list.className = chips ? "value-chips" : plain ? "value-list" : "value-records";
    for (const item of value) {
      const li = document.createElement("li");
      li.append(renderValue(item, own.items || {}, root));
      list.append(li);
    }
    return list;
  }
  if (typeof value === "object") return Object.keys(value).length ? fieldList(value, own, root) : none();
  if (typeof value === "boolean") return span("value-text", value ? "yes" : "no");
  if (Array.isArray(own.enum) || "const" in own) {
    // One of a few values (severity, sentiment…): a badge, styled by its value.
    const badge = span("value-enum", String(value));
    badge.dataset.value = String(value).toLowerCase();
    return badge;
  }
  if (typeof value === "string" && String(own.contentEncoding).toLowerCase() === "base64") {
    // A file sent as base64: what it is, not its bytes.
    const padding = value.endsWith("==") ? 2 : value.endsWith("=") ? 1 : 0;
    const bytes = Math.max(0, Math.floor((value.length * 3) / 4) - padding);
    return span("value-file", `${mediaName(own.contentMediaType)} · ${formatBytes(bytes)}`);
  }
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
    dt.textContent = props[key] ? labelOf(key, prop) : humanize(key);
    const dd = document.createElement("dd");
    dd.dataset.key = key;
    dd.append(renderValue(object[key], prop, root));
    dl.append(dt, dd);
  }
  return dl;
}
