// A named job's input fields, built from its input JSON Schema (pydantic's, from
// GET /api/job-types), and the input read back from them.
//
// Each property becomes one field, labelled by its `title`, hinted by its `description`,
// filled with its `default`, marked when `required`:
//   string           → a one-line input; a textarea when the schema says "format": "textarea"
//                      (pydantic: json_schema_extra) or allows more than 200 characters
//                      (maxLength > 200)
//   integer, number  → a number input with the schema's minimum and maximum
//   boolean          → a checkbox
//   enum, Literal    → a select
//   anything else    → a textarea of JSON (objects, lists)
// An optional property (`X | None`) gets the field of X, and is left out of the input when
// blank, so the model's default applies. The server validates the input again: what the
// browser cannot check comes back as a 422 naming `input.<property>`, shown at its field.

const LONG_TEXT = 200;

// `$ref` into the schema's `$defs`, and `X | None` (anyOf with null) as X; the outer schema's
// own keys (title, default, description) win, as pydantic puts them there.
export function resolve(prop, root) {
  let inner = prop;
  for (let depth = 0; depth < 8; depth += 1) {
    if (inner.$ref) {
      const name = inner.$ref.split("/").pop();
      inner = (root.$defs || root.definitions || {})[name] || {};
    } else if (Array.isArray(inner.anyOf || inner.oneOf)) {
      const options = (inner.anyOf || inner.oneOf).filter((s) => s.type !== "null");
      if (options.length !== 1) break;
      inner = options[0];
    } else if (Array.isArray(inner.allOf) && inner.allOf.length === 1) {
      inner = inner.allOf[0];
    } else {
      break;
    }
  }
  const { $ref, anyOf, oneOf, allOf, ...own } = prop;
  return { ...inner, ...own };
}

function kindOf(schema) {
  if (Array.isArray(schema.enum) || "const" in schema) return "enum";
  switch (schema.type) {
    case "string":
      return schema.format === "textarea" || schema.maxLength > LONG_TEXT ? "textarea" : "text";
    case "integer":
    case "number":
      return "number";
    case "boolean":
      return "checkbox";
    default:
      return "json";
  }
}

function control(kind, schema, hasDefault) {
  let el;
  if (kind === "textarea" || kind === "json") {
    el = document.createElement("textarea");
    el.rows = kind === "json" ? 3 : 4;
    if (kind === "json") el.spellcheck = false;
  } else if (kind === "enum") {
    el = document.createElement("select");
    const values = schema.enum || [schema.const];
    // An optional enum without a default may be left out.
    if (!hasDefault) el.append(new Option("–", ""));
    for (const [i, value] of values.entries()) el.append(new Option(String(value), String(i)));
  } else {
    el = document.createElement("input");
    el.type = kind === "checkbox" ? "checkbox" : kind === "number" ? "number" : "text";
  }
  if (kind === "number") {
    el.inputMode = schema.type === "integer" ? "numeric" : "decimal";
    el.step = schema.type === "integer" ? "1" : "any";
    if (typeof schema.minimum === "number") el.min = String(schema.minimum);
    if (typeof schema.maximum === "number") el.max = String(schema.maximum);
  }
  if ((kind === "text" || kind === "textarea") && typeof schema.maxLength === "number") {
    el.maxLength = schema.maxLength;
  }
  return el;
}

function fill(field, value) {
  const { el, kind, values } = field;
  if (kind === "checkbox") el.checked = value === true;
  else if (kind === "enum") el.value = String(values.findIndex((v) => v === value));
  else if (kind === "json") el.value = JSON.stringify(value, null, 2);
  else el.value = String(value);
}

// Builds the fields of `schema` into `box` (replacing what it held); returns their
// descriptions, which readInput() takes.
export function buildFields(box, schema) {
  const required = new Set(schema.required || []);
  const fields = [];
  const nodes = [];
  for (const [name, raw] of Object.entries(schema.properties || {})) {
    const prop = resolve(raw, schema);
    const kind = kindOf(prop);
    const hasDefault = "default" in prop;
    const id = `input-${name.replace(/[^A-Za-z0-9_-]/g, "_")}`;
    const el = control(kind, prop, hasDefault);
    el.id = id;
    el.dataset.field = `input.${name}`;
    el.required = required.has(name) && kind !== "checkbox";

    const label = document.createElement("label");
    label.htmlFor = id;
    label.append(prop.title || name);
    if (required.has(name)) {
      // `required` tells assistive technology; the star is for the eye.
      const star = document.createElement("span");
      star.className = "required";
      star.setAttribute("aria-hidden", "true");
      star.textContent = " *";
      label.append(star);
    }
    const div = document.createElement("div");
    div.className = `field field-${kind}`;
    if (kind === "checkbox") {
      const row = document.createElement("div");
      row.className = "check-row";
      row.append(el, label);
      div.append(row);
    } else {
      div.append(label, el);
    }
    const hintText = [prop.description, kind === "json" ? "As JSON." : ""].filter(Boolean).join(" ");
    if (hintText) {
      const hint = document.createElement("p");
      hint.className = "hint";
      hint.id = `hint-${id}`;
      hint.textContent = hintText;
      div.append(hint);
      // Kept apart: an error's id joins it in aria-describedby, and leaves again (form.js).
      el.dataset.hint = hint.id;
      el.setAttribute("aria-describedby", hint.id);
    }
    const field = { name, kind, el, required: required.has(name), values: prop.enum || [prop.const] };
    if (hasDefault && prop.default !== null) fill(field, prop.default);
    fields.push(field);
    nodes.push(div);
  }
  box.replaceChildren(...nodes);
  return fields;
}

// The input object of the fields' current values.
export function readInput(fields) {
  const input = {};
  for (const { name, kind, el, required, values } of fields) {
    if (kind === "checkbox") {
      input[name] = el.checked;
      continue;
    }
    const raw = el.value;
    // Blank and optional: left out, so the model's default applies.
    if (raw === "" && !(required && (kind === "text" || kind === "textarea"))) continue;
    if (kind === "number") input[name] = Number(raw);
    else if (kind === "enum") input[name] = values[Number(raw)];
    else if (kind === "json") {
      try {
        input[name] = JSON.parse(raw);
      } catch {
        input[name] = raw; // the server says what is wrong with it, at this field
      }
    } else input[name] = raw;
  }
  return input;
}
