// The one confirmation dialog: every action that changes a job asks first, naming what it does.

import { byId } from "./dom.js";

const dialog = byId("confirm");

// Resolves true when the operator confirms, false on "Keep" or Escape.
export function confirmAction({ title, message, action }) {
  byId("confirm-title").textContent = title;
  byId("confirm-message").textContent = message;
  byId("confirm-ok").textContent = action;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}
