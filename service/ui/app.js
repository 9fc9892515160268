// The operator's page: talks to the service's own /v1 API (and the /ui/api helpers of routers/ui.py) from the browser.
import { drawHistogram, drawProfile, drawRiskMap, el, fmt, ms, pct, prob, share, sig, volt } from "/ui/static/charts.js";

const $ = (id) => document.getElementById(id);
const QUANTILES = [0.05, 0.25, 0.5, 0.75, 0.95];
const KEY_STORE = "gridpfn-api-key";
const state = { models: [], networks: [], topo: null, context: null, rows: null, answer: null, study: null, hosting: null, busy: false };

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
// A network as the page names it: an upload by its title (the net's own name or the one given at upload;
// text from the uploader, only ever set as textContent) and the start of its id, a built-in by its id and title.
function networkLabel(n) {
  if (n.kind === "uploaded") return `${n.title || "untitled upload"} · ${n.id.slice(0, 8)}…`;
  return n.title && n.title !== n.id ? `${n.id} (${n.title})` : n.id;
}

function currentNetwork() { return state.networks.find((n) => n.id === $("network").value); }

// Models and networks; `select` picks a network (a fresh upload), else the one picked before while it exists.
async function loadModels(select = null) {
  showProblem($("banner"), null);
  try {
    const [models, listed] = await Promise.all([call("GET", "/v1/models"), call("GET", "/v1/networks")]);
    state.models = models.models;
    state.networks = listed.networks;
    const ids = listed.networks.map((n) => n.id);
    const nsel = $("network");
    const previous = nsel.value;
    nsel.textContent = "";
    for (const n of listed.networks) {
      const count = state.models.filter((m) => servesNetwork(m, n.id) && !("*" in (m.versions || {}))).length;
      const o = document.createElement("option");
      o.value = n.id;
      o.title = n.id;
      o.dataset.kind = n.kind;
      o.textContent = count ? networkLabel(n) : `${networkLabel(n)} (no trained checkpoint)`;
      nsel.appendChild(o);
    }
    nsel.value = [select, previous, "ieee33"].find((id) => id && ids.includes(id)) || ids[0];
    await networkChanged();
  } catch (err) { showProblem($("banner"), err); }
  refreshButtons();
}

async function uploadNetwork() {
  await guarded($("net-error"), $("net-upload-btn"), async () => {
    const file = $("net-file").files[0];
    if (!file) throw new Problem({ title: "No file chosen", detail: "choose a pandapower JSON or MATPOWER (.m, .mat) file first", errors: [] });
    const form = new FormData();
    const name = $("net-name").value.trim();
    if (name) form.append("name", name);
    form.append("file", file, file.name);
    $("net-info").textContent = "reading and checking the feeder…";
    let info;
    try { info = await call("POST", "/v1/networks", form); } catch (err) { $("net-info").textContent = ""; throw err; }
    $("net-file").value = "";
    $("net-name").value = "";
    await loadModels(info.id);
    const box = $("net-info");
    box.textContent = `uploaded “${networkLabel({ ...info, kind: "uploaded" })}”: ${info.n_buses} buses, ` +
      `${info.loads.length} load buses, ${info.outputs.length} voltages to predict`;
    box.dataset.uploaded = info.id;
  });
}

function askDeleteNetwork() {
  const n = currentNetwork();
  if (!n || n.kind !== "uploaded") return;
  $("net-delete-what").textContent = `Delete “${networkLabel(n)}”?`;
  $("net-delete-confirm").hidden = false;
}

async function deleteNetwork() {
  const n = currentNetwork();
  $("net-delete-confirm").hidden = true;
  if (!n || n.kind !== "uploaded") return;
  await guarded($("net-error"), $("net-delete-btn"), async () => {
    await call("DELETE", `/v1/networks/${encodeURIComponent(n.id)}`);
    await loadModels();
    $("net-info").textContent = `deleted “${networkLabel(n)}”`;
    $("net-info").dataset.deleted = n.id;
  });
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
  const entry = currentNetwork();
  $("net-delete-btn").disabled = !entry || entry.kind !== "uploaded";
  $("net-delete-confirm").hidden = true;
  $("net-info").textContent = entry ? `${entry.n_buses} buses, ${entry.n_loads} loads, ${entry.n_outputs} voltages to predict` +
    (entry.expires_in_s ? ` · kept ${Math.round(entry.expires_in_s / 3600)} h more` : "") : "";
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
    state.study = null;
    $("study-card").hidden = true;
    state.hosting = null;
    $("hc-card").hidden = true;
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
// the tree, open lines are its ties; per load bus in feature order (P of each load bus, then Q) its base
// consumption and generation, apart (/ui/api/networks/{id}/loads), so the load level scales consumption only.
function topologyOf(desc, loads) {
  const closed = desc.lines.filter((l) => l.closed), open = desc.lines.filter((l) => !l.closed);
  const busOf = (name) => +name.replace(/^\D+/, "");
  const loadBuses = desc.features.slice(0, desc.features.length / 2).map(busOf);
  const busNames = new Map(desc.buses.map((b) => [b.bus, b.name]));
  return {
    name: desc.id, slack_bus: desc.slack_bus, slack_vm_pu: desc.slack_vm_pu ?? null,
    from_bus: [...closed.map((l) => l.from_bus), ...desc.transformers.map((t) => t.hv_bus)],
    to_bus: [...closed.map((l) => l.to_bus), ...desc.transformers.map((t) => t.lv_bus)],
    tie_from_bus: open.map((l) => l.from_bus), tie_to_bus: open.map((l) => l.to_bus),
    load_buses: loadBuses,
    cons_p: loads.consumption_p_mw, cons_q: loads.consumption_q_mvar, gen_p: loads.generation_p_mw, gen_q: loads.generation_q_mvar,
    has_generation: [...loads.generation_p_mw, ...loads.generation_q_mvar].some((g) => g !== 0),
    bus_names: busNames,
    // names shown beside bus numbers only where they say more than a number (ieee33's are pandapower indices)
    named: [...busNames.values()].some((n) => n && !/^\d+$/.test(n)),
    feature_names: desc.features, output_names: desc.outputs,
    // customer classes (an upload's load/sgen `profile` or `type`): name, load buses, base P consumed and produced
    classes: desc.classes || [],
  };
}

async function loadNetwork() {
  const id = encodeURIComponent($("network").value);
  const [desc, loads] = await Promise.all([call("GET", `/v1/networks/${id}`), call("GET", `/ui/api/networks/${id}/loads`)]);
  state.topo = topologyOf(desc, loads);
  resetNominal();
  describeLoadVector();
  resetPv();
  resetClasses();
  await updatePvProfiles();
}

// Bus numbers as short ranges: [2, 3, 4, 7] -> "2–4, 7" (at most `most` pieces, then "…").
function busRanges(buses, most = 8) {
  const pieces = [];
  for (let i = 0; i < buses.length; i++) {
    let j = i;
    while (j + 1 < buses.length && buses[j + 1] === buses[j] + 1) j++;
    pieces.push(j > i ? `${buses[i]}–${buses[j]}` : `${buses[i]}`);
    i = j;
  }
  return pieces.length > most ? `${pieces.slice(0, most).join(", ")}, …` : pieces.join(", ");
}

// The texts that name the load vector and the file columns follow the selected network.
function describeLoadVector() {
  const t = state.topo, f = t.feature_names, o = t.output_names, n = t.load_buses.length;
  t.vector_order = `P (MW) at the ${n} load bus${n === 1 ? "" : "es"} ${busRanges(t.load_buses)}, then Q (Mvar) at the same`;
  const columns = `${f[0]} … ${f[f.length - 1]}`;
  $("rows-hint").textContent = `Paste or upload rows (${f.length} numbers each: ${t.vector_order}; net of generation)`;
  $("rows-hint").dataset.numbers = f.length;
  $("rows-text").placeholder = `one load case per line; a header row naming the columns ${columns} is allowed`;
  $("ctx-upload-hint").textContent = `CSV or Parquet: the ${f.length} load columns ${columns} and the ${o.length} voltage ` +
    `columns ${o[0]} … ${o[o.length - 1]} (as gridpfn simulate -o writes)`;
  $("batch-hint").textContent = `File: CSV (header row) or Parquet with the ${f.length} columns ${columns}. ` +
    "Uses the model, context, band and quantiles above.";
  describeProfileTable();
}

// The profile table's columns as this network names them: its load buses' and its classes' (SimBench's
// `<class>_pload` / `_qload` for a load class's P and Q apart).
function describeProfileTable() {
  const t = state.topo, first = t.load_buses[0], last = t.load_buses[t.load_buses.length - 1];
  const perBus = first === last ? `load_bus${first}, pv_bus${first}` : `load_bus${first} … load_bus${last}, pv_bus${first} … pv_bus${last}`;
  const names = t.classes.map((c) => c.name);
  const shown = names.length > 6 ? `${names.slice(0, 6).join(", ")}, …` : names.join(", ");
  const load = (t.classes.find((c) => c.consumption_p_mw) || t.classes[0] || {}).name;
  const classes = names.length ? `; the classes' profiles ${shown} (a load class's P and Q apart: ${load}_pload, ${load}_qload)` : "";
  $("series-hint").textContent = "CSV (header row) or Parquet: a time (or timestamp) column of step labels, then factors " +
    `per step, each within −1 to 100: load, pv (the generation's and added PV's output share), ${perBus}${classes}; ` +
    "a profile an added PV follows (picked beside its kW). " +
    "Each load level becomes one row per step; columns the study does not use are listed, not read.";
}

function busLabel(bus) {
  const name = state.topo.bus_names.get(bus);
  return state.topo.named && name ? `${bus} · ${name}` : String(bus);
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
// Per load bus: its consumption (P, Q; scaled by the load level) and, where the network has generation,
// its generation (P, Q produced; kept). The load vector sent is consumption x level - generation.
const LOAD_KINDS = [["p", "cons_p", "P MW"], ["q", "cons_q", "Q Mvar"]];
const GEN_KINDS = [["pg", "gen_p", "gen P MW"], ["qg", "gen_q", "gen Q Mvar"]];

function resetNominal() {
  const t = state.topo;
  const kinds = t.has_generation ? [...LOAD_KINDS, ...GEN_KINDS] : LOAD_KINDS;
  const head = $("load-table").tHead, body = $("load-table").tBodies[0];
  head.textContent = "";
  body.textContent = "";
  const hr = head.insertRow();
  for (const label of ["bus", ...(t.named ? ["name"] : []), ...kinds.map((k) => k[2])]) {
    const th = document.createElement("th");
    th.textContent = label;
    hr.appendChild(th);
  }
  t.load_buses.forEach((bus, i) => {
    const tr = body.insertRow();
    tr.insertCell().textContent = String(bus);
    if (t.named) { const td = tr.insertCell(); td.className = "name"; td.textContent = t.bus_names.get(bus) || ""; td.title = td.textContent; }
    for (const [kind, key] of kinds) {
      const input = document.createElement("input");
      Object.assign(input, { type: "number", step: "0.005", value: t[key][i] });
      input.dataset.kind = kind;
      input.dataset.i = i;
      tr.insertCell().appendChild(input);
    }
  });
  $("level").value = 1;
  updateTotals();
}

// (consumption, generation) in feature order, as the table holds them (before the level).
function caseParts() {
  const t = state.topo, n = t.load_buses.length;
  const cons = [...t.cons_p, ...t.cons_q], gen = [...t.gen_p, ...t.gen_q];
  for (const input of $("load-table").querySelectorAll("input")) {
    const i = +input.dataset.i, x = parseFloat(input.value), k = input.dataset.kind;
    const value = Number.isFinite(x) ? x : 0;
    if (k === "p" || k === "q") cons[k === "p" ? i : n + i] = value;
    else gen[k === "pg" ? i : n + i] = value;
  }
  return { cons, gen };
}

function caseVector() {
  const level = +$("level").value;
  const { cons, gen } = caseParts();
  return cons.map((c, i) => level * c - gen[i]);
}

function updateTotals() {
  const level = +$("level").value;
  $("level-out").textContent = `${level.toFixed(2)}×`;
  const { cons, gen } = caseParts(), n = cons.length / 2;
  const sum = (a) => a.reduce((s, x) => s + x, 0);
  const text = [`consumption ${(level * sum(cons.slice(0, n))).toFixed(3)} MW, ${(level * sum(cons.slice(n))).toFixed(3)} Mvar`];
  if (state.topo.has_generation) {
    text.push(`generation ${sum(gen.slice(0, n)).toFixed(3)} MW kept`);
  }
  $("load-total").textContent = text.join(" · ");
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
      throw new Problem({ title: "Invalid rows", detail: `line ${li + 1}: ${picked.length} numbers, expected ${names.length} (${state.topo.vector_order})`, errors: [] });
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
    showTiming(answer, m.duration);
  });
}

// Where this request's time went, saying what was paid now and what came from a cache: the context's
// encoding (or fit) and the exact GP's fit are cached per context, and then cost nothing this time.
// The API's `speedup` counts both as if paid (the cold path); the time paid now is shown beside it.
function showTiming(answer, roundTripMs) {
  const t = answer.timing, model = answer.model, box = $("timing");
  box.textContent = "";
  const line = (parts) => {
    const div = document.createElement("div");
    for (const [text, cls] of parts) {
      const span = document.createElement("span");
      span.textContent = text;
      if (cls) span.className = cls;
      div.appendChild(span);
    }
    box.appendChild(div);
  };
  line(t.context_cached
    ? [[`${model} ${ms(t.pfn_ms)} now · `], ["context encoding cached", "cached"], [` (not paid this time; it took ${ms(t.pfn_encode_ms)} when done)`]]
    : [[`${model} ${ms(t.pfn_ms)} now (context encoded now ${ms(t.pfn_encode_ms)} + predict ${ms(t.pfn_predict_ms)})`]]);
  const gp = t.gp_fit_ms !== null && t.gp_fit_ms !== undefined;
  box.dataset.contextCached = String(!!t.context_cached);
  box.dataset.gpFitCached = gp ? String(!!t.gp_fit_cached) : "";
  if (gp) {
    const gpPaid = t.gp_predict_ms + (t.gp_fit_cached ? 0 : t.gp_fit_ms);
    line(t.gp_fit_cached
      ? [[`exact GP ${ms(gpPaid)} now · `], ["GP fit cached", "cached"], [` (not paid this time; it took ${ms(t.gp_fit_ms)} when done)`]]
      : [[`exact GP ${ms(gpPaid)} now (fit ${ms(t.gp_fit_ms)} + predict ${ms(t.gp_predict_ms)})`]]);
    const paidRatio = gpPaid / Math.max(t.pfn_ms, 1e-6);
    box.dataset.speedup = String(t.speedup);
    box.dataset.paidRatio = String(paidRatio);
    line(t.context_cached || t.gp_fit_cached
      ? [[`time paid in this request: exact GP ${sig(paidRatio, 3)}× ${model}'s · from scratch on a new context ` +
          `(GP fit + predict vs encoding + predict): ${model} ${sig(t.speedup, 3)}× faster`]]
      : [[`both from scratch: ${model} ${sig(t.speedup, 3)}× faster than the exact GP (fit and encoding paid now)`]]);
  }
  line([[`round trip in the browser ${ms(roundTripMs)}`]]);
  box.dataset.roundTripMs = roundTripMs.toFixed(1);
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
      // network-fit's: how far the meters pin the bus's correction (0: the network model alone, 1: pinned)
      determined: answer.determined ? answer.determined[j] : undefined,
      // network-fit's: how far its meter's readings sit from what the feeder and the other meters explain (0: none)
      offset: answer.reading_offsets ? answer.reading_offsets[j] : 0,
      gpMean: answer.gp ? answer.gp.mean[row][j] : undefined, gpStd: answer.gp ? answer.gp.std[row][j] : undefined });
  });
  return map;
}

function draw() {
  const a = state.answer;
  if (!a) return;
  const row = +($("row-select").value || 0);
  const data = { topo: state.topo, bus: busData(a, row), band: a.band, threshold: +$("risk-threshold").value / 100, gp: !!a.gp,
                 determined: !!a.determined, model: a.model };
  showExtrapolation(a, row);
  showSuspectMeters(a);
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

// network-fit's suspect meters (the answer's `reading_offsets`): readings a constant offset from what the feeder
// and the other meters explain; the model set them aside, and the operator should check them.
function showSuspectMeters(a) {
  const box = $("suspect-meters");
  const named = (a.reading_offsets || []).map((v, j) => [+a.outputs[j].replace(/^\D+/, ""), v]).filter(([, v]) => v !== 0);
  box.dataset.buses = named.map(([bus]) => bus).join(",");
  box.textContent = named.length
    ? `⚠ Suspect meter${named.length > 1 ? "s" : ""}: ` +
      named.map(([bus, v]) => `bus ${bus} reads ${v > 0 ? "+" : ""}${sig(v)} p.u.`).join(", ") +
      " off what the feeder and the other meters explain. Set aside: the bus is predicted from the other meters " +
      "and the network model, its interval wide enough for either. Check the meter (or a regulator on its branch)."
    : "";
  box.hidden = !named.length;
}

function legend(data) {
  const items = [["var(--accent)", `${data.model} mean`], ["#1f5fbf44", "50 % band"], ["#1f5fbf22", "90 % band"],
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
  const name = state.topo.named && state.topo.bus_names.get(bus) ? ` · ${state.topo.bus_names.get(bus)}` : "";
  const lines = d.slack ? [`Bus ${bus}${name}: substation (slack), ${typeof d.mean === "number" ? `${volt(d.mean)} p.u.` : d.mean}`] : [
    `Bus ${bus}${name}`, `P(outside ${data.band[0]}–${data.band[1]} p.u.): ${prob(d.p)} (${pct(d.p)})`,
    `mean ${volt(d.mean)} p.u.`, `50 % band ${volt(d.q25)} – ${volt(d.q75)}`, `90 % band ${volt(d.q05)} – ${volt(d.q95)}`];
  if (!d.slack && d.gpMean !== undefined) lines.push(`GP mean ${volt(d.gpMean)} ± ${sig(d.gpStd)}`);
  if (!d.slack && d.determined !== undefined) lines.push(`determined by the meters ${share(d.determined)} (0: network model alone, 1: pinned)`);
  if (!d.slack && d.offset) lines.push(`⚠ suspect meter: reads ${d.offset > 0 ? "+" : ""}${sig(d.offset)} p.u. off, set aside`);
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
  const gp = data.gp, determined = data.determined;
  t.textContent = "";
  const hr = t.createTHead().insertRow();
  for (const label of ["bus", "mean p.u.", "5 %", "25 %", "75 %", "95 %", "P(outside)", "context readings",
                       ...(determined ? ["determined"] : []), ...(gp ? ["GP mean", "GP std"] : [])]) {
    const th = document.createElement("th");
    th.textContent = label;
    hr.appendChild(th);
  }
  const body = document.createElement("tbody");
  for (const [bus, d] of [...data.bus.entries()].sort((a, b) => a[0] - b[0])) {
    if (d.slack) continue;
    const tr = document.createElement("tr");
    tr.className = [d.p > data.threshold ? "at-risk" : "", d.metered ? "" : "unmetered"].join(" ").trim();
    tr.dataset.metered = String(d.metered);
    // rounded for reading; the API's exact numbers in data-value and the cell's title (and in the download)
    const read = d.metered ? (d.readings === null ? "yes" : String(d.readings)) : "not metered";
    const cells = [[busLabel(bus)], [d.mean, volt], [d.q05, volt], [d.q25, volt], [d.q75, volt], [d.q95, volt], [d.p, prob], [read],
                   ...(determined ? [[d.determined, share]] : []), ...(gp ? [[d.gpMean, volt], [d.gpStd, sig]] : [])];
    for (const [value, format] of cells) {
      const td = tr.insertCell();
      td.textContent = format ? format(value) : String(value);
      if (format) { td.dataset.value = String(value); td.title = String(value); }
    }
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

// A job's box in the batch jobs card, polled until it ends; `about` what the page knows of it besides its status
// (a hosting-capacity job's request: `hosting`).
function trackJob(job, name, about = {}) {
  const box = document.createElement("div");
  box.className = "job";
  box.dataset.jobId = job.id;
  box.about = about;
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
    const unit = s.source === "hosting-capacity" ? "buses" : "rows";  // a hosting job's rows are its candidate buses
    const perS = s.rows_per_s >= 10 ? Math.round(s.rows_per_s).toLocaleString("en") : sig(s.rows_per_s, 2);
    const rate = s.rows_per_s ? ` · ${perS} ${unit}/s` : "";
    box.querySelector(".progress-text").textContent = `${s.rows_done.toLocaleString("en")} / ${s.rows_total.toLocaleString("en")} ${unit}${rate}`;
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
  if (s.source === "hosting-capacity") return guarded(errBox, null, () => jobHostingTable(box, s));
  await guarded(errBox, null, async () => {
    const [hist, summary] = await Promise.all([call("GET", `/ui/api/batch-jobs/${s.id}/risk-histogram?bins=20`),
                                              call("GET", `/v1/batch-jobs/${s.id}/summary`)]);
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
    jobRiskTable(box, summary);
  });
}

// A finished job's per-bus risk (GET /v1/batch-jobs/{id}/summary) as the study's table: the riskiest bus first,
// re-sorted by a header click, redrawn when the risk threshold changes; its worst row is 0-based, as the
// result's long layout numbers rows. Bus names are the job's network's, which may not be the one picked now.
function jobRiskTable(box, a) {
  const wrap = document.createElement("div");
  wrap.className = "table-wrap risk-wrap";
  const table = document.createElement("table");
  table.className = "risk-table job-risk";
  wrap.appendChild(table);
  box.appendChild(wrap);
  const named = a.summary.some((r) => r.bus_name && !/^\d+$/.test(r.bus_name));
  // a study job also names its worst row by scenario (and time step); a time series' hours outside
  const worst = [...(a.summary.some((r) => "worst_scenario" in r) ? [WORST_SCENARIO] : []),
                 ...(a.summary.some((r) => given(r.worst_timestamp)) ? [WORST_TIME] : []), ["worst_row", "worst row (from 0)", String, 1]];
  const columns = riskColumns(a.extremes_of || [null, null], worst, named, given(a.hours_per_row));
  const view = { key: "max_p_outside", dir: -1 };
  box.redrawRisk = () => riskTable(table, a.summary, columns, view, +$("risk-threshold").value / 100, box.redrawRisk);
  box.redrawRisk();
  box.dataset.summaryRows = a.summary.length;
}

async function download(id, format) {
  const response = await call("GET", `/v1/batch-jobs/${id}/result?format=${format}`);
  save(await response.blob(), `${id}.${format}`);
}

function save(blob, filename) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// A CSV of full-precision numbers (String(x): the shortest text that reads back as the same double). Text
// cells are quoted; one a spreadsheet would take for a formula (= + - @ first) is prefixed with '.
function csvBlob(columns, rows) {
  const cell = (v) => {
    if (typeof v === "number") return Number.isFinite(v) ? String(v) : "";
    if (v === null || v === undefined) return "";
    const text = String(v);
    return `"${(/^[=+\-@\t\r]/.test(text) ? `'${text}` : text).replace(/"/g, '""')}"`;
  };
  const lines = [columns.join(","), ...rows.map((r) => r.map(cell).join(","))];
  return new Blob([lines.join("\n") + "\n"], { type: "text/csv" });
}

function downloadAnswer() {
  const a = state.answer;
  if (!a) return;
  const levels = Object.keys(a.quantiles);
  const columns = ["row", "bus", "output", "mean", "std", ...levels.map((l) => `q${l}`), "p_outside", "extrapolation",
                   ...(a.gp ? ["gp_mean", "gp_std"] : [])];
  const rows = [];
  a.mean.forEach((_, r) => a.outputs.forEach((name, j) => rows.push([
    r + 1, +name.replace(/^\D+/, ""), name, a.mean[r][j], a.std[r][j], ...levels.map((l) => a.quantiles[l][r][j]),
    a.p_outside_band[r][j], a.extrapolation[r], ...(a.gp ? [a.gp.mean[r][j], a.gp.std[r][j]] : [])])));
  save(csvBlob(columns, rows), "prediction.csv");
}

// ---------------------------------------------------------------- planning study (POST /v1/studies)
function pvRow(bus = null, kw = 250) {
  const row = document.createElement("div");
  row.className = "pv";
  const sel = document.createElement("select");
  sel.className = "pv-bus";
  for (const b of state.topo.load_buses) {
    const o = document.createElement("option");
    o.value = b;
    o.textContent = `bus ${busLabel(b)}`;
    sel.appendChild(o);
  }
  if (bus !== null) sel.value = bus;
  const input = document.createElement("input");
  Object.assign(input, { type: "number", value: kw, step: "10", className: "pv-kw" });
  const unit = document.createElement("span");
  unit.textContent = "kW";
  const profile = document.createElement("input");
  Object.assign(profile, { type: "text", className: "pv-profile", maxLength: 256, size: 10 });
  profile.setAttribute("list", "pv-profiles");
  const remove = document.createElement("button");
  Object.assign(remove, { type: "button", textContent: "×", title: "remove this PV", className: "pv-remove" });
  remove.addEventListener("click", () => row.remove());
  row.append(sel, input, unit, profile, remove);
  $("pv-list").appendChild(row);
  enableProfile(profile);
}

function resetPv() { $("pv-list").textContent = ""; }

// A PV's profile (its `der[].profile`): a column of the study's profile table its output follows, times the
// table's `pv` share. Without a table there is no time series for it to follow: the input is disabled, and
// nothing is sent.
function enableProfile(input) {
  const table = !!$("study-file").files[0];
  input.disabled = !table;
  input.placeholder = table ? "pv share" : "full output";
  input.title = table ? "the profile column of the table this PV's output follows (times pv); empty: the pv share alone"
                      : "choose a profile table (Time series) to make this PV follow one of its profiles";
}

// A profile table's header names that are profiles (not the time, nor the overall and per-bus factors).
const RESERVED_COLUMN = /^(time|timestamps?|load|pv|(load|pv)_bus\d+)$/;

// The names a CSV's header row gives (quoted names unquoted); null for a Parquet table, which the page does
// not read.
async function tableColumns(file) {
  if (/\.(parquet|pq)$/i.test(file.name)) return null;
  const text = (await file.slice(0, 262144).text()).replace(/^\uFEFF/, "");
  const line = text.split(/\r?\n/, 1)[0];
  const names = [];
  for (const m of line.matchAll(/(?:^|,)(?:"((?:[^"]|"")*)"|([^,]*))/g)) names.push(m[1] !== undefined ? m[1].replace(/""/g, '"') : m[2].trim());
  return names;
}

// The profiles offered to every PV's picker: the chosen CSV's profile columns, or (a Parquet table) the
// network's customer classes, whose profiles such a table usually carries (SimBench's PV5). Names come
// from the user's file: only ever set as option values.
async function updatePvProfiles() {
  const file = $("study-file").files[0];
  const columns = file ? await tableColumns(file) : [];
  const names = columns === null ? state.topo.classes.map((c) => c.name) : columns.filter((n) => n && !RESERVED_COLUMN.test(n));
  const list = $("pv-profiles");
  list.textContent = "";
  for (const name of names) {
    const o = document.createElement("option");
    o.value = name;
    list.appendChild(o);
  }
  list.dataset.names = JSON.stringify(names);
  for (const input of document.querySelectorAll("#pv-list .pv-profile")) enableProfile(input);
}

// One input per customer class of the network (hidden when it has none), in % of the class's base: the
// scenario's class_scaling. Class names come from the uploader: only ever text and data attributes.
function resetClasses() {
  const list = $("class-list");
  list.textContent = "";
  const mw = (x) => `${x.toFixed(3)} MW`;
  for (const c of state.topo.classes) {
    const row = document.createElement("label");
    row.className = "class-scale";
    const name = document.createElement("span");
    name.className = "class-name";
    name.textContent = c.name;
    name.title = c.name;
    const input = document.createElement("input");
    Object.assign(input, { type: "number", value: 100, min: 0, max: 10000, step: 5 });
    input.dataset.class = c.name;
    // a class at 0 MW (mv_oberrhein's PV sgens are at scaling 0) moves nothing: the server refuses scaling it
    input.disabled = !c.consumption_p_mw && !c.generation_p_mw;
    const n = c.load_buses.length;
    const what = [c.consumption_p_mw ? `${mw(c.consumption_p_mw)} consumed` : "", c.generation_p_mw ? `${mw(c.generation_p_mw)} produced` : ""];
    const base = document.createElement("span");
    base.className = "note";
    base.textContent = `% of ${what.filter(Boolean).join(", ") || "0 MW"} at ${n} load bus${n === 1 ? "" : "es"}`;
    row.append(name, input, base);
    list.appendChild(row);
  }
  $("class-box").hidden = !state.topo.classes.length;
}

// {class: factor} from the class inputs; null when the network has no classes.
function classScaling() {
  const inputs = [...$("class-list").querySelectorAll("input[data-class]")];
  if (!inputs.length) return null;
  const scaling = {};
  for (const input of inputs) {
    const value = parseFloat(input.value);
    if (!Number.isFinite(value)) {
      throw new Problem({ title: "Invalid class scaling", detail: `class “${input.dataset.class}”: give a share of its base in %, e.g. 130`, errors: [] });
    }
    scaling[input.dataset.class] = value / 100;
  }
  return scaling;
}

// "100, 140" -> [100, 140]: one study row (scenario) per load level, in % of the base consumption.
function loadLevels(text) {
  const cells = text.split(/[,;\s]+/).filter(Boolean);
  const levels = cells.map(Number);
  const bad = cells.find((c, i) => !Number.isFinite(levels[i]) || levels[i] < 0 || levels[i] > 10000);
  if (!cells.length || bad !== undefined) {
    throw new Problem({ title: "Invalid load levels", detail: `${bad === undefined ? "none given" : `“${bad}”`}: ` +
      "give one or more percentages of the base consumption between 0 and 10000, e.g. 100, 140", errors: [] });
  }
  return levels;
}

// The study as JSON: one scenario per load level, with the PV added and the class factors.
function studyBody() {
  const levels = loadLevels($("study-load").value);
  const table = !!$("study-file").files[0];
  const der = [...document.querySelectorAll("#pv-list .pv")].map((row) => {
    const profile = row.querySelector(".pv-profile").value.trim();
    return { bus: +row.querySelector(".pv-bus").value, kw: parseFloat(row.querySelector(".pv-kw").value),
             ...(table && profile ? { profile } : {}) };
  });
  const bad = der.findIndex((d) => !Number.isFinite(d.kw));
  if (bad >= 0) throw new Problem({ title: "Invalid PV", detail: `PV ${bad + 1} (bus ${der[bad].bus}): give its size in kW`, errors: [] });
  const kw = der.reduce((s, d) => s + d.kw, 0);
  const pv = der.length ? ` + ${kw.toLocaleString("en")} kW PV` : "";
  const scaling = classScaling();
  const changed = Object.entries(scaling || {}).filter(([, f]) => f !== 1).map(([c, f]) => ` · ${c} ${+(100 * f).toFixed(2)} %`).join("");
  const scenario = (l) => ({ name: `load ${l} %${pv}${changed}`.slice(0, 200), load_scale: l / 100, der,
                             ...(scaling ? { class_scaling: scaling } : {}) });
  return { model: $("model").value, context_id: state.context.id, voltage_band: band(), quantiles: [0.05, 0.95],
           detail: "summary", scenarios: levels.map(scenario) };
}

// With a profile table: multipart, the study as the `spec` field (with step_hours) before the `file` part.
function studyForm(body, file) {
  const form = new FormData();
  form.append("spec", JSON.stringify({ ...body, step_hours: parseFloat($("study-step").value) }));
  form.append("file", file, file.name);
  return form;
}

async function runStudy() {
  await guarded($("study-error"), $("study-btn"), async () => {
    const body = studyBody();
    if ($("study-job").checked) body.as_job = true;
    const file = $("study-file").files[0];
    $("study-queued").hidden = true;
    const answer = await call("POST", "/v1/studies", file ? studyForm(body, file) : body);
    if (body.as_job) return studyQueued(answer, file);
    state.study = { answer, key: "max_p_outside", dir: -1 };
    showStudy();
    $("study-card").scrollIntoView({ block: "nearest" });
  });
}

// A study run as a batch job (202): tracked in the batch jobs card, whose finished job shows the same table.
function studyQueued(job, file) {
  const name = `study: load ${loadLevels($("study-load").value).join(", ")} %${file ? ` × ${file.name}` : ""}`;
  trackJob(job, name);
  const note = $("study-queued");
  note.textContent = `queued as batch job ${job.id.slice(0, 8)} (${job.rows_total.toLocaleString("en")} rows): ` +
    "its progress and per-bus table are under Batch jobs";
  note.dataset.jobId = job.id;
  note.hidden = false;
  $("batch").scrollIntoView({ block: "nearest" });
}

// Hours as shown: 3 significant digits, whole hours from 100 h up (a year has 8,760).
function hours(x) {
  if (!Number.isFinite(x)) return "–";
  return Math.abs(x) >= 100 ? Math.round(x).toLocaleString("en") : sig(x, 3);
}

// A per-bus risk summary's columns (a study's, a batch job's: the same kernel, bus_summary.py): key, header,
// how a value is shown, the first click's direction (-1: largest first). `levels`: the quantiles the extremes
// are of; `worst`: the columns (keys worst_*) naming where a bus's risk is largest; `named`: bus names say more
// than numbers; `timed`: a time series' expected hours outside the band (and their std) are shown.
function riskColumns(levels, worst, named, timed = false) {
  const [lo, hi] = levels.map((q) => (Number.isFinite(q) ? `${+(100 * q).toFixed(1)} %` : "no"));  // no quantiles asked
  return [
    ["bus", "bus", String, 1],
    ...(named ? [["bus_name", "name", String, 1]] : []),
    ["max_p_outside", "max P(outside)", prob, -1],
    ["mean_p_outside", "mean P(outside)", prob, -1],
    ...(timed ? [["hours_outside", "hours outside", hours, -1], ["hours_outside_std", "± std (h)", hours, -1]] : []),
    ["lowest_vm_pu", `lowest |V| (${lo} quantile)`, volt, 1],
    ["highest_vm_pu", `highest |V| (${hi} quantile)`, volt, -1],
    ...worst,
  ];
}

const given = (v) => v !== null && v !== undefined;
const WORST_SCENARIO = ["worst_scenario", "worst in", String, 1];
const WORST_TIME = ["worst_timestamp", "worst time", String, 1];

function studyColumns(a) {
  const timed = a.summary.some((r) => given(r.hours_outside));
  return riskColumns([a.quantiles[0], a.quantiles[a.quantiles.length - 1]], [WORST_SCENARIO, ...(timed ? [WORST_TIME] : [])],
                     state.topo.named, timed);
}

// A sortable per-bus table into `table` (the study's, a job's and hosting capacity's): sorted by `view.key`
// (`view.dir` -1: largest first; ties by `ties`, then the bus number), a header click sorts by its column
// and calls `redraw`. Numbers rounded by their column's format, the exact double in data-value and the
// title; bus names, text from an uploader, only ever as textContent. `rowClass(r)` marks a row, `blank(k, r)`
// shows a cell as "–".
function sortableTable(table, rows, columns, view, redraw, { ties = () => 0, rowClass = () => "", blank = () => false } = {}) {
  const { key, dir } = view;
  table.textContent = "";
  table.dataset.rows = rows.length;
  table.dataset.sort = `${key} ${dir < 0 ? "descending" : "ascending"}`;
  const hr = table.createTHead().insertRow();
  for (const [k, label, , first] of columns) {
    const th = document.createElement("th");
    th.textContent = label;
    th.dataset.key = k;
    if (k === "bus_name") th.className = "name";
    if (k === key) th.setAttribute("aria-sort", dir < 0 ? "descending" : "ascending");
    th.addEventListener("click", () => {
      view.dir = view.key === k ? -view.dir : first;
      view.key = k;
      redraw();
    });
    hr.appendChild(th);
  }
  const order = (r, s) => {
    const [x, y] = [r[key], s[key]];
    const c = typeof x === "string" || typeof y === "string" ? String(x).localeCompare(String(y)) : x - y;
    return dir * c || ties(r, s) || r.bus - s.bus;
  };
  const body = table.createTBody();
  for (const r of [...rows].sort(order)) {
    const tr = body.insertRow();
    tr.dataset.bus = r.bus;
    const cls = rowClass(r);
    if (cls) tr.className = cls;
    for (const [k, , format] of columns) {
      const td = tr.insertCell();
      td.textContent = blank(k, r) ? "–" : format(r[k]);
      td.dataset.key = k;
      if (k === "bus_name") { td.className = "name"; td.title = r[k]; }
      if (typeof r[k] === "number") { td.dataset.value = String(r[k]); td.title = String(r[k]); }
    }
  }
}

// A per-bus risk summary's table: ties by the largest risk, then the lowest voltage; rows whose largest
// P(outside) exceeds `threshold` are at risk; a bus never at risk has no worst row (every row ties at 0).
function riskTable(table, summary, columns, view, threshold, redraw) {
  sortableTable(table, summary, columns, view, redraw, {
    ties: (r, s) => s.max_p_outside - r.max_p_outside || r.lowest_vm_pu - s.lowest_vm_pu,
    rowClass: (r) => (r.max_p_outside > threshold ? "at-risk" : ""),
    blank: (k, r) => k.startsWith("worst_") && !r.max_p_outside,
  });
}

function showStudy() {
  const a = state.study.answer;
  $("study-card").hidden = false;
  const t = a.timing;
  $("study-info").textContent = `${a.model} · ${a.rows} row${a.rows === 1 ? "" : "s"} × ${a.summary.length} buses · ` +
    `${ms(t.total_ms)} in the server${t.context_cached ? " (context fit cached)" : ` (context fit ${ms(t.model_encode_ms)} now)`}`;
  const threshold = +$("risk-threshold").value / 100;
  const risky = a.summary.filter((r) => r.max_p_outside > threshold).length;
  const note = $("study-note");
  note.className = a.extrapolated_rows ? "warning" : "note";
  const timed = a.summary.some((r) => given(r.hours_outside));
  note.textContent = `P(|V| outside ${a.voltage_band[0]}–${a.voltage_band[1]} p.u.) per bus over the study's rows; ` +
    `${risky} bus${risky === 1 ? "" : "es"} above ${pct(threshold)}.` +
    (timed ? " Hours outside: the expected hours outside the band over the time series (each row its step's hours), " +
      "in the scenario with the most; ± their std were the steps independent (a lower bound)." : "") +
    (a.extrapolated_rows ? ` ⚠ ${a.extrapolated_rows} of ${a.rows} rows lie outside the context's loads: intervals are wider there.` : "");
  showStudyColumns(a);
  riskTable($("study-table"), a.summary, studyColumns(a), state.study, threshold, showStudy);
}

// What a profile table held that the study did not use: columns not read, profiles no class or PV took.
function showStudyColumns(a) {
  const box = $("study-columns");
  const ignored = a.ignored_columns || [], unused = a.unused_profiles || [];
  const list = (names) => (names.length > 12 ? `${names.slice(0, 12).join(", ")}, … (${names.length})` : names.join(", "));
  box.textContent = [ignored.length ? `Columns not used (ignored): ${list(ignored)}.` : "",
                     unused.length ? `Profiles no class or PV took: ${list(unused)}.` : ""].filter(Boolean).join(" ");
  box.dataset.ignored = JSON.stringify(ignored);
  box.dataset.unused = JSON.stringify(unused);
  box.hidden = !box.textContent;
}

function downloadStudy() {
  const a = state.study && state.study.answer;
  if (!a) return;
  const columns = Object.keys(a.summary[0] || {});
  save(csvBlob(columns, a.summary.map((r) => columns.map((c) => r[c]))), "study-summary.csv");
}

// ---------------------------------------------------------------- hosting capacity (POST /v1/hosting-capacity)
// "2, 18" -> [2, 18]; blank -> null (the API's default: every load bus). Unknown buses are the API's to refuse.
function candidateBuses(text) {
  const cells = text.split(/[,;\s]+/).filter(Boolean);
  if (!cells.length) return null;
  const bad = cells.find((c) => !/^\d+$/.test(c));
  if (bad !== undefined) {
    throw new Problem({ title: "Invalid candidate buses", detail: `“${bad}”: give bus numbers separated by commas, e.g. 6, 18, 33`, errors: [] });
  }
  return cells.map(Number);
}

function kw(x) {
  return Number.isFinite(x) ? x.toLocaleString("en", { minimumFractionDigits: 1, maximumFractionDigits: 1 }) : "–";
}

function hostingColumns(named) {
  return [
    ["bus", "bus", String, 1],
    ...(named ? [["bus_name", "name", String, 1]] : []),
    ["hosting_capacity_kw", "hosting capacity (kW)", kw, 1],
    ["at_max_kw", "at the search's maximum", (v) => (v ? "≥ max searched" : ""), -1],
  ];
}

async function runHosting() {
  await guarded($("hc-error"), $("hc-btn"), async () => {
    const body = { model: $("model").value, context_id: state.context.id,
                   upper_pu: parseFloat($("hc-upper").value), alpha: parseFloat($("hc-alpha").value) };
    const buses = candidateBuses($("hc-buses").value);
    if (buses) body.buses = buses;
    if ($("hc-load").value.trim()) body.load_scales = loadLevels($("hc-load").value).map((l) => l / 100);
    if ($("hc-job").checked) body.as_job = true;
    $("hc-queued").hidden = true;
    const answer = await call("POST", "/v1/hosting-capacity", body);
    if (body.as_job) return hostingQueued(answer, body);
    // rows as the sortable table wants them: bus_name beside name (the column key the risk tables use)
    const rows = answer.buses.map((b) => ({ ...b, bus_name: b.name }));
    state.hosting = { answer, rows, body, key: "hosting_capacity_kw", dir: 1, bus: null };
    showHosting();
    $("hc-card").scrollIntoView({ block: "nearest" });
  });
}

// Hosting capacity run as a batch job (202): tracked in the batch jobs card, whose finished job shows the same
// per-bus table (and each bus's curve) from its result.
function hostingQueued(job, body) {
  const buses = body.buses ? `bus${body.buses.length === 1 ? "" : "es"} ${busRanges(body.buses)}` : "every load bus";
  trackJob(job, `hosting capacity: ${buses}`, { hosting: body });
  const note = $("hc-queued");
  note.textContent = `queued as batch job ${job.id.slice(0, 8)} (${job.rows_total.toLocaleString("en")} candidate ` +
    `bus${job.rows_total === 1 ? "" : "es"}): its progress and per-bus table are under Batch jobs`;
  note.dataset.jobId = job.id;
  note.hidden = false;
  $("batch").scrollIntoView({ block: "nearest" });
}

function showHosting() {
  const h = state.hosting;
  const a = h.answer;
  $("hc-card").hidden = false;
  $("hc-info").textContent = `${a.model} · ${a.rows} row${a.rows === 1 ? "" : "s"} × ${a.buses.length} candidate` +
    `${a.buses.length === 1 ? "" : "s"} · ${ms(a.timing.total_ms)} in the server`;
  const over = Number.isFinite(a.risk_without_pv) && a.risk_without_pv > h.body.alpha;
  const note = $("hc-note");
  note.className = over ? "warning" : "note";
  note.textContent = `Largest PV per bus with P(some bus above ${h.body.upper_pu} p.u.) ≤ ${h.body.alpha} on every row; ` +
    `search up to ${kw(a.max_kw)} kW in steps of ${kw(a.resolution_kw)} kW; risk without new PV ${pct(a.risk_without_pv)}.` +
    (over ? " ⚠ The feeder is above the limit already without new PV: every bus hosts 0 kW." : "") +
    " Voltage only: line and transformer loading are not checked.";
  hostingTable($("hc-table"), h.rows, hostingColumns(state.topo.named), h, showHosting);
  drawHostingCurve();
}

// A hosting-capacity table (the card's, a job's): the weakest bus first, sortable, a clicked row picked
// (`view.bus`) and `redraw` called.
function hostingTable(table, rows, columns, view, redraw) {
  sortableTable(table, rows, columns, view, redraw, {
    ties: (r, s) => r.hosting_capacity_kw - s.hosting_capacity_kw,
    rowClass: (r) => [r.at_max_kw ? "at-max" : "", r.bus === view.bus ? "picked" : ""].filter(Boolean).join(" "),
  });
  for (const tr of table.tBodies[0].rows) tr.addEventListener("click", () => { view.bus = +tr.dataset.bus; redraw(); });
}

// Text of a CSV (a header row; quoted cells with "" for a quote) as rows of cells.
function csvRows(text) {
  const rows = [];
  let row = [], cell = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { cell += '"'; i++; } else if (c === '"') quoted = false; else cell += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(cell); cell = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(cell); rows.push(row); row = []; cell = "";
    } else cell += c;
  }
  if (cell || row.length) { row.push(cell); rows.push(row); }
  return rows;
}

// A finished hosting-capacity job's result (a row per candidate bus, read as CSV: its curves as JSON lists) as
// the hosting card's table, with the clicked bus's curve. Bus names are the job's network's.
async function jobHostingTable(box, s) {
  const response = await call("GET", `/v1/batch-jobs/${s.id}/result?format=csv`);
  const [head, ...lines] = csvRows(await response.text());
  const rows = lines.map((cells) => {
    const r = Object.fromEntries(head.map((k, i) => [k, cells[i]]));
    return { bus: +r.bus, bus_name: r.bus_name, hosting_capacity_kw: +r.hosting_capacity_kw, at_max_kw: r.at_max_kw === "true",
             risk_without_pv: +r.risk_without_pv, curve_kw: JSON.parse(r.curve_kw), curve_risk: JSON.parse(r.curve_risk) };
  });
  const body = box.about.hosting;
  const named = rows.some((r) => r.bus_name && !/^\d+$/.test(r.bus_name));
  const base = rows.length ? rows[0].risk_without_pv : NaN;
  const over = Number.isFinite(base) && base > body.alpha;
  box.querySelector(".summary").textContent = `${rows.length} candidate bus${rows.length === 1 ? "" : "es"} · largest PV with ` +
    `P(some bus above ${body.upper_pu} p.u.) ≤ ${body.alpha} on every row · risk without new PV ${pct(base)}` +
    (over ? " · ⚠ above the limit already without new PV" : "");
  const wrap = document.createElement("div");
  wrap.className = "table-wrap risk-wrap";
  const table = document.createElement("table");
  table.className = "risk-table hc-table job-hosting";
  wrap.appendChild(table);
  const title = document.createElement("div");
  title.className = "note curve-title";
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 420 150");
  svg.classList.add("hc-curve");
  box.append(wrap, title, svg);
  const view = { key: "hosting_capacity_kw", dir: 1, bus: null };
  const redraw = () => {
    hostingTable(table, rows, hostingColumns(named), view, redraw);
    hostingCurve(svg, title, rows.find((r) => r.bus === view.bus), body.alpha, named);
  };
  redraw();
  box.dataset.hostingRows = rows.length;
}

function drawHostingCurve() {
  const h = state.hosting;
  hostingCurve($("hc-curve"), $("hc-curve-title"), h.rows.find((r) => r.bus === h.bus), h.body.alpha, state.topo.named);
}

// The risk-vs-size curve of the clicked bus `b` (a row of a hosting-capacity table; none: hidden) into `svg`:
// P(some bus above the limit) against the PV's kW, alpha dashed, the capacity marked. Each point keeps its
// exact numbers in data-kw / data-risk. `named`: bus names say more than numbers.
function hostingCurve(svg, title, b, alpha, named) {
  svg.textContent = "";
  title.textContent = b ? `risk vs PV size at bus ${b.bus}${named && b.bus_name ? ` · ${b.bus_name}` : ""}`
                        : "click a bus's row for its risk-vs-size curve";
  svg.toggleAttribute("hidden", !b);  // an SVG element has no .hidden property
  if (!b) { delete svg.dataset.bus; return; }
  svg.dataset.bus = b.bus;
  const W = 420, H = 150, L = 40, R = 10, T = 8, B = 26;
  const xmax = Math.max(...b.curve_kw, 1e-9);
  const x = (v) => L + (W - L - R) * v / xmax, y = (p) => T + (H - T - B) * (1 - p);
  el("line", { x1: L, x2: W - R, y1: y(0), y2: y(0), class: "axis" }, svg);
  el("line", { x1: L, x2: L, y1: y(0), y2: y(1), class: "axis" }, svg);
  for (const p of [0, 0.5, 1]) el("text", { x: L - 4, y: y(p) + 3, "text-anchor": "end", class: "tick" }, svg, String(p));
  for (const v of [0, xmax / 2, xmax]) el("text", { x: x(v), y: H - 12, "text-anchor": "middle", class: "tick" }, svg, kw(v));
  el("text", { x: (L + W - R) / 2, y: H - 1, "text-anchor": "middle", class: "tick" }, svg, "PV kW");
  el("line", { x1: L, x2: W - R, y1: y(alpha), y2: y(alpha), class: "limit" }, svg);
  el("line", { x1: x(b.hosting_capacity_kw), x2: x(b.hosting_capacity_kw), y1: y(0), y2: y(1), class: "capacity",
               "data-kw": String(b.hosting_capacity_kw) }, svg);
  el("polyline", { points: b.curve_kw.map((v, i) => `${x(v)},${y(b.curve_risk[i])}`).join(" "), class: "curve" }, svg);
  b.curve_kw.forEach((v, i) => {
    const c = el("circle", { cx: x(v), cy: y(b.curve_risk[i]), r: 2.5, class: "curve-point",
                             "data-kw": String(v), "data-risk": String(b.curve_risk[i]) }, svg);
    el("title", {}, c, `${kw(v)} kW: P = ${prob(b.curve_risk[i])}`);
  });
}

// ---------------------------------------------------------------- wiring
function refreshButtons() {
  const ready = !!(state.context && state.topo && $("model").value);
  $("predict-btn").disabled = !ready || (state.rows !== null && !state.rows.length);
  $("batch-submit").disabled = !ready;
  $("batch-sample").disabled = !ready;
  $("study-btn").disabled = !ready;
  $("hc-btn").disabled = !ready;
  $("bus-download").disabled = !state.answer;
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
  $("net-upload-btn").addEventListener("click", uploadNetwork);
  $("net-delete-btn").addEventListener("click", askDeleteNetwork);
  $("net-delete-yes").addEventListener("click", deleteNetwork);
  $("net-delete-no").addEventListener("click", () => { $("net-delete-confirm").hidden = true; });
  $("pv-add").addEventListener("click", () => { if (state.topo) pvRow(); });
  $("study-btn").addEventListener("click", runStudy);
  $("study-file").addEventListener("change", () => guarded($("study-error"), null, updatePvProfiles));
  $("study-file-clear").addEventListener("click", () => { $("study-file").value = ""; updatePvProfiles(); });
  $("study-download").addEventListener("click", downloadStudy);
  $("hc-btn").addEventListener("click", runHosting);
  $("bus-download").addEventListener("click", downloadAnswer);
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
  $("risk-threshold").addEventListener("change", () => {
    draw();
    if (state.study) showStudy();
    for (const box of document.querySelectorAll("#jobs .job")) if (box.redrawRisk) box.redrawRisk();
  });
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
