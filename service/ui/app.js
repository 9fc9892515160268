// The operator's page: talks to the service's own /v1 API (and three /ui/api helpers) from the browser.
import { drawHistogram, drawProfile, drawRiskMap, fmt, pct } from "/ui/static/charts.js";

const $ = (id) => document.getElementById(id);
const QUANTILES = [0.05, 0.25, 0.5, 0.75, 0.95];
const KEY_STORE = "gridpfn-api-key";
const state = { models: [], topo: null, context: null, rows: null, answer: null, busy: false };

// ---------------------------------------------------------------- API calls and problem+json errors
class Problem extends Error {
  constructor(body) { super(body.detail || body.title || "error"); this.body = body; }
}

function headers(extra = {}) {
  const key = $("api-key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function call(method, url, body = undefined, extraHeaders = {}) {
  const init = { method, headers: headers(extraHeaders) };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
  let response;
  try { response = await fetch(url, init); } catch (exc) {
    throw new Problem({ title: "Service unreachable", detail: `${method} ${url}: ${exc.message}`, errors: [] });
  }
  const type = response.headers.get("content-type") || "";
  if (!response.ok) {
    if (type.includes("json")) throw new Problem(await response.json());
    throw new Problem({ title: `HTTP ${response.status}`, status: response.status, detail: await response.text(), errors: [] });
  }
  if (response.status === 204) return null;
  return type.includes("json") ? response.json() : response;
}

// A problem+json body as a readable message: title, detail, one line per field error.
function showProblem(box, err) {
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  const body = err instanceof Problem ? err.body : { title: "Error", detail: String(err && err.message || err), errors: [] };
  box.textContent = "";
  const title = document.createElement("b");
  title.textContent = `${body.title || "Error"}${body.status ? ` (${body.status})` : ""}`;
  box.appendChild(title);
  if (body.detail) box.appendChild(document.createTextNode(body.detail));
  const items = (body.errors || []).filter((e) => e.message);
  if (items.length) {
    const ul = document.createElement("ul");
    for (const e of items) {
      const li = document.createElement("li");
      const where = [e.field, e.row !== undefined && e.row !== null ? `row ${e.row}` : null,
                     e.column ? `column ${e.column}` : null].filter(Boolean).join(", ");
      li.textContent = `${where ? where + ": " : ""}${e.message}${e.expected ? ` — expected ${e.expected}` : ""}`;
      ul.appendChild(li);
    }
    box.appendChild(ul);
  }
  if (body.status === 401) box.appendChild(document.createTextNode("\nEnter the service's API key at the top right."));
  box.hidden = false;
  box.dataset.status = body.status || "";
}

async function guarded(box, button, work) {
  showProblem(box, null);
  if (button) button.disabled = true;
  try { return await work(); } catch (err) { showProblem(box, err); return undefined; } finally {
    if (button) button.disabled = false;
    refreshButtons();
  }
}

// ---------------------------------------------------------------- models, network, context
async function loadModels() {
  showProblem($("banner"), null);
  try {
    const [models, listed] = await Promise.all([call("GET", "/v1/models"), call("GET", "/v1/networks")]);
    const nets = { networks: listed.networks.map((n) => n.id) };
    // an upload is shown by its title (the net's own name or the one given at upload), a built-in by its id
    const label = Object.fromEntries(listed.networks.map((n) =>
      [n.id, n.kind === "uploaded" && n.title ? `${n.title} · ${n.id.slice(0, 8)}…` : n.id]));
    state.models = models.models;
    const nsel = $("network");
    const previous = nsel.value;
    nsel.textContent = "";
    for (const n of nets.networks) {
      const count = state.models.filter((m) => servesNetwork(m, n) && !("*" in (m.versions || {}))).length;
      const o = document.createElement("option");
      o.value = n;
      o.textContent = count ? label[n] : `${label[n]} (physics-fit only)`;
      nsel.appendChild(o);
    }
    nsel.value = previous || (nets.networks.includes("ieee33") ? "ieee33" : nets.networks[0]);
    await networkChanged();
  } catch (err) { showProblem($("banner"), err); }
  refreshButtons();
}

// The model picked first when the network has it: the README's choice for accuracy.
const PREFERRED_MODEL = "transformer-dva";
const SPARSE_MODEL = "network-fit";  // the model that accepts a context with missing values

// A model answers for the networks its entry lists (versions: network -> version, "*" for any network;
// entries before networks were listed: the network its card names, else ieee33).
function servesNetwork(m, net) {
  const versions = m.versions || { [m.network || "ieee33"]: m.version };
  return "*" in versions || net in versions;
}

// The models of the chosen network, its topology and nominal loads; a context of another network is dropped.
async function networkChanged() {
  const net = $("network").value;
  const sel = $("model");
  const previous = sel.value;
  sel.textContent = "";
  // a network's own checkpoints first; physics-fit (any network) after them
  const anyNetwork = (m) => ("*" in (m.versions || {}) ? 1 : 0);
  const offeredModels = state.models.filter((m) => servesNetwork(m, net)).sort((a, b) => anyNetwork(a) - anyNetwork(b));
  for (const m of offeredModels) {
    const o = document.createElement("option");
    o.value = m.name;
    const version = (m.versions || {})[net] || m.version;
    o.textContent = `${m.name} ${version}${m.device ? ` (${m.device})` : ""}`;
    sel.appendChild(o);
  }
  const offered = (name) => [...sel.options].some((o) => o.value === name);
  if (previous && offered(previous)) sel.value = previous;
  else if (offered(PREFERRED_MODEL)) sel.value = PREFERRED_MODEL;
  showModelInfo();
  if (!state.topo || state.topo.name !== net) {
    await loadNetwork();
    if (state.context && state.context.network !== net) {
      state.context = null;
      $("ctx-info").textContent = "no context yet";
      delete $("ctx-info").dataset.contextId;
    }
  }
  refreshButtons();
}

function currentModel() { return state.models.find((m) => m.name === $("model").value); }

function showModelInfo() {
  const m = currentModel();
  const sizes = m && m.context_size ? `context of ${m.context_size.min}–${m.context_size.max} rows` : "";
  $("model-info").textContent = m ? [m.description, sizes].filter(Boolean).join(" · ")
                                  : "no model serves this network";
}

// The page's view of a feeder described by GET /v1/networks/{id}: closed lines and transformers form
// the tree, open lines are its ties, nominal loads in feature order (P of each load bus, then Q).
function topologyOf(desc) {
  const closed = desc.lines.filter((l) => l.closed), open = desc.lines.filter((l) => !l.closed);
  const busOf = (name) => +name.replace(/^\D+/, "");
  const p = new Map(), q = new Map();
  for (const l of desc.loads) { p.set(l.bus, (p.get(l.bus) || 0) + l.p_mw); q.set(l.bus, (q.get(l.bus) || 0) + l.q_mvar); }
  const loadBuses = desc.features.slice(0, desc.features.length / 2).map(busOf);
  return {
    name: desc.id, slack_bus: desc.slack_bus, slack_vm_pu: desc.slack_vm_pu ?? null,
    from_bus: [...closed.map((l) => l.from_bus), ...desc.transformers.map((t) => t.hv_bus)],
    to_bus: [...closed.map((l) => l.to_bus), ...desc.transformers.map((t) => t.lv_bus)],
    tie_from_bus: open.map((l) => l.from_bus), tie_to_bus: open.map((l) => l.to_bus),
    load_buses: loadBuses, base_p_mw: loadBuses.map((b) => p.get(b) || 0), base_q_mvar: loadBuses.map((b) => q.get(b) || 0),
    feature_names: desc.features, output_names: desc.outputs,
  };
}

async function loadNetwork() {
  state.topo = topologyOf(await call("GET", `/v1/networks/${encodeURIComponent($("network").value)}`));
  resetNominal();
}

function setContext(info) {
  state.context = { ...info, network: state.topo.name };
  const src = info.source || {};
  const how = src.kind === "simulated" ? `simulated ±${src.delta}, seed ${src.seed}` : (src.kind || "uploaded");
  const box = $("ctx-info");
  // a sparse context (buses never read): say how many were, and pick the model that accepts it
  const metered = info.metered || [], unread = metered.filter((m) => !m).length;
  box.textContent = `${info.rows} rows · ${how} · id ${info.id.slice(0, 12)}…` +
    (unread ? ` · ${metered.length - unread} of ${metered.length} buses metered` : "");
  box.title = info.id;
  box.dataset.contextId = info.id;
  box.dataset.rows = info.rows;
  box.dataset.unmetered = unread;
  if (info.missing && [...$("model").options].some((o) => o.value === SPARSE_MODEL)) {
    $("model").value = SPARSE_MODEL;
    showModelInfo();
  }
  refreshButtons();
}

async function simulateContext() {
  await guarded($("ctx-error"), $("ctx-simulate-btn"), async () => {
    $("ctx-info").textContent = "simulating power flows…";
    const spec = { network: $("network").value, delta: +$("ctx-delta").value, n: +$("ctx-n").value,
                   seed: +$("ctx-seed").value };
    setContext(await call("POST", "/v1/context-sets", { simulate: spec }));
  });
}

async function uploadContext() {
  await guarded($("ctx-error"), $("ctx-upload-btn"), async () => {
    const file = $("ctx-file").files[0];
    if (!file) throw new Problem({ title: "No file chosen", detail: "choose a CSV or Parquet file first", errors: [] });
    const form = new FormData();
    form.append("file", file, file.name);
    form.append("network", $("network").value);
    setContext(await call("POST", "/ui/api/context-sets", form));
  });
}

// ---------------------------------------------------------------- load case
function resetNominal() {
  const t = state.topo;
  const body = $("load-table").tBodies[0];
  body.textContent = "";
  t.load_buses.forEach((bus, i) => {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${bus}</td><td><input type="number" step="0.005" data-kind="p" data-i="${i}"></td>` +
                   `<td><input type="number" step="0.005" data-kind="q" data-i="${i}"></td>`;
    tr.querySelector('[data-kind="p"]').value = t.base_p_mw[i];
    tr.querySelector('[data-kind="q"]').value = t.base_q_mvar[i];
    body.appendChild(tr);
  });
  $("level").value = 1;
  updateTotals();
}

function caseVector() {
  const level = +$("level").value;
  const n = state.topo.load_buses.length;
  const v = new Array(2 * n);
  for (const input of $("load-table").querySelectorAll("input")) {
    const i = +input.dataset.i, x = parseFloat(input.value);
    v[input.dataset.kind === "p" ? i : n + i] = level * (Number.isFinite(x) ? x : 0);
  }
  return v;
}

function updateTotals() {
  $("level-out").textContent = `${(+$("level").value).toFixed(2)}×`;
  const v = caseVector(), n = v.length / 2;
  const sum = (a) => a.reduce((s, x) => s + x, 0);
  $("load-total").textContent = `total ${sum(v.slice(0, n)).toFixed(3)} MW, ${sum(v.slice(n)).toFixed(3)} Mvar`;
}

// Rows pasted or read from a file: 64 numbers a line (comma, semicolon, tab or space separated); a header
// line naming the feature columns may reorder them, other named columns are ignored.
function parseRows(text) {
  const names = state.topo.feature_names;
  const lines = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  let order = null;
  const rows = [];
  lines.forEach((line, li) => {
    const cells = line.split(/[,;\t ]+/).filter((c) => c !== "");
    if (li === 0 && cells.some((c) => !Number.isFinite(Number(c)))) {
      if (cells.some((c) => names.includes(c))) {
        order = names.map((n) => cells.indexOf(n));
        const missing = names.filter((n, i) => order[i] < 0);
        if (missing.length) throw new Problem({ title: "Invalid rows", detail: `header: missing column(s) ${missing.slice(0, 5).join(", ")}`, errors: [] });
      }
      return;
    }
    const nums = cells.map(Number);
    const picked = order ? order.map((i) => nums[i]) : nums;
    if (!order && picked.length !== names.length) {
      throw new Problem({ title: "Invalid rows", detail: `line ${li + 1}: ${picked.length} numbers, expected ${names.length} (P bus 2–33, then Q bus 2–33)`, errors: [] });
    }
    const bad = picked.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) throw new Problem({ title: "Invalid rows", detail: `line ${li + 1}, column ${names[bad]}: not a number`, errors: [] });
    rows.push(picked);
  });
  return rows;
}

function useRows() {
  showProblem($("rows-error"), null);
  const text = $("rows-text").value;
  state.rows = null;
  if (text.trim()) {
    try { state.rows = parseRows(text); } catch (err) { showProblem($("rows-error"), err); }
  }
  $("rows-info").textContent = state.rows ? `${state.rows.length} row(s) will be predicted instead of the table` : "";
  refreshButtons();
}

// ---------------------------------------------------------------- predict and draw
function band() { return [+$("band-low").value, +$("band-high").value]; }

async function predict() {
  await guarded($("predict-error"), $("predict-btn"), async () => {
    performance.clearMarks("predict-start"); performance.clearMarks("predict-drawn");
    performance.clearMeasures("predict-round-trip");
    performance.mark("predict-start");
    const body = { model: $("model").value, context_id: state.context.id, queries: state.rows || [caseVector()],
                   quantiles: QUANTILES, voltage_band: band(), compare_gp: $("compare-gp").checked };
    const answer = await call("POST", "/v1/predict", body);
    state.answer = { ...answer, band: body.voltage_band };
    fillRowPicker(answer);
    draw();
    await new Promise((done) => requestAnimationFrame(() => setTimeout(done, 0)));  // after the frame is painted
    performance.mark("predict-drawn");
    const m = performance.measure("predict-round-trip", "predict-start", "predict-drawn");
    const rt = $("timing");
    rt.dataset.roundTripMs = m.duration.toFixed(1);
    rt.textContent = timingText(answer.timing) + ` · round trip in the browser ${m.duration.toFixed(0)} ms`;
  });
}

function timingText(t) {
  const parts = [`PFN ${fmt(t.pfn_ms, 1)} ms${t.context_cached ? " (context cached)" : ` (incl. encoding ${fmt(t.pfn_encode_ms, 1)} ms)`}`];
  if (t.gp_fit_ms !== null && t.gp_fit_ms !== undefined) {
    parts.push(`GP ${fmt(t.gp_fit_ms + t.gp_predict_ms, 1)} ms (fit ${fmt(t.gp_fit_ms, 1)}${t.gp_fit_cached ? ", cached" : ""} + predict ${fmt(t.gp_predict_ms, 1)})`);
    parts.push(`speedup ${fmt(t.speedup, 1)}×`);
  }
  return parts.join(" · ");
}

function fillRowPicker(answer) {
  const sel = $("row-select");
  sel.textContent = "";
  answer.mean.forEach((_, i) => {
    const o = document.createElement("option");
    const worst = Math.max(...answer.p_outside_band[i]);
    o.value = i;
    o.dataset.extrapolated = String(answer.extrapolated[i]);
    o.textContent = `row ${i + 1} (worst bus ${pct(worst)})` +
      (answer.extrapolated[i] ? ` ⚠ extrapolated ${fmt(answer.extrapolation[i], 2)}` : "");
    sel.appendChild(o);
  });
  $("row-pick").hidden = answer.mean.length < 2;
}

function busData(answer, row) {
  const map = new Map();
  if (state.topo.slack_vm_pu !== null) map.set(state.topo.slack_bus, { mean: state.topo.slack_vm_pu, slack: true });
  const q = (level) => answer.quantiles[String(level)] || answer.quantiles[level.toFixed(2)];
  answer.outputs.forEach((name, j) => {
    const bus = +name.replace(/^\D+/, "");
    map.set(bus, { mean: answer.mean[row][j], std: answer.std[row][j],
      q05: q(0.05)[row][j], q25: q(0.25)[row][j], q50: q(0.5)[row][j], q75: q(0.75)[row][j], q95: q(0.95)[row][j],
      p: answer.p_outside_band[row][j],
      // whether the context read this bus (absent from answers of servers before sparse contexts: read)
      metered: answer.metered ? answer.metered[j] : true, readings: answer.readings ? answer.readings[j] : null,
      gpMean: answer.gp ? answer.gp.mean[row][j] : undefined, gpStd: answer.gp ? answer.gp.std[row][j] : undefined });
  });
  return map;
}

function draw() {
  const a = state.answer;
  if (!a) return;
  const row = +($("row-select").value || 0);
  const data = { topo: state.topo, bus: busData(a, row), band: a.band, threshold: +$("risk-threshold").value / 100, gp: !!a.gp };
  showExtrapolation(a, row);
  drawProfile($("profile"), data);
  drawRiskMap($("riskmap"), data, (bus, e) => hover(data, bus, e));
  legend(data);
  busTable(data);
}

// How far the shown load case lies outside the context's loads (the answer's `extrapolation`: 1 = as far
// out as the context's farthest row, 2 twice as far); a warning when the answer flags it `extrapolated`.
function showExtrapolation(a, row) {
  const box = $("extrapolation");
  const value = a.extrapolation[row], out = a.extrapolated[row];
  box.className = out ? "warning" : "note";
  box.dataset.extrapolation = String(value);
  box.dataset.extrapolated = String(out);
  box.textContent = out
    ? `⚠ Extrapolated: this load case lies outside the context's loads (extrapolation ${fmt(value, 2)}; ` +
      "above 1 is farther out than any context row). The model has seen nothing like it: its intervals are " +
      "wider, and context rows like it would make them trustworthy."
    : `Within the context's loads (extrapolation ${fmt(value, 2)}; up to 1 is no farther out than its rows).`;
  box.hidden = false;
}

function legend(data) {
  const items = [["var(--accent)", "PFN mean"], ["#1f5fbf44", "50 % band"], ["#1f5fbf22", "90 % band"],
                 ["var(--risk)", `at risk (red, shaded): P(outside ${data.band[0]}–${data.band[1]}) > ${pct(data.threshold)}`]];
  if (data.gp) items.push(["var(--gp)", "exact GP mean and 90 % band (±1.645σ), dashed"]);
  if ([...data.bus.values()].some((d) => !d.slack && !d.metered)) {
    items.push(["transparent", "hollow: a bus the context never read (predicted from the network model)"]);
  }
  const box = $("profile-legend");
  box.textContent = "";
  for (const [colour, text] of items) {
    const span = document.createElement("span");
    span.innerHTML = `<i style="background:${colour}"></i>`;
    span.appendChild(document.createTextNode(text));
    box.appendChild(span);
  }
  const n = [...data.bus.values()].filter((d) => !d.slack && d.p > data.threshold).length;
  const span = document.createElement("span");
  span.id = "risk-count";
  span.dataset.count = n;
  span.textContent = `${n} bus${n === 1 ? "" : "es"} at risk`;
  box.appendChild(span);
}

function hover(data, bus, e) {
  const tip = $("tooltip");
  if (bus === null) { tip.hidden = true; return; }
  const d = data.bus.get(bus) || { slack: true, mean: "set by the grid" };
  tip.textContent = "";
  const lines = d.slack ? [`Bus ${bus}: substation (slack), ${d.mean}${typeof d.mean === "number" ? " p.u." : ""}`] : [
    `Bus ${bus}`, `P(outside ${data.band[0]}–${data.band[1]} p.u.): ${d.p} (${pct(d.p)})`,
    `mean ${d.mean} p.u.`, `50 % band ${fmt(d.q25, 5)} – ${fmt(d.q75, 5)}`, `90 % band ${fmt(d.q05, 5)} – ${fmt(d.q95, 5)}`];
  if (!d.slack && d.gpMean !== undefined) lines.push(`GP mean ${d.gpMean} ± ${fmt(d.gpStd, 6)}`);
  lines.forEach((l, i) => { const div = document.createElement("div"); div.textContent = l; if (!i) div.style.fontWeight = 600; tip.appendChild(div); });
  tip.hidden = false;
  // beside the pointer, flipped to the other side where the window's edge would cut it off
  const { width, height } = tip.getBoundingClientRect();
  const left = e.clientX + 14 + width > window.innerWidth ? e.clientX - 14 - width : e.clientX + 14;
  const top = e.clientY + 10 + height > window.innerHeight ? e.clientY - 10 - height : e.clientY + 10;
  tip.style.left = `${Math.max(0, left)}px`;
  tip.style.top = `${Math.max(0, top)}px`;
  tip.dataset.bus = bus;
}

function busTable(data) {
  const t = $("bus-table");
  const gp = data.gp;
  t.innerHTML = `<thead><tr><th>bus</th><th>mean p.u.</th><th>5 %</th><th>25 %</th><th>75 %</th><th>95 %</th>` +
                `<th>P(outside)</th><th>context readings</th>${gp ? "<th>GP mean</th><th>GP std</th>" : ""}</tr></thead>`;
  const body = document.createElement("tbody");
  for (const [bus, d] of [...data.bus.entries()].sort((a, b) => a[0] - b[0])) {
    if (d.slack) continue;
    const tr = document.createElement("tr");
    tr.className = [d.p > data.threshold ? "at-risk" : "", d.metered ? "" : "unmetered"].join(" ").trim();
    tr.dataset.metered = String(d.metered);
    // the API's numbers as they arrived (String: the shortest text that reads back as the same double)
    const read = d.metered ? (d.readings === null ? "yes" : String(d.readings)) : "not metered";
    const cells = [bus, d.mean, d.q05, d.q25, d.q75, d.q95, d.p, read, ...(gp ? [d.gpMean, d.gpStd] : [])];
    for (const c of cells) { const td = document.createElement("td"); td.textContent = String(c); tr.appendChild(td); }
    body.appendChild(tr);
  }
  t.appendChild(body);
}

// ---------------------------------------------------------------- batch jobs
function batchForm(file, name) {
  const form = new FormData();  // the fields before the file: the server checks them before reading it
  form.append("model", $("model").value);
  form.append("context_id", state.context.id);
  form.append("quantiles", QUANTILES.join(","));
  form.append("voltage_band", band().join(","));
  form.append("with_ground_truth", $("batch-truth").checked ? "true" : "false");
  form.append("file", file, name);
  return form;
}

async function submitBatch(file, name, button) {
  await guarded($("batch-error"), button, async () => {
    const job = await call("POST", "/v1/batch-jobs", batchForm(file, name));
    trackJob(job, name);
  });
}

function sampledRows() {
  const n = Math.max(1, Math.floor(+$("batch-sample-n").value)), delta = +$("batch-sample-delta").value;
  const base = caseVector();
  const lines = [state.topo.feature_names.join(",")];
  for (let r = 0; r < n; r++) lines.push(base.map((x) => x * (1 + delta * (2 * Math.random() - 1))).join(","));
  return new Blob([lines.join("\n") + "\n"], { type: "text/csv" });
}

function trackJob(job, name) {
  const box = document.createElement("div");
  box.className = "job";
  box.dataset.jobId = job.id;
  box.innerHTML = `<div class="row"><b></b><span class="state"></span><span class="progress-text note"></span>` +
    `<button type="button" class="cancel">Cancel</button></div><div class="bar-outer"><div class="bar-inner"></div></div>` +
    `<div class="row actions" hidden><button type="button" class="dl-parquet">Download Parquet</button>` +
    `<button type="button" class="dl-csv">Download CSV</button><span class="summary note"></span></div>` +
    `<div class="problem" hidden></div>`;
  box.querySelector("b").textContent = `${name} · job ${job.id.slice(0, 8)}`;
  $("jobs").prepend(box);
  const errBox = box.querySelector(".problem");
  box.querySelector(".cancel").onclick = () => guarded(errBox, null, () => call("DELETE", `/v1/batch-jobs/${job.id}`));
  box.querySelector(".dl-parquet").onclick = () => guarded(errBox, null, () => download(job.id, "parquet"));
  box.querySelector(".dl-csv").onclick = () => guarded(errBox, null, () => download(job.id, "csv"));
  const show = (s) => {
    box.className = `job ${s.state}`;
    box.dataset.state = s.state;
    box.dataset.rowsDone = s.rows_done;
    box.dataset.rowsTotal = s.rows_total;
    box.querySelector(".state").textContent = s.state;
    const rate = s.rows_per_s ? ` · ${Math.round(s.rows_per_s).toLocaleString("en")} rows/s` : "";
    box.querySelector(".progress-text").textContent = `${s.rows_done.toLocaleString("en")} / ${s.rows_total.toLocaleString("en")} rows${rate}`;
    box.querySelector(".bar-inner").style.width = `${s.rows_total ? (100 * s.rows_done) / s.rows_total : 0}%`;
  };
  show(job);
  const poll = async () => {
    let s;
    try { s = await call("GET", `/v1/batch-jobs/${job.id}`); } catch (err) { showProblem(errBox, err); return; }
    show(s);
    if (s.state === "done") return finished(box, s);
    if (s.state === "failed" || s.state === "cancelled") {
      box.querySelector(".cancel").hidden = true;
      if (s.errors && s.errors.length) showProblem(errBox, new Problem({ title: `Job ${s.state}`, detail: "", errors: s.errors }));
      return;
    }
    setTimeout(poll, 250);
  };
  setTimeout(poll, 150);
}

async function finished(box, s) {
  box.querySelector(".cancel").hidden = true;
  box.querySelector(".actions").hidden = false;
  const errBox = box.querySelector(".problem");
  await guarded(errBox, null, async () => {
    const hist = await call("GET", `/ui/api/batch-jobs/${s.id}/risk-histogram?bins=20`);
    const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.classList.add("histogram");
    box.appendChild(svg);
    drawHistogram(svg, hist);
    const threshold = +$("risk-threshold").value / 100;
    const over = hist.counts.reduce((n, c, i) => n + (hist.edges[i] >= threshold ? c : 0), 0);
    const outside = hist.extrapolated ? ` · ⚠ ${hist.extrapolated.toLocaleString("en")} rows extrapolated` +
      ` (max extrapolation ${fmt(hist.max_extrapolation, 2)})` : "";
    box.querySelector(".summary").textContent = `${hist.rows.toLocaleString("en")} rows · mean worst-bus risk ${pct(hist.mean)}` +
      ` · max ${pct(hist.max)} · ${over.toLocaleString("en")} rows in bins from ${pct(threshold)} up${outside}`;
    box.dataset.histRows = hist.rows;
    box.dataset.extrapolatedRows = hist.extrapolated;
  });
}

async function download(id, format) {
  const response = await call("GET", `/v1/batch-jobs/${id}/result?format=${format}`);
  const blob = await response.blob();
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = `${id}.${format}`;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// ---------------------------------------------------------------- wiring
function refreshButtons() {
  const ready = !!(state.context && state.topo && $("model").value);
  $("predict-btn").disabled = !ready || (state.rows !== null && !state.rows.length);
  $("batch-submit").disabled = !ready;
  $("batch-sample").disabled = !ready;
}

function showPerf() {
  const paint = performance.getEntriesByType("paint");
  const fp = paint.find((p) => p.name === "first-contentful-paint") || paint.find((p) => p.name === "first-paint");
  if (fp) { $("perf").textContent = `first paint ${fp.startTime.toFixed(0)} ms after navigation`; $("perf").dataset.firstPaintMs = fp.startTime.toFixed(1); }
}

function init() {
  const key = $("api-key");
  key.value = sessionStorage.getItem(KEY_STORE) || "";
  key.addEventListener("change", () => { sessionStorage.setItem(KEY_STORE, key.value.trim()); loadModels(); });
  document.querySelectorAll('input[name="ctx-mode"]').forEach((r) => r.addEventListener("change", () => {
    const upload = document.querySelector('input[name="ctx-mode"]:checked').value === "upload";
    $("ctx-upload").hidden = !upload;
    $("ctx-simulate").hidden = upload;
  }));
  $("model").addEventListener("change", () => { showModelInfo(); refreshButtons(); });
  $("network").addEventListener("change", () => guarded($("banner"), null, networkChanged));
  $("ctx-simulate-btn").addEventListener("click", simulateContext);
  $("ctx-upload-btn").addEventListener("click", uploadContext);
  $("level").addEventListener("input", updateTotals);
  $("load-table").addEventListener("input", updateTotals);
  $("nominal-btn").addEventListener("click", resetNominal);
  $("rows-text").addEventListener("input", useRows);
  $("rows-file").addEventListener("change", async () => {
    const f = $("rows-file").files[0];
    if (f) { $("rows-text").value = await f.text(); useRows(); }
  });
  $("rows-clear").addEventListener("click", () => { $("rows-text").value = ""; $("rows-file").value = ""; useRows(); });
  $("predict-btn").addEventListener("click", predict);
  $("row-select").addEventListener("change", draw);
  $("risk-threshold").addEventListener("change", draw);
  $("batch-submit").addEventListener("click", () => {
    const f = $("batch-file").files[0];
    if (!f) return showProblem($("batch-error"), new Problem({ title: "No file chosen", detail: "choose a CSV or Parquet file first", errors: [] }));
    submitBatch(f, f.name, $("batch-submit"));
  });
  $("batch-sample").addEventListener("click", () => submitBatch(sampledRows(), "sampled.csv", $("batch-sample")));
  loadModels();
  new PerformanceObserver(showPerf).observe({ type: "paint", buffered: true });
}

init();
