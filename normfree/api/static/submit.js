// The submit form keeps its API token for the life of the tab (sessionStorage: gone when the
// tab closes, never shared with other tabs, never sent anywhere but in the form's own POST).
// A token the server refused is forgotten, so a wrong one is not offered again.
"use strict";

(function () {
  const KEY = "normfree-token";
  const form = document.getElementById("submit-form");
  const field = document.getElementById("token");
  if (!form || !field) return;
  let store = null;
  try {
    store = window.sessionStorage;
  } catch (e) {
    return; // storage disabled: the form still works, it only forgets
  }
  if (form.dataset.tokenRefused === "true") {
    store.removeItem(KEY);
  } else if (!field.value) {
    field.value = store.getItem(KEY) || "";
  }
  form.addEventListener("submit", () => {
    const token = field.value.trim();
    if (token) store.setItem(KEY, token);
    else store.removeItem(KEY);
  });
  const forget = document.getElementById("forget-token");
  if (forget) {
    forget.addEventListener("click", (event) => {
      event.preventDefault();
      store.removeItem(KEY);
      field.value = "";
    });
  }
})();
