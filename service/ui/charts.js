// Small SVG charts for the operator's page: voltage profile, risk map (one-line diagram), histogram.
// Every drawn number carries its exact value in a data attribute (String(x): the shortest text that
// reads back as the same double), so what is drawn can be checked against the API's answer.

const NS = "http://www.w3.org/2000/svg";

export function el(name, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, v);
  if (text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }

// The radial tree from the slack bus over its edges (lines, transformers), whichever way round one is
// listed (breadth first; an edge that would close a loop is left out): Map(bus -> child buses).
export function treeChildren(topo) {
  const near = new Map();
  const link = (a, b) => { if (!near.has(a)) near.set(a, []); near.get(a).push(b); };
  topo.from_bus.forEach((f, i) => { link(f, topo.to_bus[i]); link(topo.to_bus[i], f); });
  const children = new Map(), seen = new Set([topo.slack_bus]), queue = [topo.slack_bus];
  while (queue.length) {
    const b = queue.shift();
    for (const n of near.get(b) || []) {
      if (seen.has(n)) continue;
      seen.add(n);
      queue.push(n);
      if (!children.has(b)) children.set(b, []);
      children.get(b).push(n);
    }
  }
  return children;
}

// The feeder as paths from the slack bus: the main feeder follows the deepest child, each other child
// starts a lateral that begins at its branching bus. Returns [{buses, branch}] (branch null for the main).
export function feederPaths(topo) {
  const children = treeChildren(topo);
  const depthBelow = new Map();
  const height = (b) => {
    if (depthBelow.has(b)) return depthBelow.get(b);
    const h = 1 + Math.max(0, ...(children.get(b) || []).map(height));
    depthBelow.set(b, h);
    return h;
  };
  const paths = [];
  const walk = (start, branch) => {
    const buses = branch === null ? [start] : [branch, start];
    const laterals = [];
    let b = start;
    for (;;) {
      const kids = (children.get(b) || []).slice().sort((p, q) => height(q) - height(p) || p - q);
      if (!kids.length) break;
      kids.slice(1).forEach((k) => laterals.push([k, b]));
      b = kids[0];
      buses.push(b);
    }
    paths.push({ buses, branch });
    laterals.forEach(([k, at]) => walk(k, at));
  };
  walk(topo.slack_bus, null);
  return paths;
}

// Tree layout: x = hops from the slack, y = a row per path. Laterals are placed nesting level by level,
// those branching furthest out first, each on the nearest row (alternating below and above its parent's)
// where neither its span nor its connector crosses what is already drawn; a new outer row otherwise.
export function treeLayout(topo) {
  const paths = feederPaths(topo);
  const depth = new Map([[topo.slack_bus, 0]]);
  const level = new Map();
  const pathOf = new Map();
  for (const path of paths) {  // parents come before their laterals in feederPaths' order
    path.buses.forEach((b, i) => { if (i > 0) depth.set(b, depth.get(path.buses[i - 1]) + 1); });
    level.set(path, path.branch === null ? 0 : level.get(pathOf.get(path.branch)) + 1);
    path.buses.forEach((b, i) => { if (path.branch === null || i > 0) pathOf.set(b, path); });
  }
  const order = paths.slice().sort((a, b) => level.get(a) - level.get(b)
    || (b.branch === null ? 0 : depth.get(b.branch)) - (a.branch === null ? 0 : depth.get(a.branch)));
  const pos = new Map();
  const rows = new Map(); // row -> [[x0, x1]]
  const free = (row, x0, x1) => !(rows.get(row) || []).some(([a, b]) => x0 <= b + 0.6 && a - 0.6 <= x1);
  for (const path of order) {
    const x0 = depth.get(path.buses[0]), x1 = depth.get(path.buses[path.buses.length - 1]);
    let row = 0;
    if (path.branch !== null) {
      const parentRow = pos.get(path.branch).row;
      const fits = (r) => {
        const lo = Math.min(r, parentRow), hi = Math.max(r, parentRow);
        for (let m = lo + 1; m < hi; m++) if (!free(m, x0, x0)) return false;
        return free(r, x0, x1);
      };
      const candidates = [];
      for (let k = 1; k <= paths.length + 1; k++) candidates.push(parentRow + k, parentRow - k);
      row = candidates.find(fits);
      if (row === undefined) row = Math.max(...rows.keys()) + 1;
    }
    if (!rows.has(row)) rows.set(row, []);
    rows.get(row).push([x0, x1]);  // a lateral's connector stands at its branching bus's x
    path.buses.forEach((b, i) => { if (path.branch === null || i > 0) pos.set(b, { x: depth.get(b), row }); });
  }
  return { paths, pos };
}

export function fmt(v, digits = 4) { return Number.isFinite(v) ? v.toFixed(digits) : "–"; }
// Numbers as shown on the page (the exact doubles stay in data attributes and in every download):
// voltages in p.u. to 5 decimals, probabilities and spreads to 3 and 2 significant digits, times in ms to 1 decimal.
export function volt(v) { return fmt(v, 5); }
export function sig(x, digits = 2) {
  if (!Number.isFinite(x)) return "–";
  if (x === 0) return "0";
  return Math.abs(x) < 1e-3 ? x.toExponential(digits - 1) : x.toPrecision(digits);  // 5.90e-6, not 0.00000590
}
export function prob(p) { return sig(p, 3); }
export function share(x) { return fmt(x, 2); }  // a share in [0, 1] (network-fit's `determined`): 0.93
export function ms(x) {
  return Number.isFinite(x) ? `${x.toLocaleString("en", { minimumFractionDigits: 1, maximumFractionDigits: 1 })} ms` : "–";
}
export function pct(p) {
  if (!Number.isFinite(p)) return "–";
  if (p === 0) return "0 %";
  if (p < 0.001) return "< 0.1 %";
  return `${(100 * p).toFixed(p < 0.1 ? 1 : 0)} %`;
}

function niceTicks(lo, hi, n = 6) {
  const step0 = (hi - lo) / n, mag = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= step0) || step0;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toFixed(10));
  return { ticks, step };
}

// Voltage profile. data: {topo, bus: Map(bus -> {mean, q05, q25, q75, q95, p, gpMean, gpStd, slack, metered, determined}),
// band: [low, high], threshold, gp: bool}
export function drawProfile(svg, data) {
  clear(svg);
  const W = 900, H = 330, L = 56, R = 10, T = 26, B = 34;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const paths = feederPaths(data.topo);
  const points = []; // {bus, x, primary}
  let xi = 0;
  paths.forEach((path, pi) => {
    if (pi > 0) xi += 0.8;
    path.points = path.buses.flatMap((b, i) => {
      if (!data.bus.has(b)) return [];  // no voltage to draw (a slack bus whose set point is not given)
      const p = { bus: b, x: xi, primary: path.branch === null || i > 0 };
      xi += 1;
      points.push(p);
      return [p];
    });
    xi -= 1;
  });
  const xmax = xi;
  const values = [...data.band];
  data.bus.forEach((d) => {
    values.push(d.mean);
    if (!d.slack) values.push(d.q05, d.q95);
    if (data.gp && d.gpMean !== undefined) values.push(d.gpMean - 1.645 * d.gpStd, d.gpMean + 1.645 * d.gpStd);
  });
  let lo = Math.min(...values), hi = Math.max(...values);
  const pad = (hi - lo) * 0.06 || 0.005;
  lo -= pad; hi += pad;
  const sx = (x) => L + (x / xmax) * (W - L - R);
  const sy = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
  const { ticks } = niceTicks(lo, hi);
  const axis = el("g", { class: "axis" }, svg);
  ticks.forEach((t) => {
    el("line", { class: "grid", x1: L, x2: W - R, y1: sy(t), y2: sy(t) }, svg);
    el("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, axis, t.toFixed(3));
  });
  el("text", { x: 12, y: T + (H - T - B) / 2, transform: `rotate(-90 12 ${T + (H - T - B) / 2})`, "text-anchor": "middle" },
     axis, "|V| (p.u.)");
  el("line", { x1: L, x2: L, y1: T, y2: H - B }, axis);
  el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B }, axis);
  data.band.forEach((v, i) => {
    el("line", { class: "limit", x1: L, x2: W - R, y1: sy(v), y2: sy(v), "data-limit": String(v) }, svg);
    el("text", { class: "risk-label", x: L + 4, y: sy(v) + (i ? -4 : 12) }, svg,
       `${i ? "upper" : "lower"} limit ${v}`);
  });
  const get = (b) => data.bus.get(b);
  const step = sx(1) - sx(0);
  for (const p of points) {  // at-risk buses: a shaded column behind everything
    const d = get(p.bus);
    if (p.primary && !d.slack && d.p > data.threshold) {
      el("rect", { class: "risk-column", x: sx(p.x) - step / 2, y: T, width: step, height: H - B - T, "data-bus": p.bus }, svg);
    }
  }
  for (const path of paths) {
    const pts = path.points;
    if (!pts.length) continue;
    const area = (a, b) => {
      const up = pts.map((p) => `${sx(p.x)},${sy(get(p.bus).slack ? get(p.bus).mean : get(p.bus)[b])}`);
      const down = pts.slice().reverse().map((p) => `${sx(p.x)},${sy(get(p.bus).slack ? get(p.bus).mean : get(p.bus)[a])}`);
      return up.concat(down).join(" ");
    };
    el("polygon", { class: "band90", points: area("q05", "q95") }, svg);
    el("polygon", { class: "band50", points: area("q25", "q75") }, svg);
    if (data.gp) {
      const gpv = (p, k) => { const d = get(p.bus); return d.slack ? d.mean : d.gpMean + k * 1.645 * d.gpStd; };
      [-1, 1].forEach((k) => el("polyline", { class: "gp-band", points: pts.map((p) => `${sx(p.x)},${sy(gpv(p, k))}`).join(" ") }, svg));
      el("polyline", { class: "gp-mean", points: pts.map((p) => `${sx(p.x)},${sy(gpv(p, 0))}`).join(" ") }, svg);
    }
    el("polyline", { class: "mean", points: pts.map((p) => `${sx(p.x)},${sy(get(p.bus).mean)}`).join(" ") }, svg);
    const first = pts[0], last = pts[pts.length - 1];
    el("text", { class: "path-label", x: (sx(first.x) + sx(last.x)) / 2, y: T - 10, "text-anchor": "middle" }, svg,
       path.branch === null ? `main feeder ${path.buses[0]}–${path.buses[path.buses.length - 1]}`
                            : `lateral at bus ${path.branch}`);
    el("line", { class: "grid", x1: sx(first.x) - 10, x2: sx(first.x) - 10, y1: T - 4, y2: H - B }, svg);
  }
  for (const p of points) {
    const d = get(p.bus);
    const risky = p.primary && !d.slack && d.p > data.threshold;
    el("text", { x: sx(p.x), y: H - B + 14, "text-anchor": "middle", class: p.primary ? (risky ? "risk-label" : "") : "path-label" },
       axis, String(p.bus));
    if (!p.primary) { el("circle", { class: "branch", cx: sx(p.x), cy: sy(d.mean), r: 2.5 }, svg); continue; }
    const atRisk = !d.slack && d.p > data.threshold;
    const unmetered = !d.slack && d.metered === false;  // a bus the context never read: drawn hollow
    const c = el("circle", { class: `bus-mean${atRisk ? " at-risk" : ""}${unmetered ? " unmetered" : ""}`,
      cx: sx(p.x), cy: sy(d.mean), r: atRisk ? 5 : 3,
      "data-bus": p.bus, "data-mean": String(d.mean), "data-slack": d.slack ? "true" : null,
      "data-metered": d.slack ? null : String(d.metered !== false),
      "data-determined": d.slack || d.determined === undefined ? null : String(d.determined),
      "data-q05": d.slack ? null : String(d.q05), "data-q25": d.slack ? null : String(d.q25),
      "data-q75": d.slack ? null : String(d.q75), "data-q95": d.slack ? null : String(d.q95),
      "data-p-outside": d.slack ? null : String(d.p), "data-at-risk": atRisk ? "true" : "false" }, svg);
    el("title", {}, c, d.slack ? `bus ${p.bus} (substation, slack): ${volt(d.mean)} p.u.`
      : `bus ${p.bus}: mean ${volt(d.mean)} p.u.\n90 % band ${volt(d.q05)} – ${volt(d.q95)}\nP(outside band) ${prob(d.p)}` +
        (unmetered ? "\nnot metered in the context" : "") +
        (d.determined === undefined ? "" : `\ndetermined by the meters ${share(d.determined)} (0: network model alone, 1: pinned)`));
    if (data.gp && !d.slack) {
      el("circle", { class: "gp-point", cx: sx(p.x), cy: sy(d.gpMean), r: 2, fill: "var(--gp)",
        "data-bus": p.bus, "data-gp-mean": String(d.gpMean), "data-gp-std": String(d.gpStd) }, svg);
    }
  }
  el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, axis, "bus (following the main feeder, then each lateral from its branching bus)");
}

// P(outside) -> colour: green at 0, amber at 5 %, red from 50 %.
export function riskColour(p) {
  if (!Number.isFinite(p)) return "#cfd6de";
  const stops = [[0, [46, 125, 50]], [0.01, [124, 179, 66]], [0.05, [251, 192, 45]], [0.2, [245, 124, 0]], [0.5, [198, 40, 40]]];
  if (p >= 0.5) return "rgb(198,40,40)";
  for (let i = 1; i < stops.length; i++) {
    if (p <= stops[i][0]) {
      const [a, ca] = stops[i - 1], [b, cb] = stops[i];
      const t = (p - a) / (b - a);
      return `rgb(${ca.map((c, k) => Math.round(c + t * (cb[k] - c))).join(",")})`;
    }
  }
  return "rgb(198,40,40)";
}

// One-line diagram coloured by P(outside band); onHover(bus|null, event) drives the page's tooltip.
export function drawRiskMap(svg, data, onHover) {
  clear(svg);
  const { pos } = treeLayout(data.topo);
  const xs = [...pos.values()].map((p) => p.x), rs = [...pos.values()].map((p) => p.row);
  const minR = Math.min(...rs), maxR = Math.max(...rs), maxX = Math.max(...xs);
  const W = 900, L = 24, R = 24, T = 22, rowH = 58;
  const H = T + (maxR - minR) * rowH + 62;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const sx = (x) => L + (x / maxX) * (W - L - R);
  const sy = (r) => T + (r - minR) * rowH + 6;
  data.topo.tie_from_bus.forEach((f, i) => {
    const a = pos.get(f), b = pos.get(data.topo.tie_to_bus[i]);
    if (a && b) el("path", { class: "tie", d: `M${sx(a.x)},${sy(a.row)} Q${(sx(a.x) + sx(b.x)) / 2},${(sy(a.row) + sy(b.row)) / 2 + 18} ${sx(b.x)},${sy(b.row)}`,
                 "data-tie": `${f}-${data.topo.tie_to_bus[i]}` }, svg);
  });
  for (const [f, kids] of treeChildren(data.topo)) {
    for (const t of kids) {
      const a = pos.get(f), b = pos.get(t);
      el("path", { class: "line", d: `M${sx(a.x)},${sy(a.row)} V${sy(b.row)} H${sx(b.x)}` }, svg);
    }
  }
  for (const [bus, p] of pos) {
    const d = data.bus.get(bus);
    const slack = bus === data.topo.slack_bus;
    const node = slack
      ? el("rect", { class: "node", x: sx(p.x) - 8, y: sy(p.row) - 8, width: 16, height: 16, fill: "#16324f", "data-bus": bus, "data-slack": "true" }, svg)
      : el("circle", { class: "node", cx: sx(p.x), cy: sy(p.row), r: 9, fill: d ? riskColour(d.p) : "#cfd6de",
          "data-bus": bus, "data-p-outside": d ? String(d.p) : null, "data-mean": d ? String(d.mean) : null }, svg);
    el("text", { class: "node-label", x: sx(p.x), y: sy(p.row) + 22, "text-anchor": "middle" }, svg, String(bus));
    node.addEventListener("mouseenter", (e) => onHover(bus, e));
    node.addEventListener("mousemove", (e) => onHover(bus, e));
    node.addEventListener("mouseleave", () => onHover(null));
  }
  // legend
  const lg = el("g", { transform: `translate(${L}, ${H - 16})` }, svg);
  el("text", { x: 0, y: 4 }, lg, "P(outside band):");
  [0, 0.01, 0.05, 0.2, 0.5].forEach((p, i) => {
    el("circle", { cx: 112 + i * 72, cy: 0, r: 6, fill: riskColour(p), stroke: "#333" }, lg);
    el("text", { x: 122 + i * 72, y: 4 }, lg, i === 4 ? "≥ 50 %" : pct(p));
  });
  el("rect", { x: 480, y: -6, width: 12, height: 12, fill: "#16324f" }, lg);
  el("text", { x: 496, y: 4 }, lg, "substation (slack)");
  el("line", { class: "tie", x1: 620, x2: 650, y1: 0, y2: 0 }, lg);
  el("text", { x: 656, y: 4 }, lg, "open tie line");
}

// Histogram of the worst-bus P(outside band) over a batch job's rows: {edges, counts, rows}.
export function drawHistogram(svg, hist) {
  clear(svg);
  const W = 640, H = 200, L = 56, R = 28, T = 10, B = 36;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const top = Math.max(1, ...hist.counts);
  const n = hist.counts.length;
  const bw = (W - L - R) / n;
  const sy = (c) => T + (1 - c / top) * (H - T - B);
  const axis = el("g", { class: "axis" }, svg);
  niceTicks(0, top, 4).ticks.filter((t) => Number.isInteger(t)).forEach((t) => {
    el("line", { class: "grid", x1: L, x2: W - R, y1: sy(t), y2: sy(t) }, svg);
    el("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, axis, String(t));
  });
  hist.counts.forEach((c, i) => {
    const r = el("rect", { class: "bar", x: L + i * bw + 1, y: sy(c), width: bw - 2, height: H - B - sy(c),
      fill: riskColour((hist.edges[i] + hist.edges[i + 1]) / 2), "data-count": String(c),
      "data-lo": String(hist.edges[i]), "data-hi": String(hist.edges[i + 1]) }, svg);
    el("title", {}, r, `${c} rows with worst-bus P(outside) in [${pct(hist.edges[i])}, ${pct(hist.edges[i + 1])})`);
  });
  for (let i = 0; i <= n; i += Math.max(1, Math.round(n / 5))) {
    el("text", { x: L + i * bw, y: H - B + 14, "text-anchor": "middle" }, axis, `${Math.round(100 * hist.edges[i])} %`);
  }
  el("line", { x1: L, x2: W - R, y1: H - B, y2: H - B }, axis);
  el("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, axis, "worst-bus P(outside band) per row");
  el("text", { x: 12, y: (H - B) / 2, transform: `rotate(-90 12 ${(H - B) / 2})`, "text-anchor": "middle" }, axis, "rows");
}
