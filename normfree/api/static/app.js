// normfree dashboard helpers: sortable tables and live study progress. No dependencies.
"use strict";

// Click a header of a table.sortable to sort by that column; numbers sort numerically using the
// cell's data-sort attribute when present (e.g. the mean of "0.93 ± 0.01").
function makeSortable(table) {
  const headers = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
  headers.forEach((th, col) => {
    th.addEventListener("click", () => {
      const asc = !th.classList.contains("asc");
      headers.forEach((h) => h.classList.remove("asc", "desc"));
      th.classList.add(asc ? "asc" : "desc");
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      const key = (row) => {
        const cell = row.cells[col];
        const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
        const num = parseFloat(raw);
        return Number.isNaN(num) ? raw.toLowerCase() : num;
      };
      rows.sort((a, b) => {
        const ka = key(a), kb = key(b);
        if (typeof ka === typeof kb) return (ka < kb ? -1 : ka > kb ? 1 : 0) * (asc ? 1 : -1);
        return typeof ka === "number" ? -1 : 1;  // numbers before blanks/text
      });
      rows.forEach((r) => body.appendChild(r));
    });
  });
}

// Poll the study's JSON endpoint while it runs; redraw the figure when new trials finish.
function watchStudy(studyId, figureDivId, intervalMs) {
  let lastDone = -1;
  async function tick() {
    let study;
    try {
      const res = await fetch(`/api/studies/${studyId}`, { headers: { Accept: "application/json" } });
      if (!res.ok) return schedule();
      study = await res.json();
    } catch (e) {
      return schedule();
    }
    const p = study.progress || {};
    const bar = document.getElementById("progress-bar");
    if (bar) { bar.max = Math.max(p.total || 0, 1); bar.value = p.finished || 0; }
    const text = document.getElementById("progress-text");
    if (text) {
      text.textContent = `${study.status}: ${p.finished || 0}/${p.total || 0} finished ` +
        `(${p.running || 0} running, ${p.waiting || 0} waiting, ${p.diverged || 0} diverged, ` +
        `${p.failed || 0} failed)`;
    }
    if ((p.finished || 0) !== lastDone && figureDivId && window.Plotly) {
      if (lastDone >= 0) refreshTables();
      lastDone = p.finished || 0;
      try {
        const fr = await fetch(`/studies/${studyId}/figure.json`);
        if (fr.ok) {
          const fig = await fr.json();
          await Plotly.react(figureDivId, fig.data, fig.layout);
        }
      } catch (e) { /* keep the old figure */ }
    }
    if (["pending", "running", "paused"].includes(study.status)) schedule();
  }
  function schedule() { setTimeout(tick, intervalMs); }
  // Swap in the server-rendered cell and trial tables of the current page.
  async function refreshTables() {
    try {
      const res = await fetch(window.location.href, { headers: { Accept: "text/html" } });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      const fresh = doc.getElementById("study-tables");
      const old = document.getElementById("study-tables");
      if (fresh && old) {
        old.innerHTML = fresh.innerHTML;
        old.querySelectorAll("table.sortable").forEach(makeSortable);
      }
    } catch (e) { /* keep the old tables */ }
  }
  tick();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach(makeSortable);
});
