// Shows the stats of the last sampling run on each of the pack's cache nodes (Krea2CacheDiT,
// CacheDiTDBCache, and CacheDiTSpectrum), each in its method's words: skipped steps "cached" or "forecast".
//
// Only the frontend's public extension API is used (registerExtension hooks,
// node.addDOMWidget, api events and fetchApi, the settings), and every style is
// inline on our own element, so a frontend update or another pack's CSS cannot
// break it and it restyles nothing else. A DOM widget (rather than canvas
// drawing; the chart is inline SVG inside it) renders in both the classic canvas
// and the DOM-based "Nodes 2.0" renderer, and its text is real DOM that tests and
// screen readers can read.
//
// The panel's words are the pack's locales/<lang>/main.json under "krea2_cachedit.panel" (en the source, zh its
// translation). ComfyUI serves them with every custom node's translations at GET /i18n, and the frontend merges
// them into its own messages, but it gives extensions no translate function: the panel reads them from GET /i18n
// once and picks the editor's language (the Comfy.Locale setting) at each render, else English, else the key.
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

// The panel's strings of each locale GET /i18n serves ({} until it answered, or when it failed).
const messages = {};
const NAMESPACE = ["krea2_cachedit", "panel"];
const at = (tree, path) => path.reduce((node, key) => node?.[key], tree);

function loadMessages() {
  return api.fetchApi("/i18n")
    .then((response) => (response.ok ? response.json() : {}))
    .then((locales) => {
      for (const [locale, tree] of Object.entries(locales ?? {})) {
        const panel = at(tree, NAMESPACE);
        if (panel) messages[locale] = panel;
      }
    })
    .catch((error) => console.warn("[Krea-2 Cache-DiT] could not load the panel's strings:", error));
}

const editorLocale = () => app.extensionManager?.setting?.get("Comfy.Locale") ?? "en";

// The string of a key ("reasons.warmup") in the editor's language, else in English; undefined if neither has it.
function message(key) {
  for (const locale of [editorLocale(), "en"]) {
    const text = at(messages[locale], key.split("."));
    if (typeof text === "string") return text;
  }
  return undefined;
}

// The string of a key with its {name}s filled in from params; the key itself when no locale has it.
const t = (key, params = {}) => (message(key) ?? key)
  .replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));

// How to read a run, as its method says (record.method): its word for a step whose blocks it skipped ("cached",
// "forecast"), which names the step state, the record's `${word}_steps` fields and the strings that count them; and
// whether it measures a residual change per step (the chart). A run left uncached names no method: "cached", and
// its chart says nothing was measured.
const skippedState = (record) => record.method?.skipped_state ?? "cached";
const measuresResiduals = (record) => record.method?.measures_residuals ?? true;
// The key of a string said in a method's word: `keys` has one per word the panel has strings for.
const byWord = (word, keys) => keys[word] ?? keys.cached;

// "Forecast: spectrum (m 4, lambda 0.1, w 1) · preset turbo_5_of_8" (m, lambda, w: the inputs' symbols); a share
// of the extrapolation and a target other than the defaults by their inputs' names, as the log line says them:
// "linear (extrapolation 0.7, target output)"; auto's plan as "linear (target output, share per gap 0/1/1/1) ·
// preset auto, speedup 2".
function forecastText(method) {
  const parts = method.forecast === "spectrum"
    ? [`m ${method.chebyshev_degree}`, `lambda ${method.ridge_lambda}`, `w ${method.blend_w}`] : [];
  if ((method.extrapolation ?? 1) !== 1) parts.push(`extrapolation ${method.extrapolation}`);
  if ((method.target ?? "feature") !== "feature") parts.push(`target ${method.target}`);
  if (method.gap_shares) parts.push(`share per gap ${method.gap_shares.join("/")}`);   // auto's plan, gap by gap
  const preset = method.speedup === undefined ? method.preset : `${method.preset}, speedup ${method.speedup}`;
  return t("forecast", { forecaster: `${method.forecast}${parts.length ? ` (${parts.join(", ")})` : ""}`, preset });
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

// A step's state ("cached") in the editor's language; the record's word where no locale has it.
const stateName = (state) => message(`states.${state}`) ?? state;

function stepTooltip(record, step) {
  const diff = record.residual_diffs[step];
  const state = record.step_states[step] ?? "computed";
  const reason = record.step_reasons?.[step];
  const why = reason && message(`reasons.${reason}`);
  return [t("step", { step }), diff == null ? t("diff_not_measured") : t("diff", { diff: num(diff) }), stateName(state),
    reason ? t("reason", { reason: `${reason}${why ? ` (${why})` : ""}` }) : null]
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
    box.append(el("div", { opacity: "0.6", fontSize: "10px" }, t("chart_empty")));
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
    line.firstChild.textContent = t("threshold_line", { threshold: num(threshold) });
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
  return picked.map((s) => t("suggestion", { threshold: num(s.threshold), count: s.count,
    equal: s.equal_cost_steps ?? "?" }));
}

// Wall-clock of this run against the pack's estimate of it uncached (from its own call timings).
function timeText(record) {
  if (!(record.duration_s > 0) || !(record.estimated_uncached_s > 0)) return null;
  const saved = record.estimated_uncached_s - record.duration_s;
  const speedup = record.estimated_speedup ?? record.estimated_uncached_s / record.duration_s;
  return t(saved >= 0 ? "time_saved" : "time_lost", { speedup: speedup.toFixed(1), seconds: seconds(Math.abs(saved)) });
}

// "5 of 8 calls computed: as many as 5 steps": the calls that ran every block, and the step count whose uncached run
// costs as much (the record's equal_cost_steps, null for a run that ended early). null for a run left uncached, whose
// calls were not the pack's to count.
function callsText(record) {
  const steps = record.equal_cost_steps;
  if (record.full_calls == null) return null;
  const counts = { full: record.full_calls, calls: record.calls };
  return steps == null ? t("calls_computed", counts) : t("calls_equal_cost", { ...counts, steps });
}

// "none", "foca", "taylorseer (order 2)", "dmd (history 6, its fit on 1/2 cached steps)".
function calibratorText(record) {
  const { calibrator } = record;
  const parts = [];
  if (calibrator.taylorseer_order != null) parts.push(t("calibrator_order", { order: calibrator.taylorseer_order }));
  if (calibrator.dmd_history != null) parts.push(t("calibrator_history", { history: calibrator.dmd_history }));
  if (Array.isArray(calibrator.forecast_steps)) {
    const served = record.cached_steps.length + (record.partial_steps?.length ?? 0);
    parts.push(t("calibrator_fit", { fit: calibrator.forecast_steps.length, served }));
  }
  return parts.length ? `${calibrator.name} (${parts.join(", ")})` : calibrator.name;
}

// The record each panel shows (null: none yet), to draw it again in another language.
const shownRecords = new WeakMap();

function render(panel, record) {
  shownRecords.set(panel, record);
  panel.replaceChildren();
  panel.dataset.promptId = record?.prompt_id ?? "";
  panel.dataset.nodeId = record?.node_id ?? "";
  if (!record) {
    panel.append(el("div", { opacity: "0.6" }, t("empty")));
    return EMPTY_HEIGHT;
  }
  const out = rows(panel);
  const steps = record.steps;
  const partial = record.partial_steps?.length ? t("partial", { count: record.partial_steps.length }) : "";
  const word = skippedState(record);
  const skipped = record[`${word}_steps`] ?? [];
  out.add(el("div", {}, t(byWord(word, { cached: "cached_steps", forecast: "forecast_steps" }),
    { count: skipped.length, steps, partial })), LINE);
  if (record.status && record.status !== "ok") {
    // interrupted, error, or skipped (left uncached on purpose; the warning below says why)
    const status = el("div", { color: "#e0a040" }, t("run_status", { status: message(`status.${record.status}`) ?? record.status }));
    status.dataset.role = "status";
    out.add(status, LINE);
  }
  out.add(el("div", {}, t("block_evals", { share: pct(record.blocks_saved), run: record.block_evals,
    uncached: record.block_evals_uncached })), LINE);
  const calls = callsText(record);
  if (calls) {
    const line = el("div", {}, calls);
    line.dataset.role = "calls";
    if (record.equal_cost_steps != null) line.title = t("calls_title", { steps: record.equal_cost_steps });
    out.add(line, LINE);
  }
  const time = timeText(record);
  if (time) {
    const line = el("div", {}, time);
    line.dataset.role = "time";
    line.title = t("time_title");
    out.add(line, LINE);
  }
  out.add(el("div", {}, t("cfg", { mode: record.cfg_mode ?? t("cfg_no_call"),
    separate: t(record.has_separate_cfg ? "on" : "off") })), LINE);
  if (record.method?.forecast) {  // a method that forecasts names its forecaster
    const line = el("div", {}, forecastText(record.method));
    line.dataset.role = "forecast";
    line.title = t("forecast_title", { steps: record.method.computed_steps.join(", ") });
    out.add(line, LINE);
  }
  if (record.calibrator) {
    const line = el("div", {}, t("calibrator", { calibrator: calibratorText(record) }));
    line.dataset.role = "calibrator";
    line.title = t("calibrator_title") + (record.calibrator.forecast_steps ? t("calibrator_title_dmd") : "");
    out.add(line, LINE);
  }
  const devices = record.devices ?? [];
  if (devices.length > 1) {
    // Multi-GPU sampling: a cache per device, each step cached on all of them or on none.
    const line = el("div", {}, t("devices", { count: devices.length, devices: devices.map((d) => d.device).join(", ") }));
    line.dataset.role = "devices";
    line.title = devices.map((d) => t(byWord(word, { cached: "device_cached", forecast: "device_forecast" }), {
      device: d.device, calls: d.calls, mode: d.cfg_mode, separate: t(d.has_separate_cfg ? "on" : "off"),
      count: (d[`${word}_steps`] ?? []).length })).join("\n");
    out.add(line, LINE);
  }

  const strip = el("div", { display: "flex", gap: "2px", margin: "4px 0 2px", height: "12px" });
  strip.dataset.role = "steps";
  record.step_states.forEach((state, i) => {
    const cell = el("div", { flex: "1", minWidth: "2px", borderRadius: "2px",
      background: STATE_COLORS[state] ?? STATE_COLORS.computed });
    cell.dataset.state = state;
    const reason = record.step_reasons?.[i];
    cell.title = t("step_cell", { step: i, state: stateName(state) }) + (reason ? ` (${reason})` : "");
    strip.append(cell);
  });
  out.add(strip, 18);

  const legend = el("div", { fontSize: "10px", opacity: "0.8" });
  for (const state of [word, "partial", "computed"]) {
    legend.append(el("span", { color: STATE_COLORS[state] }, "■"), el("span", { marginRight: "8px" }, ` ${stateName(state)} `));
  }
  const chart = Array.isArray(record.residual_diffs) && record.residual_diffs.length > 0 && measuresResiduals(record);
  if (chart) legend.append(el("span", { color: CHART.threshold }, "━"), el("span", {}, ` ${t("legend_threshold")}`));
  out.add(legend, LINE);

  if (chart) {
    const caption = el("div", { fontSize: "10px", lineHeight: "12px", opacity: "0.8", marginTop: "2px" },
      t("chart_caption"));
    out.add(caption, 14);
    out.add(diffChart(record), CHART.height + 2);
    const suggestions = suggestionText(record);
    if (suggestions.length) {
      out.add(el("div", { fontSize: "10px", lineHeight: "12px", opacity: "0.8", marginTop: "2px" },
        t("suggestions_caption")), 14);
      const line = el("div", { display: "grid", gridTemplateColumns: "repeat(3, 1fr)", gap: "4px",
        fontSize: "11px", whiteSpace: "nowrap" });
      line.dataset.role = "suggestions";
      for (const text of suggestions) line.append(el("span", { overflow: "hidden", textOverflow: "ellipsis" }, text));
      out.add(line, LINE);
    }
  }

  if (record.warnings?.length) {
    const more = record.warnings.length > 1 ? t("warnings_more", { count: record.warnings.length - 1 }) : "";
    const warn = el("div", { color: "#e0a040", whiteSpace: "nowrap", overflow: "hidden",
      textOverflow: "ellipsis" }, `⚠ ${record.warnings[0]}${more}`);
    warn.title = record.warnings.join("\n");
    out.add(warn, LINE);
  }
  return out.height;
}

const panelHeights = new WeakMap();

// Every panel again, with the record it shows: once the strings are in, and when the editor's language changes.
function renderAll() {
  for (const node of cacheNodes().values()) {
    const panel = node.widgets?.find((w) => w.name === WIDGET)?.element;
    if (panel) show(node, shownRecords.get(panel) ?? null);
  }
}

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
    // The change event comes just before the setting takes its new value.
    app.ui?.settings?.addEventListener?.("Comfy.Locale.change", () => queueMicrotask(renderAll));
    const strings = loadMessages().then(renderAll);
    // The restored workflow's stats are drawn once the strings are in (or failed to come).
    Promise.all([api.fetchApi("/krea2_cachedit/stats"), strings])
      .then(([response]) => (response.ok ? response.json() : { runs: [] }))
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
