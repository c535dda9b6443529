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
//   base64 string    → a file input ("contentEncoding": "base64"), accepting the schema's
//                      `contentMediaType`: the chosen file is read here (FileReader) and sent
//                      as base64, without a data: prefix; its name and size show below it
//   anything else    → a textarea of JSON (objects, lists)
// An optional property (`X | None`) gets the field of X, and is left out of the input when
// blank (no file chosen, for a file), so the model's default applies: a model that takes a
// text or a file gets no text when a file is chosen and the text is left empty. The server
// validates the input again: what the browser cannot check comes back as a 422 naming
// `input.<property>` (or `input`, for a rule across fields), shown at its field.

const LONG_TEXT = 200;

// A media type's usual extensions: a file chooser that filters by extension (some do) still
// offers the files.
const EXTENSIONS = {
  "application/pdf": ".pdf",
  "text/plain": ".txt",
  "text/csv": ".csv",
  "text/markdown": ".md",
  "application/json": ".json",
  "image/png": ".png",
  "image/jpeg": ".jpg,.jpeg",
};

function acceptOf(mediaType) {
  const type = String(mediaType).toLowerCase();
  return [type, EXTENSIONS[type]].filter(Boolean).join(",");
}

// "application/pdf" → "PDF"; what a person calls a file of that type.
export function mediaName(mediaType) {
  const type = String(mediaType || "").toLowerCase();
  if (!type) return "File";
  const sub = type.split("/").pop().replace(/^x-/, "").split(/[+;]/)[0];
  return type.startsWith("image/") ? `${sub.toUpperCase()} image` : sub.toUpperCase();
}

export function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

// What a property is called on the page: its title, a file's without its encoding.
export function labelOf(name, prop) {
  const title = prop.title || name;
  return kindOf(prop) === "file" ? fileLabel(title, prop) : title;
}

// A file field's label: the API's name for the value ("Pdf Base64") without its encoding,
// which the page takes care of.
function fileLabel(title, schema) {
  const bare = String(title).replace(/[\s_-]*\b(base ?64|b64)\b[\s_-]*/gi, " ").trim();
  const type = mediaName(schema.contentMediaType);
  if (!bare) return type;
  return bare.toLowerCase() === type.toLowerCase() ? `${type} file` : bare;
}

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
      if (String(schema.contentEncoding).toLowerCase() === "base64") return "file";
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
  } else if (kind === "file") {
    el = document.createElement("input");
    el.type = "file";
    if (schema.contentMediaType) el.accept = acceptOf(schema.contentMediaType);
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
// descriptions, which readInput() takes (after filesRead(), for a form with a file).
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
    label.append(labelOf(name, prop));
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
    const field = { name, kind, el, required: required.has(name), values: prop.enum || [prop.const] };
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
    // Below the hint, which says what the file is for: what was chosen, and a way back.
    if (kind === "file") fileParts(field, div);
    if (hasDefault && prop.default !== null && kind !== "file") fill(field, prop.default);
    fields.push(field);
    nodes.push(div);
  }
  box.replaceChildren(...nodes);
  return fields;
}

// A file field's own parts: what was chosen (name and size, or a read error) and a button
// that takes it back, so a form of "text or a file" can go back to the text. The file is read
// as soon as it is chosen; `field.file` holds { name, size, type, base64 } once it is.
function fileParts(field, div) {
  const { el } = field;
  field.file = null;
  field.reading = null;
  const row = document.createElement("div");
  row.className = "file-chosen";
  row.hidden = true;
  const info = document.createElement("span");
  info.className = "file-info";
  info.id = `file-${el.id}`;
  info.dataset.testid = `file-${field.name}`;
  info.setAttribute("aria-live", "polite");
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "quiet";
  remove.textContent = "Remove file";
  row.append(info, remove);
  div.append(row);

  const show = (text) => {
    info.textContent = text;
    row.hidden = !text;
  };
  el.addEventListener("change", () => {
    const chosen = el.files && el.files[0];
    field.file = null;
    if (!chosen) {
      field.reading = null;
      show("");
      return;
    }
    show(`${chosen.name} · ${formatBytes(chosen.size)} · reading…`);
    const reading = readBase64(chosen).then(
      (base64) => {
        if (field.reading !== reading) return; // another file was chosen meanwhile
        field.file = { name: chosen.name, size: chosen.size, type: chosen.type, base64 };
        show(`${chosen.name} · ${formatBytes(chosen.size)}`);
      },
      (err) => {
        if (field.reading !== reading) return;
        show(`${chosen.name} could not be read: ${err.message || err}`);
        throw err;
      },
    );
    reading.catch(() => {}); // reported beside the field; submit() asks again
    field.reading = reading;
  });
  remove.addEventListener("click", () => {
    el.value = "";
    field.file = null;
    field.reading = null;
    show("");
    el.focus();
  });
}

// A file's bytes as base64, without the data: URL's prefix.
function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => {
      const url = String(reader.result);
      resolve(url.slice(url.indexOf(",") + 1));
    };
    reader.onerror = () => reject(reader.error || new Error("the file could not be read"));
    reader.readAsDataURL(file);
  });
}

// Until every chosen file has been read; rejects with the first file that cannot be.
export async function filesRead(fields) {
  await Promise.all(fields.filter((f) => f.kind === "file" && f.reading).map((f) => f.reading));
}

// The input object of the fields' current values.
export function readInput(fields) {
  const input = {};
  for (const field of fields) {
    const { name, kind, el, required, values } = field;
    if (kind === "checkbox") {
      input[name] = el.checked;
      continue;
    }
    if (kind === "file") {
      // No file: left out (the browser's `required` keeps a required one from being skipped).
      if (field.file) input[name] = field.file.base64;
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
