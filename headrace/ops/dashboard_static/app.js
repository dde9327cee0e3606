"use strict";
// Polls the JSON API and renders the panels. Text goes through textContent only (no HTML
// injection from topic data); the confusion matrix is drawn on a canvas, training curves are
// inline SVG built element by element.
const state = { streams: [], details: [], selectedModel: null, selectedJob: null, scorers: [] };
const SVG = "http://www.w3.org/2000/svg";

// A dashboard run with --token-file is opened as URL#token=TOKEN: the fragment never leaves
// the browser; the token is kept for this tab and sent as a bearer header.
(function keepToken() {
  const m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("headrace-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
})();

async function api(path) {
  const token = sessionStorage.getItem("headrace-token");
  const r = await fetch(path, { cache: "no-store",
                                headers: token ? { Authorization: `Bearer ${token}` } : {} });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "onclick") e.onclick = v;
    else if (v !== undefined && v !== null) e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// "what to run next": text parts, commands given as ["cmd", "..."] become <code>.
function hint(...parts) {
  return el("span", { class: "empty" }, ...parts.map((p) => Array.isArray(p) ? el("code", {}, p[1]) : p));
}

function emptyRow(colspan, ...parts) {
  return el("tr", {}, el("td", { colspan }, hint(...parts)));
}

const fmt = (x, d = 1) => x === null || x === undefined ? "–" : Number(x).toFixed(d);

// Seconds as ms / s / min; `above`: the quantile is past the histogram's last bound.
function dur(s, above) {
  if (s === null || s === undefined) return "–";
  const p = above ? "> " : "";
  if (s < 0.01) return `${p}${(s * 1000).toFixed(2)} ms`;
  if (s < 1) return `${p}${(s * 1000).toFixed(1)} ms`;
  if (s < 120) return `${p}${s.toFixed(1)} s`;
  return `${p}${(s / 60).toFixed(1)} min`;
}

const PREFERRED = ["accuracy", "val_accuracy", "macro_f1", "loss", "val_loss", "rmse", "mae", "r2"];
function metricsText(m, n = 3) {
  const keys = Object.keys(m || {}).filter((k) => !k.includes("."));
  keys.sort((a, b) => (PREFERRED.indexOf(a) + 1 || 99) - (PREFERRED.indexOf(b) + 1 || 99));
  return keys.slice(0, n).map((k) => {
    const v = m[k];
    return `${k} ${typeof v === "number" ? v.toFixed(3) : v}`;
  }).join(" · ");
}

function outcomeBadge(o) {
  if (!o || !o.result) return el("span", { class: "badge", title: "unknown: an older job" }, "–");
  // The server's words (headrace/store/outcomes.py): the same as the CLI's.
  const head = o.via && o.via !== "job" ? `${o.result} (${o.via})` : o.result;
  return el("span", { class: `badge ${o.result.replace(" ", "-")}`, "data-outcome": o.result,
                      title: o.line || "" }, head);
}

function clip(text, n) {
  return text && text.length > n ? text.slice(0, n - 1) + "…" : text || "";
}

async function loadOverview() {
  const o = await api("/api/overview");
  state.streams = o.streams;
  state.details = o.stream_details || [];
  const streams = o.streams.length ? o.streams.join(", ") : "none yet";
  document.getElementById("overview").textContent =
    `Kafka ${o.kafka || "not configured"} · DFS ${o.dfs_root} · streams ${streams}` +
    (o.kafka_error ? ` · ${o.kafka_error}` : "");
}

// --- jobs ---------------------------------------------------------------------------------

function progressCell(j) {
  if (j.status === "succeeded" || j.status === "failed") {
    const t = j.training;
    if (!t) return el("td", { class: "muted small nowrap" }, j.status === "failed" ? "" : "done");
    const best = t.best_epoch ? `, best ${t.best_epoch}` : "";
    const why = t.stopped_because ? ` (${t.stopped_because.replace(/_/g, " ")})` : "";
    return el("td", { class: "muted small" }, `${t.epochs_run ?? t.epochs} epochs${best}${why}`);
  }
  const bar = el("div", { class: "bar" }, el("div"));
  bar.firstChild.style.width = `${Math.round((j.progress ?? 0) * 100)}%`;
  return el("td", { class: "nowrap" }, bar, el("span", { class: "muted small" },
    j.epoch ? ` epoch ${j.epoch}` : ""));
}

function gateCell(j) {
  if (j.status === "failed")
    return el("td", { class: "small error wrap", title: j.reason || "" }, clip(j.reason, 110));
  if (j.status !== "succeeded") return el("td", {}, "");
  const o = j.outcome || {};
  return el("td", { class: "small wrap", title: o.reason || "" }, outcomeBadge(j.outcome),
    el("span", { class: `reason ${o.result || ""}` }, clip(o.reason, 110)));
}

async function loadJobs() {
  const { jobs } = await api("/api/jobs?limit=50");
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren(...jobs.map((j) => el("tr", {
    class: "clickable" + (state.selectedJob === j.job_id ? " selected" : ""),
    onclick: () => showJob(j.job_id), "data-job": j.job_id },
  el("td", { class: "nowrap" }, j.job_id), el("td", { class: "wrap" }, j.model_name || ""),
  el("td", {}, el("span", { class: `badge ${j.status}` }, j.status)),
  gateCell(j), progressCell(j), el("td", { class: "num" }, String(j.attempt ?? "")),
  el("td", { class: "small" }, metricsText(j.metrics)),
  el("td", { class: "muted small nowrap" }, (j.last_ts || "").slice(11, 19)))));
  if (!jobs.length) body.append(emptyRow(8, "no jobs yet: train one with ",
    ["cmd", "headrace train NAME -f tensorflow -d datasets/demo.parquet"], " (",
    ["cmd", "headrace datasets make-demo"], " makes that dataset), or run ", ["cmd", "headrace demo"]));
  if (state.selectedJob) await showJob(state.selectedJob, false);
}

async function showJob(id, toggle = true) {
  const box = document.getElementById("job-detail");
  if (toggle && state.selectedJob === id && !box.hidden) {
    box.hidden = true; state.selectedJob = null; return;
  }
  state.selectedJob = id;
  const j = await api(`/api/jobs/${encodeURIComponent(id)}?logs=200`);
  document.getElementById("job-title").textContent = `${id}${j.model_name ? " · " + j.model_name : ""}`;
  const o = j.outcome;
  const line = document.getElementById("job-outcome");
  line.className = `reason ${o ? o.result.replace(" ", "-") : ""}`;
  line.textContent = o ? (o.line || o.result) +
    (o.held_by && o.held_by.length ? ` (held by ${o.held_by.join(", ")})` : "") : "";
  drawCurves(document.getElementById("job-curves"), j.history);
  document.getElementById("job-logs").textContent =
    [...(j.logs || []), ...(j.log_file || [])].join("\n") || "(no log lines)";
  box.hidden = false;
  for (const tr of document.querySelectorAll("#jobs tbody tr"))
    tr.classList.toggle("selected", tr.dataset.job === id);
}

// --- training curves ------------------------------------------------------------------------

// One chart per metric family (loss, then accuracy or the regressor's metric), train solid
// and validation dashed, the best epoch marked.
function drawCurves(box, h) {
  if (!h || h.error || !h.epochs || !h.epochs.length) {
    box.replaceChildren(hint(h && h.error ? h.error : "no training curves: its job kept no " +
      "per-epoch history (jobs/ID/history.json; older trainers did not write one)"));
    return;
  }
  const bases = [];
  for (const k of Object.keys(h.series)) {
    const b = k.replace(/^val_/, "");
    if (b !== "learning_rate" && !bases.includes(b)) bases.push(b);
  }
  bases.sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : 0));
  const charts = bases.slice(0, 3).map((b) => chart(b, h.epochs, h.series[b], h.series["val_" + b],
    h.best_epoch));
  const stop = h.stopped_because ? `, stopped: ${h.stopped_because.replace(/_/g, " ")}` : "";
  const caption = el("div", { class: "muted small full-row" },
    `${h.epochs_run ?? h.epochs.length} epochs run` +
    (h.best_epoch ? `, best epoch ${h.best_epoch}` : "") + stop);
  box.replaceChildren(...charts, caption);
}

function chart(name, epochs, train, val, best) {
  const W = 280, H = 170, L = 44, R = 8, T = 18, B = 26;
  const s = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `${name} per epoch`, class: "curve", "data-metric": name });
  const all = [...(train || []), ...(val || [])].filter((v) => v !== null && Number.isFinite(v));
  if (!all.length) return s;
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi === lo) { hi += 0.5; lo -= 0.5; }
  const e0 = epochs[0], e1 = epochs[epochs.length - 1];
  const x = (e) => L + (e1 === e0 ? 0.5 : (e - e0) / (e1 - e0)) * (W - L - R);
  const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  s.append(svg("text", { x: L, y: 12, "font-size": 12, "font-weight": 600, fill: "#1d2330" }, name));
  s.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#9ca3af" }));
  s.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#9ca3af" }));
  for (const v of [lo, hi]) {
    s.append(svg("text", { x: L - 4, y: y(v) + 4, "font-size": 10, "text-anchor": "end",
      fill: "#6b7280" }, Math.abs(v) >= 100 ? v.toFixed(0) : v.toPrecision(3)));
  }
  for (const e of [e0, e1]) {
    s.append(svg("text", { x: x(e), y: H - B + 14, "font-size": 10, "text-anchor": "middle",
      fill: "#6b7280" }, String(e)));
  }
  if (best && best >= e0 && best <= e1) {
    s.append(svg("line", { x1: x(best), y1: T, x2: x(best), y2: H - B, stroke: "#1b8a4a",
      "stroke-dasharray": "2 3" }));
  }
  const line = (vals, color, dash, label, k) => {
    if (!vals) return;
    const pts = epochs.map((e, i) => [e, vals[i]]).filter(([, v]) => v !== null && Number.isFinite(v));
    if (!pts.length) return;
    s.append(svg("polyline", { points: pts.map(([e, v]) => `${x(e).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
      fill: "none", stroke: color, "stroke-width": 1.8, "stroke-dasharray": dash, class: `series ${label}` }));
    s.append(svg("text", { x: W - R - 4 - k * 48, y: 12, "font-size": 10, "text-anchor": "end",
      fill: color }, label));
  };
  line(train, "#2456d6", "", "train", 1);
  line(val, "#d97706", "5 3", "val", 0);
  return s;
}

// --- models ---------------------------------------------------------------------------------

async function loadModels() {
  const { models } = await api("/api/models");
  const box = document.getElementById("models");
  const rows = [];
  for (const m of models) {
    for (const v of m.versions) {
      const sel = state.selectedModel && state.selectedModel[0] === m.name &&
        state.selectedModel[1] === v.version;
      const o = v.outcome || {};
      rows.push(el("tr", { class: (v.version ? "clickable" : "") + (sel ? " selected" : ""),
        onclick: v.version ? () => showModel(m.name, v.version) : null },
      el("td", { class: "wrap" }, m.name),
      el("td", { class: "num" }, v.version === null ? "–" : String(v.version)),
      el("td", { class: "small wrap", title: o.reason || "" }, outcomeBadge(v.outcome),
        v.production ? el("span", { class: "badge production" }, "production") : "",
        el("span", { class: `reason ${o.result || ""}` }, clip(o.reason, 90))),
      el("td", { class: "small" }, metricsText(v.metrics, 2)),
      el("td", { class: "muted small nowrap" }, (v.created_at || "").slice(5, 16).replace("T", " "))));
    }
  }
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...["model", "v", "gate", "metrics",
    "created"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
  box.replaceChildren(rows.length ? table : hint("no models yet: ",
    ["cmd", "headrace train NAME -f tensorflow -d datasets/demo.parquet"],
    " publishes a version here (or ", ["cmd", "headrace demo"], ")"));
  if (!state.selectedModel && models.length) {
    const m = models[0];
    const stored = m.versions.filter((v) => v.version);
    const v = m.production ?? stored[stored.length - 1]?.version;
    if (v) state.selectedModel = [m.name, v];
  }
  if (state.selectedModel) await showModel(...state.selectedModel);
}

async function showModel(name, version) {
  state.selectedModel = [name, version];
  const m = await api(`/api/models/${encodeURIComponent(name)}/${version}`);
  document.getElementById("model-detail").hidden = false;
  document.getElementById("model-empty").hidden = true;
  document.getElementById("model-title").textContent =
    `${m.name}:${m.version} (${m.framework}, ${m.task})${m.production ? " — production" : ""}`;
  const o = m.outcome;
  const line = document.getElementById("model-outcome");
  line.className = `reason ${o ? o.result.replace(" ", "-") : ""}`;
  line.replaceChildren(outcomeBadge(o), o && o.reason ? o.reason : "");
  const tbody = document.querySelector("#model-metrics tbody");
  tbody.replaceChildren(...Object.entries(m.metrics).map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", { class: "num" }, typeof v === "number" ? v.toFixed(4) : String(v)))));
  drawHeatmap(document.getElementById("heatmap"), m.confusion_matrix, m.classes);
  drawCurves(document.getElementById("model-curves"), m.training);
}

function drawHeatmap(canvas, matrix, classes) {
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  if (!matrix || !matrix.length) {
    ctx.fillStyle = "#6b7280"; ctx.font = "13px sans-serif"; ctx.textAlign = "left";
    ctx.fillText("no confusion matrix (a regressor?)", 20, 30); return;
  }
  const n = matrix.length, pad = 56, size = Math.min(canvas.width, canvas.height) - pad - 8;
  const cell = size / n;
  const max = Math.max(1, ...matrix.flat());
  ctx.font = `${Math.max(9, Math.min(14, cell / 3))}px sans-serif`;
  ctx.textAlign = "center"; ctx.textBaseline = "middle";
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < n; j++) {
      const v = matrix[i][j], t = v / max;
      // white -> deep blue; the diagonal (correct) and errors share one scale
      const r = Math.round(255 - t * 219), g = Math.round(255 - t * 169), b = Math.round(255 - t * 41);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(pad + j * cell, pad + i * cell, cell - 1, cell - 1);
      ctx.fillStyle = t > 0.55 ? "#ffffff" : "#1d2330";
      if (cell > 18) ctx.fillText(String(v), pad + j * cell + cell / 2, pad + i * cell + cell / 2);
    }
  }
  ctx.fillStyle = "#1d2330";
  const names = classes && classes.length === n ? classes : [...Array(n).keys()].map(String);
  for (let k = 0; k < n; k++) {
    ctx.fillText(names[k].slice(0, 6), pad + k * cell + cell / 2, pad - 12);
    ctx.save(); ctx.translate(pad - 14, pad + k * cell + cell / 2); ctx.fillText(names[k].slice(0, 6), 0, 0); ctx.restore();
  }
}

// --- scorers --------------------------------------------------------------------------------

function quantiles(h) {
  if (!h) return [el("td", { class: "num muted" }, "–"), el("td", { class: "num muted" }, "–")];
  const above = h.above_last_bound || [];
  return [el("td", { class: "num" }, dur(h.p50_s, above.includes("p50_s"))),
    el("td", { class: "num" }, dur(h.p99_s, above.includes("p99_s")))];
}

async function loadScorers() {
  const { scorers } = await api("/api/scorers");
  state.scorers = scorers;
  const body = document.querySelector("#scorers tbody");
  body.replaceChildren(...scorers.map((s) => el("tr", {},
    el("td", { class: "wrap" }, el("div", {}, s.stream || "?"), el("div", { class: "muted small" }, s.url)),
    el("td", { class: "nowrap" }, s.model || ""),
    el("td", { class: "num" }, fmt(s.rows_per_s, 0)), el("td", { class: "num" }, fmt(s.rows_total, 0)),
    ...quantiles(s.latency), ...quantiles(s.waiting), ...quantiles(s.scoring),
    el("td", { class: "num" }, fmt(s.lag, 0)),
    s.error ? el("td", { class: "error small wrap" }, s.error) : el("td", { class: "num" }, fmt(s.dead_letters_total, 0)))));
  if (!scorers.length) body.append(emptyRow(12, "no scorers registered: ",
    ["cmd", "headrace up"], " runs one per stream, or pass each scorer's metrics address with ",
    ["cmd", "headrace dashboard --scorer http://HOST:PORT/metrics"], " (", ["cmd", "headrace score STREAM"],
    " prints it)"));
  const basis = scorers.map((s) => s.latency && s.latency.basis).find(Boolean);
  document.getElementById("scorers-note").textContent = scorers.length ?
    `Quantiles ${basis === "since start" ? "since each scorer started" : "over the " + (basis || "scrapes")}, ` +
    "interpolated inside histogram buckets. " +
    "Waiting in topic: record CreateTime to the scorer receiving it (a backlog, or a scorer " +
    "that was not running); scoring: received to prediction acknowledged." : "";
}

// --- streams and dead letters ----------------------------------------------------------------

// Counts come with the overview (read in the background); groups are fetched only for the
// streams that have dead letters, so many streams cost the page nothing.
const MAX_DLQ_DETAILS = 10;
async function loadStreams() {
  const body = document.querySelector("#streams tbody");
  const box = document.getElementById("dlq");
  const rows = [], parts = [];
  for (const s of state.details) {
    const scorer = state.scorers.filter((x) => (x.stream || "").split(", ").includes(s.name));
    const err = s.dead_letters_error;
    rows.push(el("tr", { "data-stream": s.name }, el("td", { class: "wrap" }, s.name),
      el("td", { class: "small muted" }, s.seen_in.join(", ")),
      el("td", { class: "small" }, scorer.length ? scorer.map((x) => x.model || x.url).join(", ") : "none"),
      err ? el("td", { class: "small muted wrap", title: err },
        /no dead-letter topic/.test(err) ? "no dead-letter topic" :
          /no Kafka/.test(err) ? "no Kafka given" : clip(err, 80))
        : el("td", { class: "num" }, s.dead_letters === null || s.dead_letters === undefined ? "…" : String(s.dead_letters))));
  }
  const withLetters = state.details.filter((s) => s.dead_letters > 0);
  for (const s of withLetters.slice(0, MAX_DLQ_DETAILS)) {
    let d;
    try { d = await api(`/api/dlq?stream=${encodeURIComponent(s.name)}&max=5`); } catch (e) { continue; }
    if (!d.groups || !d.groups.length) continue;
    parts.push(el("h3", {}, `${s.name}: ${d.count} dead letters`));
    parts.push(el("table", {}, el("thead", {}, el("tr", {}, ...["error class", "stage", "count",
      "redriven", "message"].map((h) => el("th", {}, h)))),
    el("tbody", {}, ...d.groups.map((g) => el("tr", {}, el("td", { class: "nowrap" }, g.error_class),
      el("td", {}, g.stage), el("td", { class: "num" }, String(g.count)), el("td", { class: "num" }, String(g.redriven)),
      el("td", { class: "small wrap" }, g.sample_message))))));
  }
  if (withLetters.length > MAX_DLQ_DETAILS) parts.push(hint(`and ${withLetters.length - MAX_DLQ_DETAILS} ` +
    "more streams with dead letters: ", ["cmd", "headrace dlq list STREAM"], " shows one"));
  body.replaceChildren(...rows);
  if (!rows.length) body.append(emptyRow(4, "no streams yet: ",
    ["cmd", "headrace send STREAM FILE"], " publishes records to data.STREAM (",
    ["cmd", "headrace topics --create --stream STREAM"], " makes its topics)"));
  if (rows.length && !parts.length) parts.push(hint("no dead letters on any stream"));
  box.replaceChildren(...parts);
}

async function loadStudies() {
  // headrace tune: one table per study, its best trial marked with *.
  const { studies, error } = await api("/api/studies");
  const parts = error ? [el("p", { class: "muted" }, error)] : [];
  for (const s of studies) {
    if (s.error) { parts.push(el("h3", {}, s.name), el("p", { class: "error small" }, s.error)); continue; }
    const states = Object.entries(s.states).map(([k, v]) => `${v} ${k}`).join(", ");
    parts.push(el("h3", {}, `${s.name}: ${s.framework} ${s.model}, ${s.direction} ${s.metric} · ${states}`));
    const best = s.best ? s.best.number : null;
    parts.push(el("table", { class: "study" }, el("thead", {}, el("tr", {}, ...["trial", "state",
      s.metric, "params", "job", "version"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...s.trials.map((t) => el("tr", {},
        el("td", {}, `${t.number}${t.number === best ? " *" : ""}`),
        el("td", {}, el("span", { class: `badge ${t.state}` }, t.state)),
        el("td", {}, t.value === null ? "–" : Number(t.value).toPrecision(4)),
        el("td", { class: "small" }, Object.entries(t.params).map(([k, v]) =>
          `${k}=${typeof v === "number" ? Number(v.toPrecision(3)) : v}`).join(" ")),
        el("td", { class: "small" }, t.job_id),
        el("td", {}, t.version === null ? "" : `${t.version}${t.promoted ? " (promoted)" : ""}`))))));
  }
  if (!studies.length && !error) parts.push(el("p", { class: "muted" }, "no studies (headrace tune)"));
  document.getElementById("studies").replaceChildren(...parts);
}

async function loadRollout() {
  // headrace models compare, for every pair: the summary lines and production x candidate.
  const { pairs, error } = await api("/api/rollout");
  const parts = error ? [el("p", { class: "muted" }, error)] : [];
  for (const p of pairs) {
    parts.push(el("h3", {}, `${p.stream}: ${p.model} v${p.production_version} vs v${p.candidate_version}`));
    for (const line of p.summary) parts.push(el("p", { class: "small" }, line));
    parts.push(el("table", { class: "study" }, el("thead", {}, el("tr", {},
      el("th", {}, `v${p.production_version} \\ v${p.candidate_version}`),
      ...p.classes.map((c) => el("th", {}, c)))),
      el("tbody", {}, ...p.matrix.map((row, i) => el("tr", {}, el("td", {}, p.classes[i]),
        ...row.map((n) => el("td", {}, String(n))))))));
  }
  if (!pairs.length && !error) parts.push(hint("no live comparison yet: ",
    ["cmd", "headrace models shadow NAME:VERSION --stream S"], " starts one"));
  document.getElementById("rollout").replaceChildren(...parts);
}

async function loadDrift() {
  // events.drift (compacted): per stream the latest state of each feature, drifting first.
  const { streams, error } = await api("/api/drift");
  const parts = error ? [el("p", { class: "muted" }, error)] : [];
  const num = (x) => x === null || x === undefined ? "–" : Number(x).toPrecision(4);
  for (const s of streams) {
    parts.push(el("h3", {}, `${s.stream}: ${s.drifting} of ${s.features.length} drifting`));
    parts.push(el("table", { class: "drift", "data-stream": s.stream }, el("thead", {}, el("tr", {},
      ...["feature", "model", "statistic", "value", "threshold", "state", "since", "windows",
        "scorer"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...s.features.map((f) => el("tr", { "data-feature": f.feature },
        el("td", { class: "wrap" }, f.feature), el("td", { class: "nowrap" }, `${f.model}:${f.version}`),
        el("td", {}, f.statistic), el("td", { class: "num" }, num(f.value)),
        el("td", { class: "num" }, num(f.threshold)),
        el("td", {}, el("span", { class: `badge ${f.drifting ? "drifting" : "stable"}` },
          f.drifting ? "drifting" : "ok")),
        el("td", { class: "small nowrap" }, new Date(f.since).toLocaleString()),
        el("td", { class: "num" }, String(f.consecutive)),
        el("td", { class: "small muted" }, f.scorer))))));
  }
  if (!streams.length && !error) parts.push(hint("no drift reported: scorers publish it to ",
    ["cmd", "events.drift"], " when drift is on (", ["cmd", "headrace drift STREAM"], " prints it)"));
  document.getElementById("drift").replaceChildren(...parts);
}

// --- health ---------------------------------------------------------------------------------

function probeCell(p) {
  if (!p) return el("td", {}, "–");
  const why = p.error || (p.body ? Object.entries(p.body).filter(([k]) => k !== "ok")
    .map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ") : "");
  return el("td", { class: "small wrap", title: why },
    el("span", { class: `badge ${p.ok ? "ok" : "down"}`, "data-probe": p.ok ? "ok" : "down" },
      p.ok ? "ok" : (p.status ? `down (${p.status})` : "unreachable")), " ", clip(why, 120));
}

async function loadHealth() {
  const h = await api("/api/health");
  const rows = [];
  if (h.control_plane) rows.push(["control plane", h.control_plane]);
  for (const s of h.scorers) rows.push([`scorer ${s.url}`, s]);
  const body = document.querySelector("#health tbody");
  body.replaceChildren(...rows.map(([name, p]) => el("tr", {}, el("td", {}, name),
    probeCell(p.livez), probeCell(p.readyz))));
  if (!rows.length) body.append(emptyRow(3, "nothing to probe: give ", ["cmd", "--control-url"],
    " and ", ["cmd", "--scorer"]));
  document.getElementById("health-note").textContent = h.control_plane_note || "";
}

async function tick() {
  for (const f of [loadHealth, loadOverview, loadJobs, loadModels, loadStudies, loadRollout, loadScorers, loadDrift, loadStreams]) {
    try { await f(); } catch (e) { console.error(f.name, e); }
  }
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.body.dataset.loaded = "1";
}

tick();
setInterval(tick, 2000);
