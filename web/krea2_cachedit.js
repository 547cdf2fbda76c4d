// Shows the cache stats of the last sampling run on each Krea2CacheDiT node.
//
// Only the frontend's public extension API is used (registerExtension hooks,
// node.addDOMWidget, api events and fetchApi; beforeRegisterNodeDef to read
// workflows saved before the node lost its `preset` input), and every style is inline on our
// own element, so a frontend update or another pack's CSS cannot break it and
// it restyles nothing else. A DOM widget (rather than canvas drawing) renders in
// both the classic canvas and the DOM-based "Nodes 2.0" renderer, and its text
// is real DOM that tests and screen readers can read.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const NODE_CLASS = "Krea2CacheDiT";
const EVENT = "krea2_cachedit.stats";
const WIDGET = "krea2_cache_stats";
const STATE_COLORS = { cached: "#3f9f5f", partial: "#d0a030", computed: "#6b7280" };
// The node's first input until it was removed; workflows saved before still carry its value.
const OLD_PRESETS = ["auto", "turbo", "raw", "custom"];

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
      if (node.comfyClass === NODE_CLASS) nodes.set(id, node);
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

function render(panel, record) {
  panel.replaceChildren();
  panel.dataset.promptId = record?.prompt_id ?? "";
  panel.dataset.nodeId = record?.node_id ?? "";
  if (!record) {
    panel.append(el("div", { opacity: "0.6" }, "Cache stats appear here after a run."));
    return;
  }
  const steps = record.steps;
  const partial = record.partial_steps?.length ? ` (+${record.partial_steps.length} partial)` : "";
  panel.append(
    el("div", {}, `Cached steps: ${record.cached_steps.length}/${steps}${partial}`),
    el("div", {}, `Block evals saved: ${pct(record.blocks_saved)} ` +
      `(${record.block_evals}/${record.block_evals_uncached} run)`),
    el("div", {}, `CFG: ${record.cfg_mode} · separate CFG: ${record.has_separate_cfg ? "on" : "off"}`),
  );

  const strip = el("div", { display: "flex", gap: "2px", margin: "4px 0 2px", height: "12px" });
  strip.dataset.role = "steps";
  record.step_states.forEach((state, i) => {
    const cell = el("div", { flex: "1", minWidth: "2px", borderRadius: "2px",
      background: STATE_COLORS[state] ?? STATE_COLORS.computed });
    cell.dataset.state = state;
    cell.title = `step ${i}: ${state}`;
    strip.append(cell);
  });
  panel.append(strip);

  const legend = el("div", { fontSize: "10px", opacity: "0.8" });
  for (const state of ["cached", "partial", "computed"]) {
    legend.append(el("span", { color: STATE_COLORS[state] }, "■"), el("span", { marginRight: "8px" }, ` ${state} `));
  }
  panel.append(legend);

  if (record.warnings?.length) {
    const more = record.warnings.length > 1 ? ` (+${record.warnings.length - 1} more)` : "";
    const warn = el("div", { color: "#e0a040", whiteSpace: "nowrap", overflow: "hidden",
      textOverflow: "ellipsis" }, `⚠ ${record.warnings[0]}${more}`);
    warn.title = record.warnings.join("\n");
    panel.append(warn);
  }
}

function show(node, record) {
  const widget = node.widgets?.find((w) => w.name === WIDGET);
  if (!widget) return;
  render(widget.element, record);
  node.setDirtyCanvas?.(true, true);
}

function attachPanel(node) {
  const panel = el("div", {
    // flex: keep our height where a renderer stretches widget elements (Nodes 2.0).
    boxSizing: "border-box", padding: "4px 6px", overflow: "hidden", flex: "0 0 auto",
    font: "12px/16px sans-serif", color: "var(--input-text, #ddd)",
    background: "var(--comfy-input-bg, #222)", borderRadius: "6px",
  });
  render(panel, null);
  const widget = node.addDOMWidget(WIDGET, "krea2_cache_stats", panel, {
    serialize: false, // display only: keeps it out of saved workflows and prompts
    getMinHeight: () => 104,
  });
  widget.serialize = false;
}

// Workflows saved while the node had a `preset` input store its value first in
// widgets_values, and the editor assigns those by position: "auto" would land in
// steps_mask and every later value one widget off. Such a node gets its saved
// values without the preset. What the preset did at run time is not carried over:
// the node runs exactly the values it shows.
function withoutOldPreset(node, info) {
  const values = info?.widgets_values;
  const saved = (node.widgets ?? []).filter((w) => w.serialize !== false).length;
  if (!Array.isArray(values) || values.length !== saved + 1 || !OLD_PRESETS.includes(values[0])) return info;
  const preset = values[0];
  const replaced = preset === "custom" ? "" : " (it used to replace the values left at their defaults at run time)";
  console.info(`[Krea-2 Cache-DiT] node ${info.id}: dropped the old preset "${preset}"${replaced}; ` +
    "the node now runs exactly the values it shows.");
  const migrated = { ...info, widgets_values: values.slice(1) };
  if (info.widgets_values_named && "preset" in info.widgets_values_named) {
    const { preset: _dropped, ...named } = info.widgets_values_named;
    migrated.widgets_values_named = named;
  }
  return migrated;
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

  beforeRegisterNodeDef(nodeType, nodeData) {
    if (nodeData?.name !== NODE_CLASS) return;
    const configure = nodeType.prototype.configure;
    nodeType.prototype.configure = function (info) {
      return configure.call(this, withoutOldPreset(this, info));
    };
  },

  nodeCreated(node) {
    if (node.comfyClass === NODE_CLASS) attachPanel(node);
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
