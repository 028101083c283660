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

// Conditional polling of the study's summary (/api/studies/{id}?trials=false): every request
// carries the last ETag in If-None-Match, and the server answers 304 (no body, no build) until a
// trial finishes or the study's status changes. The progress (workers/progress.py) changes only
// then too: throughput and the ETA are measured on finish times, and the ETA is an instant the
// page counts down to itself. Chosen over server-sent events: a 304 is served from the read cache
// in microseconds and holds no connection or thread per open page.
const LIVE = ["pending", "running", "paused"];
const BADGE_CLASS = { complete: "good", diverged: "bad", failed: "bad", cancelled: "bad" };

function progressLines(p) {
  const counts = `${p.state}: ${p.finished || 0}/${p.total || 0} finished ` +
    `(${p.running || 0} running, ${p.waiting || 0} waiting, ${p.diverged || 0} diverged, ` +
    `${p.failed || 0} failed)`;
  let rate = "no trial finished yet";
  if (p.throughput_per_min !== null && p.throughput_per_min !== undefined) {
    rate = `${Number(p.throughput_per_min).toPrecision(3)} trials/min over the last ` +
      `${p.window_trials} finished`;
    if (p.eta_at) {
      const left = (Date.parse(p.eta_at) - Date.now()) / 1000;
      const when = new Date(p.eta_at).toISOString().replace("T", " ").slice(0, 19);
      rate += `; ETA ${when} UTC (` +
        (left > 0 ? `in about ${left < 90 ? Math.ceil(left) + " s" : Math.round(left / 60) + " min"}`
          : "any moment now") + ")";
    }
  }
  let best = "";
  if (p.best) {
    best = `best arm so far: ${p.best.label}, ${p.best.objective || "objective"} ` +
      `${Number(p.best.mean).toPrecision(4)} (mean of ${p.best.n} seed${p.best.n === 1 ? "" : "s"})`;
  }
  return { counts, rate, best };
}

function showProgress(p) {
  const bar = document.getElementById("progress-bar");
  if (bar) { bar.max = Math.max(p.total || 0, 1); bar.value = p.finished || 0; }
  const lines = progressLines(p);
  const set = (id, text) => { const el = document.getElementById(id); if (el) el.textContent = text; };
  set("progress-text", lines.counts);
  set("progress-rate", lines.rate);
  set("progress-best", lines.best);
  const badge = document.querySelector("#study-state .badge");
  if (badge) {
    badge.textContent = p.state;
    badge.className = `badge ${BADGE_CLASS[p.state] || "no"}`;
  }
}

function watchStudy(studyId, figureDivId, intervalMs) {
  let lastDone = -1;
  let etag = null;
  let study = null;
  async function tick() {
    try {
      const headers = { Accept: "application/json" };
      if (etag) headers["If-None-Match"] = etag;
      // no-store: the browser's cache must not answer for us, or a 304 would never be seen
      const res = await fetch(`/api/studies/${studyId}?trials=false`, { headers, cache: "no-store" });
      if (res.status === 200) {
        etag = res.headers.get("ETag");
        study = await res.json();
      } else if (res.status !== 304 || !study) {
        return schedule();
      }
    } catch (e) {
      return schedule();
    }
    const p = study.progress || {};
    showProgress(p);
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
    if (LIVE.includes(p.state)) schedule();
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
        loadTrials(studyId, "trial-table");
      }
    } catch (e) { /* keep the old tables */ }
  }
  tick();
}

// Fill a study's trial table from /api/studies/{id}/trials, one page after another, so a study
// of thousands of trials shows its page at once and its table as the pages arrive.
const STATUS_CLASS = { COMPLETE: "good", DIVERGED: "bad", FAILED: "bad", CANCELLED: "bad" };

function trialRow(t) {
  const tr = document.createElement("tr");
  const cell = (text, cls) => {
    const td = document.createElement("td");
    if (cls) td.className = cls;
    if (text instanceof Node) td.appendChild(text); else td.textContent = text;
    tr.appendChild(td);
    return td;
  };
  const link = document.createElement("a");
  link.href = `/trials/${t.id}`;
  link.textContent = String(t.id);
  cell(link, "num");
  // the candidate's page at its name percent-encoded, as api/links.py builds it
  const cand = document.createElement("a");
  cand.href = `/candidates/${encodeURIComponent(t.candidate)}`;
  cand.textContent = t.candidate;
  cell(cand);
  cell(String(t.seed), "num");
  const badge = document.createElement("span");
  badge.className = `badge ${STATUS_CLASS[t.status] || "no"}`;
  badge.textContent = t.status;
  cell(badge);
  cell(String(t.attempt), "num");
  const v = t.objective_value;
  const td = cell(v === null || v === undefined ? "–" : Number(v).toPrecision(4), "num");
  td.dataset.sort = v === null || v === undefined ? "" : String(v);
  return tr;
}

async function loadTrials(studyId, tableId, pageSize = 500) {
  const table = document.getElementById(tableId);
  if (!table) return;
  const body = table.tBodies[0];
  const status = document.getElementById(`${tableId}-status`);
  let cursor = null;
  let shown = 0;
  body.replaceChildren();
  try {
    do {
      const q = new URLSearchParams({ limit: String(pageSize) });
      if (cursor) q.set("cursor", cursor);
      const res = await fetch(`/api/studies/${studyId}/trials?${q}`, {
        headers: { Accept: "application/json" },
      });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const page = await res.json();
      const rows = document.createDocumentFragment();
      page.items.forEach((t) => rows.appendChild(trialRow(t)));
      body.appendChild(rows);
      shown += page.items.length;
      cursor = page.next_cursor;
      if (status) status.textContent = cursor ? `${shown} trials loaded…` : "";
    } while (cursor);
  } catch (e) {
    if (status) status.textContent = `could not load the trials (${e.message}); reload the page`;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach(makeSortable);
});
