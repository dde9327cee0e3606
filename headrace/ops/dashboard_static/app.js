"use strict";
// Polls the JSON API and renders four panels. Text goes through textContent only (no HTML
// injection from topic data); the confusion matrix is drawn on a canvas.
const state = { streams: [], selectedModel: null, selectedJob: null };

async function api(path) {
  const r = await fetch(path, { cache: "no-store" });
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v; else if (k === "onclick") e.onclick = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return e;
}

const fmt = (x, d = 1) => x === null || x === undefined ? "–" : Number(x).toFixed(d);
const ms = (s) => s === null || s === undefined ? "–" : (s * 1000).toFixed(1) + " ms";
const metricsText = (m) => Object.entries(m || {}).slice(0, 4)
  .map(([k, v]) => `${k}=${typeof v === "number" ? v.toFixed(3) : v}`).join(" ");

async function loadOverview() {
  const o = await api("/api/overview");
  state.streams = o.streams;
  document.getElementById("overview").textContent =
    `Kafka ${o.kafka || "not configured"} · DFS ${o.dfs_root} · streams ${o.streams.join(", ")}` +
    (o.kafka_error ? ` · ${o.kafka_error}` : "");
}

async function loadJobs() {
  const { jobs } = await api("/api/jobs?limit=50");
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren(...jobs.map((j) => {
    const bar = el("div", { class: "bar" }, el("div"));
    bar.firstChild.style.width = `${Math.round((j.progress ?? 0) * 100)}%`;
    return el("tr", { class: "clickable", onclick: () => showJob(j.job_id) },
      el("td", {}, j.job_id), el("td", {}, j.model_name || ""),
      el("td", {}, el("span", { class: `badge ${j.status}` }, j.status)),
      el("td", {}, bar), el("td", {}, String(j.attempt ?? "")),
      el("td", { class: "small" }, metricsText(j.metrics)),
      el("td", { class: "muted small" }, (j.last_ts || "").slice(11, 19)));
  }));
  if (!jobs.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "muted" }, "no jobs yet")));
  if (state.selectedJob) await showJob(state.selectedJob, false);
}

async function showJob(id, toggle = true) {
  const pre = document.getElementById("job-logs");
  if (toggle && state.selectedJob === id && !pre.hidden) { pre.hidden = true; state.selectedJob = null; return; }
  state.selectedJob = id;
  const j = await api(`/api/jobs/${encodeURIComponent(id)}?logs=200`);
  pre.textContent = [...(j.logs || []), ...(j.log_file || [])].join("\n") || "(no log lines)";
  pre.hidden = false;
}

async function loadModels() {
  const { models } = await api("/api/models");
  const box = document.getElementById("models");
  const rows = [];
  for (const m of models) {
    for (const v of m.versions) {
      rows.push(el("tr", { class: "clickable", onclick: () => showModel(m.name, v.version) },
        el("td", {}, m.name), el("td", {}, String(v.version)), el("td", {}, v.framework || ""),
        el("td", {}, v.production ? el("span", { class: "badge production" }, "production") : ""),
        el("td", { class: "small" }, metricsText(v.metrics)),
        el("td", { class: "muted small" }, (v.created_at || "").slice(0, 19))));
    }
  }
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...["model", "version", "framework",
    "alias", "metrics", "created"].map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
  box.replaceChildren(rows.length ? table : el("p", { class: "muted" }, "no models published yet"));
  if (!state.selectedModel && models.length) {
    const m = models[0];
    const v = m.production ?? m.versions[m.versions.length - 1]?.version;
    if (v) state.selectedModel = [m.name, v];
  }
  if (state.selectedModel) await showModel(...state.selectedModel);
}

async function showModel(name, version) {
  state.selectedModel = [name, version];
  const m = await api(`/api/models/${encodeURIComponent(name)}/${version}`);
  document.getElementById("model-detail").hidden = false;
  document.getElementById("model-title").textContent =
    `${m.name}:${m.version} (${m.framework}, ${m.task})${m.production ? " — production" : ""}`;
  const tbody = document.querySelector("#model-metrics tbody");
  tbody.replaceChildren(...Object.entries(m.metrics).map(([k, v]) =>
    el("tr", {}, el("th", {}, k), el("td", {}, typeof v === "number" ? v.toFixed(4) : String(v)))));
  drawHeatmap(document.getElementById("heatmap"), m.confusion_matrix, m.classes);
}

function drawHeatmap(canvas, matrix, classes) {
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  if (!matrix || !matrix.length) {
    ctx.fillStyle = "#6b7280"; ctx.font = "13px sans-serif";
    ctx.fillText("no confusion matrix", 20, 30); return;
  }
  const n = matrix.length, pad = 60, size = Math.min(canvas.width, canvas.height) - pad - 10;
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

async function loadScorers() {
  const { scorers } = await api("/api/scorers");
  const body = document.querySelector("#scorers tbody");
  body.replaceChildren(...scorers.map((s) => el("tr", {},
    el("td", { class: "small" }, s.url), el("td", {}, s.model || ""),
    el("td", {}, fmt(s.rows_per_s, 0)), el("td", {}, fmt(s.rows_total, 0)),
    el("td", {}, ms(s.latency_p50_s)), el("td", {}, ms(s.latency_p99_s)),
    el("td", {}, fmt(s.lag, 0)),
    s.error ? el("td", { class: "error small" }, s.error) : el("td", {}, fmt(s.dead_letters_total, 0)))));
  if (!scorers.length) body.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no scorers registered")));
}

async function loadDlq() {
  const box = document.getElementById("dlq");
  const parts = [];
  for (const s of state.streams) {
    const d = await api(`/api/dlq?stream=${encodeURIComponent(s)}&max=5`);
    parts.push(el("h3", {}, `${s}: ${d.count ?? 0} dead letters`));
    if (d.error) { parts.push(el("p", { class: "muted" }, d.error)); continue; }
    if (d.groups.length) {
      parts.push(el("table", {}, el("thead", {}, el("tr", {}, ...["error class", "stage", "count",
        "redriven", "message"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...d.groups.map((g) => el("tr", {}, el("td", {}, g.error_class),
          el("td", {}, g.stage), el("td", {}, String(g.count)), el("td", {}, String(g.redriven)),
          el("td", { class: "small" }, g.sample_message))))));
    }
  }
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

async function tick() {
  for (const f of [loadOverview, loadJobs, loadModels, loadStudies, loadScorers, loadDlq]) {
    try { await f(); } catch (e) { console.error(f.name, e); }
  }
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  document.body.dataset.loaded = "1";
}

tick();
setInterval(tick, 2000);
