// Shows the stats of the last sampling run on each of the pack's cache nodes (Krea2CacheDiT,
// CacheDiTDBCache, and CacheDiTSpectrum, whose steps show as "forecast" where the others' show "cached").
//
// Only the frontend's public extension API is used (registerExtension hooks,
// node.addDOMWidget, api events and fetchApi), and every style is
// inline on our own element, so a frontend update or another pack's CSS cannot
// break it and it restyles nothing else. A DOM widget (rather than canvas
// drawing; the chart is inline SVG inside it) renders in both the classic canvas
// and the DOM-based "Nodes 2.0" renderer, and its text is real DOM that tests and
// screen readers can read.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

// The pack's cache nodes: the Krea-2 one and the one for every supported family.
const NODE_CLASSES = new Set(["Krea2CacheDiT", "CacheDiTDBCache", "CacheDiTSpectrum"]);
const EVENT = "krea2_cachedit.stats";
const WIDGET = "krea2_cache_stats";
// "uncached": a run left to the model on purpose (skipped), where Cache-DiT does not know what ran.
const STATE_COLORS = { cached: "#3f9f5f", forecast: "#3f8fbf", partial: "#d0a030", computed: "#6b7280",
  uncached: "#2f333a" };
// Which Krea2CacheDiT node objects existed when each of this client's prompts
// started, so a run's record lands only on the node it was computed for and never
// on a same-id node of a workflow loaded (or cleared and rebuilt) meanwhile.
const runTargets = new Map();
// GET /krea2_cachedit/stats lists every client's runs: on page load, this client's
// runs of the restored workflow are shown on it once, and never on a later graph.
const pageLoad = { runs: null, done: false };
let graphsConfigured = 0;

function cacheNodes() {
  const nodes = new Map();
  const walk = (graph, prefix) => {
    for (const node of graph?.nodes ?? []) {
      const id = prefix + node.id;
      if (NODE_CLASSES.has(node.comfyClass)) nodes.set(id, node);
      // Nodes inside subgraphs run under "outer:inner" ids.
      if (node.subgraph) walk(node.subgraph, id + ":");
    }
  };
  walk(app.rootGraph ?? app.graph, "");
  return nodes;
}

function el(tag, style, text) {
  const e = document.createElement(tag);
  Object.assign(e.style, style);
  if (text !== undefined) e.textContent = text;
  return e;
}

const pct = (share) => `${(share * 100).toFixed(1)}%`;
const SVG_NS = "http://www.w3.org/2000/svg";
const LINE = 16; // px, the panel's line height
const PANEL_PADDING = 8;
const EMPTY_HEIGHT = 96;
const CHART = { height: 64, gutter: 30, threshold: "#f0f0f0" };
// Why a step was computed or cached, as the record names it.
const REASONS = {
  warmup: "warmup step",
  mask: "step mask",
  threshold: "residual diff vs threshold",
  threshold_off: "threshold 0: no threshold caching",
  max_continuous: "max continuous cached steps reached",
  max_cached: "max cached steps reached",
  fresh_context: "fresh cache (call layout changed)",
  no_reference: "no computed step to compare with",
  // Whole-call forecasting:
  schedule: "the schedule computes this step",
  final_steps: "a final step, always computed",
  history: "too few computed steps in this stream's history yet",
  forecast: "forecast from the computed steps",
};

// Whole-call forecasting runs: their steps are "forecast" ones (record.forecast_steps), and no residual is measured.
const isForecast = (record) => record.method?.name === "forecast";

// "spectrum (m 4, lambda 0.1, w 1) · preset turbo_5_of_8".
function forecastText(method) {
  const parts = method.forecast === "spectrum"
    ? [`m ${method.chebyshev_degree}`, `lambda ${method.ridge_lambda}`, `w ${method.blend_w}`] : [];
  return `${method.forecast}${parts.length ? ` (${parts.join(", ")})` : ""} · preset ${method.preset}`;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) e.setAttribute(name, value);
  return e;
}

// Thresholds and diffs span ~0.001 to ~2: 2 significant digits (2 decimals from 1 up), no exponent.
function num(value) {
  if (value >= 1) return value.toFixed(2);
  return Number(value.toPrecision(2)).toString();
}

const decadeLabel = (value) => Number(value.toPrecision(1)).toString();

const seconds = (s) => (Math.abs(s) < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`);

// The panel grows with its content; each row knows its height, so the node can be
// sized before the browser lays the panel out (it may be off screen).
function rows(panel) {
  let height = PANEL_PADDING;
  return {
    add(element, rowHeight) {
      panel.append(element);
      height += rowHeight;
    },
    get height() { return height; },
  };
}

// Log scale from just above the largest diff (or threshold) down to the decade below
// the smallest, at least one decade, so a 0.002 and a 1.5 both read and close values
// stay apart; y is 0 (top) to 100 (bottom) in the chart's viewBox.
function logScale(values) {
  const positive = values.filter((v) => Number.isFinite(v) && v > 0);
  if (!positive.length) return null;
  const top = Math.log10(Math.max(...positive) * 1.25);
  const bottom = Math.min(Math.floor(Math.log10(Math.min(...positive))), Math.floor(top) - 1);
  const y = (v) => {
    const clamped = Math.min(Math.max(Math.log10(Math.max(v, 1e-12)), bottom), top);
    return 100 * (top - clamped) / (top - bottom);
  };
  const decades = [];
  for (let d = Math.ceil(bottom); d <= Math.floor(top); d += 1) decades.push(10 ** d);
  return { y, decades };
}

function stepTooltip(record, step) {
  const diff = record.residual_diffs[step];
  const state = record.step_states[step] ?? "computed";
  const reason = record.step_reasons?.[step];
  return [`step ${step}`, `diff ${diff == null ? "not measured" : num(diff)}`, state,
    reason ? `reason: ${reason}${REASONS[reason] ? ` (${REASONS[reason]})` : ""}` : null]
    .filter(Boolean).join(" · ");
}

// Residual diff per step as bars on a log scale, the threshold as a line, bars
// coloured by what the step did; every bar (and every unmeasured step) has a tooltip.
function diffChart(record) {
  const diffs = record.residual_diffs;
  const threshold = record.settings?.residual_diff_threshold;
  const scale = logScale([...diffs, threshold > 0 ? threshold : NaN]);
  const box = el("div", { position: "relative", height: `${CHART.height}px`, margin: "2px 0 0",
    paddingLeft: `${CHART.gutter}px`, boxSizing: "border-box" });
  box.dataset.role = "chart";
  if (!scale) {
    box.append(el("div", { opacity: "0.6", fontSize: "10px" }, "no residual diffs measured"));
    return box;
  }
  const width = diffs.length * 10;
  const plot = svg("svg", { viewBox: `0 0 ${width} 100`, preserveAspectRatio: "none", width: "100%", height: "100%" });
  plot.style.display = "block";
  plot.style.overflow = "visible";
  // Centred on its line, but kept inside the chart.
  const label = (text, y, style = {}) => box.append(el("span", { position: "absolute", left: "0",
    width: `${CHART.gutter - 4}px`, textAlign: "right", font: "9px/12px sans-serif",
    top: `clamp(0px, calc(${y}% - 6px), calc(100% - 12px))`,
    opacity: "0.7", ...style }, text));
  const thresholdY = threshold > 0 ? scale.y(threshold) : null;
  const labelClearance = 100 * 11 / CHART.height; // a label's height, in the chart's y units
  for (const decade of scale.decades) {
    const y = scale.y(decade);
    plot.append(svg("line", { x1: 0, x2: width, y1: y, y2: y, stroke: "currentColor", "stroke-opacity": 0.15,
      "vector-effect": "non-scaling-stroke" }));
    if (thresholdY === null || Math.abs(y - thresholdY) >= labelClearance) label(decadeLabel(decade), y);
  }
  diffs.forEach((diff, step) => {
    const state = record.step_states[step] ?? "computed";
    const mark = svg("g", { "data-step": step, "data-state": state, "data-diff": diff ?? "" });
    mark.dataset.role = "step";
    mark.append(svg("title", {}));
    mark.firstChild.textContent = stepTooltip(record, step);
    // The whole column answers the pointer, not just the (maybe tiny) bar.
    mark.append(svg("rect", { x: step * 10, y: 0, width: 10, height: 100, fill: "transparent" }));
    const color = STATE_COLORS[state] ?? STATE_COLORS.computed;
    if (diff == null) {  // not measured (e.g. the first step): a hollow stub at the bottom
      mark.append(svg("rect", { x: step * 10 + 2, y: 92, width: 6, height: 8, fill: "none", stroke: color,
        "vector-effect": "non-scaling-stroke" }));
    } else {
      const top = scale.y(diff);
      mark.append(svg("rect", { x: step * 10 + 1.5, y: top, width: 7, height: Math.max(100 - top, 1.5), fill: color }));
    }
    plot.append(mark);
  });
  if (thresholdY !== null) {
    const y = thresholdY;
    const line = svg("line", { x1: 0, x2: width, y1: y, y2: y, stroke: CHART.threshold, "stroke-width": 1.5,
      "vector-effect": "non-scaling-stroke" });
    line.dataset.role = "threshold";
    line.append(svg("title", {}));
    line.firstChild.textContent = `threshold ${num(threshold)}`;
    plot.append(line);
    label(num(threshold), y, { opacity: "1", color: CHART.threshold, fontWeight: "bold" });
  }
  const plotArea = el("div", { height: "100%", color: "var(--input-text, #ddd)" });
  plotArea.append(plot);
  box.append(plotArea);
  return box;
}

// At most three thresholds that would have cached a different number of steps,
// those nearest the current threshold (the next nudge either way), listed low to high.
function suggestionText(record) {
  const current = record.settings?.residual_diff_threshold;
  const cachedNow = record.cached_steps.length;
  const byCount = new Map();
  for (const s of record.threshold_suggestions ?? []) {
    const count = s.cached_steps?.length ?? 0;
    if (count === cachedNow || !(s.threshold > 0)) continue;
    const distance = current > 0 ? Math.abs(Math.log(s.threshold / current)) : s.threshold;
    if (!byCount.has(count) || distance < byCount.get(count).distance) byCount.set(count, { ...s, count, distance });
  }
  const picked = [...byCount.values()].sort((a, b) => a.distance - b.distance).slice(0, 3)
    .sort((a, b) => a.threshold - b.threshold);
  return picked.map((s) => `${num(s.threshold)} → ${s.count} cached`);
}

// Wall-clock of this run against the pack's estimate of it uncached (from its own call timings).
function timeText(record) {
  if (!(record.duration_s > 0) || !(record.estimated_uncached_s > 0)) return null;
  const saved = record.estimated_uncached_s - record.duration_s;
  const speedup = record.estimated_speedup ?? record.estimated_uncached_s / record.duration_s;
  return `Time: ~${speedup.toFixed(1)}x, ${seconds(Math.abs(saved))} ${saved >= 0 ? "saved" : "lost"} (estimated)`;
}

// "none", "foca", "taylorseer (order 2)", "dmd (history 6, its fit on 1/2 cached steps)".
function calibratorText(record) {
  const { calibrator } = record;
  const parts = [];
  if (calibrator.taylorseer_order != null) parts.push(`order ${calibrator.taylorseer_order}`);
  if (calibrator.dmd_history != null) parts.push(`history ${calibrator.dmd_history}`);
  if (Array.isArray(calibrator.forecast_steps)) {
    const served = record.cached_steps.length + (record.partial_steps?.length ?? 0);
    parts.push(`its fit on ${calibrator.forecast_steps.length}/${served} cached steps`);
  }
  return parts.length ? `${calibrator.name} (${parts.join(", ")})` : calibrator.name;
}

function render(panel, record) {
  panel.replaceChildren();
  panel.dataset.promptId = record?.prompt_id ?? "";
  panel.dataset.nodeId = record?.node_id ?? "";
  if (!record) {
    panel.append(el("div", { opacity: "0.6" }, "Cache stats appear here after a run."));
    return EMPTY_HEIGHT;
  }
  const out = rows(panel);
  const steps = record.steps;
  const partial = record.partial_steps?.length ? ` (+${record.partial_steps.length} partial)` : "";
  const [word, skipped] = isForecast(record) ? ["Forecast steps", record.forecast_steps]
    : ["Cached steps", record.cached_steps];
  out.add(el("div", {}, `${word}: ${(skipped ?? []).length}/${steps}${partial}`), LINE);
  if (record.status && record.status !== "ok") {
    // interrupted, error, or skipped (left uncached on purpose; the warning below says why)
    const status = el("div", { color: "#e0a040" }, `Run ${record.status}`);
    status.dataset.role = "status";
    out.add(status, LINE);
  }
  out.add(el("div", {}, `Block evals saved: ${pct(record.blocks_saved)} ` +
    `(${record.block_evals}/${record.block_evals_uncached} run)`), LINE);
  const time = timeText(record);
  if (time) {
    const line = el("div", {}, time);
    line.dataset.role = "time";
    line.title = "this run's wall-clock against an estimate of the same run uncached";
    out.add(line, LINE);
  }
  out.add(el("div", {}, `CFG: ${record.cfg_mode ?? "n/a (no model call)"} · separate CFG: ${record.has_separate_cfg ? "on" : "off"}`), LINE);
  if (isForecast(record)) {
    const line = el("div", {}, `Forecast: ${forecastText(record.method)}`);
    line.dataset.role = "forecast";
    line.title = `computed steps: ${record.method.computed_steps.join(", ")}`;
    out.add(line, LINE);
  }
  if (record.calibrator) {
    const line = el("div", {}, `Calibrator: ${calibratorText(record)}`);
    line.dataset.role = "calibrator";
    line.title = "what a cached step served: the last computed residual (none) or a calibrator's forecast" +
      (record.calibrator.forecast_steps ? "; DMD's other cached steps got its first-order Taylor fallback" : "");
    out.add(line, LINE);
  }
  const devices = record.devices ?? [];
  if (devices.length > 1) {
    // Multi-GPU sampling: a cache per device, each step cached on all of them or on none.
    const line = el("div", {}, `Devices: ${devices.length} (${devices.map((d) => d.device).join(", ")})`);
    line.dataset.role = "devices";
    line.title = devices.map((d) => `${d.device}: ${d.calls} calls, CFG ${d.cfg_mode}, separate CFG ` +
      `${d.has_separate_cfg ? "on" : "off"}, ` +
      (isForecast(record) ? `forecast ${d.forecast_steps.length}` : `cached ${d.cached_steps.length}`)).join("\n");
    out.add(line, LINE);
  }

  const strip = el("div", { display: "flex", gap: "2px", margin: "4px 0 2px", height: "12px" });
  strip.dataset.role = "steps";
  record.step_states.forEach((state, i) => {
    const cell = el("div", { flex: "1", minWidth: "2px", borderRadius: "2px",
      background: STATE_COLORS[state] ?? STATE_COLORS.computed });
    cell.dataset.state = state;
    const reason = record.step_reasons?.[i];
    cell.title = `step ${i}: ${state}${reason ? ` (${reason})` : ""}`;
    strip.append(cell);
  });
  out.add(strip, 18);

  const legend = el("div", { fontSize: "10px", opacity: "0.8" });
  for (const state of [isForecast(record) ? "forecast" : "cached", "partial", "computed"]) {
    legend.append(el("span", { color: STATE_COLORS[state] }, "■"), el("span", { marginRight: "8px" }, ` ${state} `));
  }
  const chart = Array.isArray(record.residual_diffs) && record.residual_diffs.length > 0 && !isForecast(record);
  if (chart) legend.append(el("span", { color: CHART.threshold }, "━"), el("span", {}, " threshold"));
  out.add(legend, LINE);

  if (chart) {
    const caption = el("div", { fontSize: "10px", lineHeight: "12px", opacity: "0.8", marginTop: "2px" },
      "Residual diff per step vs threshold (log scale)");
    out.add(caption, 14);
    out.add(diffChart(record), CHART.height + 2);
    const suggestions = suggestionText(record);
    if (suggestions.length) {
      out.add(el("div", { fontSize: "10px", lineHeight: "12px", opacity: "0.8", marginTop: "2px" },
        "Try threshold → steps this run would have cached:"), 14);
      const line = el("div", { display: "grid", gridTemplateColumns: "repeat(3, 1fr)", gap: "4px",
        fontSize: "11px", whiteSpace: "nowrap" });
      line.dataset.role = "suggestions";
      for (const text of suggestions) line.append(el("span", { overflow: "hidden", textOverflow: "ellipsis" }, text));
      out.add(line, LINE);
    }
  }

  if (record.warnings?.length) {
    const more = record.warnings.length > 1 ? ` (+${record.warnings.length - 1} more)` : "";
    const warn = el("div", { color: "#e0a040", whiteSpace: "nowrap", overflow: "hidden",
      textOverflow: "ellipsis" }, `⚠ ${record.warnings[0]}${more}`);
    warn.title = record.warnings.join("\n");
    out.add(warn, LINE);
  }
  return out.height;
}

const panelHeights = new WeakMap();

function show(node, record) {
  const widget = node.widgets?.find((w) => w.name === WIDGET);
  if (!widget) return;
  panelHeights.set(widget.element, render(widget.element, record));
  growToFit(node);
  node.setDirtyCanvas?.(true, true);
}

// Taller content needs a taller node; never shrink one the user made larger.
function growToFit(node) {
  const needed = node.computeSize?.();
  if (!needed) return;
  const [width, height] = node.size;
  if (height < needed[1] || width < needed[0]) node.setSize([Math.max(width, needed[0]), Math.max(height, needed[1])]);
}

function attachPanel(node) {
  const panel = el("div", {
    // flex: keep our height where a renderer stretches widget elements (Nodes 2.0).
    boxSizing: "border-box", padding: "4px 6px", overflow: "hidden", flex: "0 0 auto",
    font: `12px/${LINE}px sans-serif`, color: "var(--input-text, #ddd)",
    background: "var(--comfy-input-bg, #222)", borderRadius: "6px",
  });
  panelHeights.set(panel, render(panel, null));
  const widget = node.addDOMWidget(WIDGET, "krea2_cache_stats", panel, {
    serialize: false, // display only: keeps it out of saved workflows and prompts
    // The renderer gives the element this height less the widget's margin on both sides.
    getMinHeight: () => (panelHeights.get(panel) ?? EMPTY_HEIGHT) + 2 * (widget.margin ?? 4),
  });
  widget.serialize = false;
}

// A record is this editor's when the prompt was queued by this client (the id the
// server gave this tab's websocket; a reload keeps it) from the workflow shown now
// (the editor's workflow id, sent with every prompt and kept across reloads).
const fromThisClient = (record) => !!record.client_id && record.client_id === api.clientId;
const workflowId = () => (app.rootGraph ?? app.graph)?.id ?? null;
const fromThisWorkflow = (record) => !!record.workflow_id && record.workflow_id === workflowId();

function onRecord(record) {
  if (!fromThisClient(record)) return;
  const node = cacheNodes().get(record.node_id);
  if (!node) return;
  const started = runTargets.get(record.prompt_id);
  // Seen starting: the very same node object, of the workflow it was queued from
  // (a record without a workflow id came from a prompt queued outside the editor).
  // Started before this page connected (reloaded mid-run): the restored workflow.
  const ours = started
    ? started.get(record.node_id) === node && (!record.workflow_id || fromThisWorkflow(record))
    : fromThisWorkflow(record);
  if (ours) show(node, record);
}

function applyPageLoadRecords() {
  // Needs the list, the restored graph and this tab's client id (sent with the socket's first status).
  if (pageLoad.done || !pageLoad.runs || graphsConfigured !== 1 || !api.clientId) return;
  pageLoad.done = true;
  const latest = new Map();
  for (const record of pageLoad.runs) {
    if (fromThisClient(record) && fromThisWorkflow(record)) latest.set(record.node_id, record);
  }
  for (const [id, node] of cacheNodes()) {
    const panel = node.widgets?.find((w) => w.name === WIDGET)?.element;
    // A live record that arrived meanwhile is newer than the list.
    if (latest.has(id) && !panel?.dataset.promptId) show(node, latest.get(id));
  }
}

app.registerExtension({
  name: "Krea2.CacheDiT.Stats",

  nodeCreated(node) {
    if (NODE_CLASSES.has(node.comfyClass)) attachPanel(node);
  },

  setup() {
    api.addEventListener("execution_start", ({ detail }) => {
      // Sent only to the client that queued the prompt.
      runTargets.set(detail.prompt_id, cacheNodes());
      if (runTargets.size > 32) runTargets.delete(runTargets.keys().next().value);
    });
    api.addEventListener(EVENT, ({ detail }) => onRecord(detail));
    api.addEventListener("status", applyPageLoadRecords);
    api.fetchApi("/krea2_cachedit/stats")
      .then((response) => (response.ok ? response.json() : { runs: [] }))
      .then(({ runs }) => {
        pageLoad.runs = runs ?? [];
        applyPageLoadRecords();
      })
      .catch((error) => console.warn("[Krea-2 Cache-DiT] could not load stats:", error));
  },

  beforeConfigureGraph() {
    // Any graph after the restored one is a different workflow: old stats don't apply.
    if (graphsConfigured >= 1) pageLoad.done = true;
  },

  afterConfigureGraph() {
    graphsConfigured += 1;
    applyPageLoadRecords();
  },
});
