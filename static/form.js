// The new-job form: builds the request body, submits it idempotently, shows problem+json errors
// next to the fields they name. When the server has jobs of its own (GET /api/job-types), a
// picker above chooses the job: the built-in one keeps the prompt form, any other gets fields
// built from its input schema (schema_form.js).

import { ApiError, jobTypes, newKey, request } from "./api.js";
import { buildFields, filesRead, formatBytes, readInput } from "./schema_form.js";

const BUILT_IN = "llm";

export class NewJobForm {
  constructor(form, onCreated) {
    this.form = form;
    this.onCreated = onCreated;
    this.summary = form.querySelector("#form-error");
    this.note = form.querySelector("#submit-note");
    this.button = form.querySelector("#submit");
    this.simulate = form.querySelector("#simulate");
    this.picker = form.querySelector("#job-select");
    this.inputBox = form.querySelector("#job-input-fields");
    this.jobs = new Map();
    this.inputFields = null; // the chosen named job's fields; null: the built-in job
    // A retried submission of the same body reuses its key: a lost reply never makes two jobs.
    this.pending = null;
    form.elements.provider.addEventListener("change", () => this.syncProvider());
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submit();
    });
    this.syncProvider();
    this.picker.addEventListener("change", () => this.showJob());
    this.loadJobTypes();
  }

  // Only a server with jobs besides the built-in one gets a picker: otherwise (or when the
  // list cannot be read) the form stays the prompt form alone.
  async loadJobTypes() {
    this.jobs = await jobTypes();
    if (![...this.jobs.keys()].some((name) => name !== BUILT_IN)) return;
    this.picker.replaceChildren(...[...this.jobs.keys()].map((name) => new Option(name, name)));
    this.picker.value = BUILT_IN; // what the form already shows
    this.form.querySelector("#job-picker").hidden = false;
  }

  showJob() {
    const job = this.jobs.get(this.picker.value);
    const builtIn = !job || job.name === BUILT_IN;
    // Hidden fields are disabled too: a hidden `required` prompt would block the submit.
    for (const part of this.form.querySelectorAll("[data-job=llm]")) {
      part.hidden = !builtIn;
      for (const el of part.querySelectorAll("input, select, textarea")) el.disabled = !builtIn;
    }
    this.clearErrors();
    this.inputFields = builtIn ? null : buildFields(this.inputBox, job.input_schema || {});
    if (builtIn) this.inputBox.replaceChildren();
    this.inputBox.hidden = builtIn;
    this.form.querySelector("#job-description").textContent = (job && job.description) || "";
    // Each job's own default; the built-in job's is the form's (3).
    if (job && job.max_attempts) this.form.elements.max_attempts.value = String(job.max_attempts);
  }

  syncProvider() {
    const simulated = this.form.elements.provider.value === "simulated";
    this.simulate.disabled = !simulated;
    this.simulate.classList.toggle("off", !simulated);
  }

  body() {
    const f = this.form.elements;
    const int = (input) => Number.parseInt(input.value, 10);
    if (this.inputFields) {
      // A named job: its input, and the envelope fields the form has for any job.
      const body = {
        job: this.picker.value,
        input: readInput(this.inputFields),
        max_attempts: int(f.max_attempts),
        retry_unknown: f.retry_unknown.checked,
      };
      if (f.delay_s.value !== "") body.delay_s = Number(f.delay_s.value);
      return body;
    }
    const body = {
      prompt: f.prompt.value,
      provider: f.provider.value,
      max_tokens: int(f.max_tokens),
      max_attempts: int(f.max_attempts),
      retry_unknown: f.retry_unknown.checked,
    };
    if (f.model.value.trim()) body.model = f.model.value.trim();
    if (f.delay_s.value !== "") body.delay_s = Number(f.delay_s.value);
    if (body.provider === "simulated") {
      const simulate = { tokens_per_second: Number(f.tokens_per_second.value || 0), pattern: f.pattern.value };
      if (f.tokens.value !== "") simulate.tokens = int(f.tokens);
      if (f.fault_kind.value) {
        simulate.faults = [{
          attempt: int(f.fault_attempt) || 1,
          after_tokens: int(f.fault_after) || 0,
          kind: f.fault_kind.value,
        }];
        // A simulated timeout hangs until the attempt's limit: a short one, not the default's
        // half hour (the server refuses one past JOBSTREAM_SIMULATED_MAX_S).
        if (f.fault_kind.value === "timeout") body.timeout_s = 20;
      }
      body.simulate = simulate;
    }
    return body;
  }

  async submit() {
    this.clearErrors();
    if (this.inputFields) {
      // A file chosen a moment ago may still be being read.
      try {
        await filesRead(this.inputFields);
      } catch (err) {
        const file = this.inputFields.find((f) => f.kind === "file" && f.el.files.length && !f.file);
        const field = file ? file.el.dataset.field : "input";
        this.showErrors(new ApiError(0, {
          title: "A file could not be read",
          errors: [{ field, message: err.message || String(err) }],
        }));
        return;
      }
    }
    const body = this.body();
    const json = JSON.stringify(body);
    if (!this.pending || this.pending.json !== json) this.pending = { json, key: newKey() };
    this.button.disabled = true;
    this.note.textContent = "Submitting…";
    try {
      const { data } = await request("/api/jobs", {
        method: "POST", body, headers: { "Idempotency-Key": this.pending.key },
      });
      this.pending = null;
      this.note.textContent = "";
      this.onCreated(data, recentLabel(body, this.inputFields));
    } catch (err) {
      this.note.textContent = "";
      this.showErrors(this.blameFile(err));
    } finally {
      this.button.disabled = false;
    }
  }

  // A body too large (413) with a file in it: the file is what to change, so say so at its field.
  blameFile(err) {
    if (!(err instanceof ApiError) || err.status !== 413 || !this.inputFields) return err;
    const files = this.inputFields.filter((f) => f.kind === "file" && f.file);
    if (!files.length) return err;
    const largest = files.reduce((a, b) => (b.file.size > a.file.size ? b : a));
    const { size, base64 } = largest.file;
    // The limit itself is in the summary's title, from the server's problem.
    const message = `${formatBytes(size)} is too large to send (${formatBytes(base64.length)} as base64).`;
    const errors = [{ field: largest.el.dataset.field, message }];
    return new ApiError(413, { ...err.problem, errors });
  }

  clearErrors() {
    this.summary.hidden = true;
    this.summary.replaceChildren();
    for (const el of this.form.querySelectorAll(".field-error")) el.remove();
    for (const el of this.form.querySelectorAll("[aria-invalid]")) {
      el.removeAttribute("aria-invalid");
      if (el.dataset.hint) el.setAttribute("aria-describedby", el.dataset.hint);
      else el.removeAttribute("aria-describedby");
    }
  }

  showErrors(err) {
    const title = document.createElement("p");
    const problem = err instanceof ApiError ? err.problem : {};
    title.textContent = err instanceof ApiError
      ? `${problem.title || "The server refused the job"}${problem.detail ? `: ${problem.detail}` : ""}`
      : "The server could not be reached. Your job was not created; try again.";
    this.summary.replaceChildren(title);
    const list = document.createElement("ul");
    let first = null;
    for (const { field, message } of problem.errors || []) {
      const input = this.inputFor(field);
      const item = document.createElement("li");
      list.append(item);
      if (!input) {
        item.textContent = `${field}: ${message}`;
        continue;
      }
      // Each error in the summary links to its field, named as the form names it.
      const label = this.form.querySelector(`label[for="${input.id}"]`);
      const link = document.createElement("a");
      link.href = `#${input.id}`;
      link.textContent = `${label ? label.firstChild.textContent.trim() : field}: ${message}`;
      link.addEventListener("click", (e) => { e.preventDefault(); input.focus(); });
      item.append(link);
      const id = `error-${input.id}`;
      if (!document.getElementById(id)) {
        const p = document.createElement("p");
        p.className = "field-error";
        p.id = id;
        p.textContent = message;
        input.closest(".field").append(p);
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", [input.dataset.hint, id].filter(Boolean).join(" "));
      }
      first = first || input;
    }
    if (list.children.length) this.summary.append(list);
    this.summary.hidden = false;
    (first || this.summary).focus?.();
  }

  // The input marked with the error's field name, else the one whose name prefixes it.
  inputFor(field) {
    const fields = [...this.form.querySelectorAll("[data-field]")];
    return fields.find((el) => el.dataset.field === field)
      || fields.find((el) => field.startsWith(`${el.dataset.field}.`))
      || null;
  }
}

// What the recent list shows for a job: its prompt, or a named job's name and text inputs (a
// file by its name: its base64 is no label, and would fill this browser's storage).
function recentLabel(body, fields) {
  if (!body.job) return body.prompt;
  const texts = (fields || []).flatMap(({ name, kind, file }) => {
    if (kind === "file") return file ? [file.name] : [];
    const value = body.input[name];
    return typeof value === "string" && value.trim() ? [value] : [];
  });
  return [body.job, ...texts].join(" · ");
}
