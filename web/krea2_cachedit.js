// Shows the cache stats of the last sampling run on each Krea2CacheDiT node.
//
// Only the frontend's public extension API is used (registerExtension hooks,
// node.addDOMWidget, api events and fetchApi), and every style is inline on our
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

// Which Krea2CacheDiT node objects existed when each prompt started, so a run's
// record lands only on the node it was computed for and never on a same-id node
// of a workflow loaded (or cleared and rebuilt) meanwhile.
const runTargets = new Map();
// The last record per node id from GET /krea2_cachedit/stats: shown on the first
// graph the editor opens (the restored workflow), dropped on any later graph.
let pageLoadRecords = new Map();
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

function onRecord(record) {
  const started = runTargets.get(record.prompt_id);
  const node = cacheNodes().get(record.node_id);
  // A prompt seen starting must still target the very same node object; one that
  // started before this page connected can only be matched by id.
  if (node && (!started || started.get(record.node_id) === node)) show(node, record);
}

app.registerExtension({
  name: "Krea2.CacheDiT.Stats",

  nodeCreated(node) {
    if (node.comfyClass === NODE_CLASS) attachPanel(node);
  },

  setup() {
    api.addEventListener("execution_start", ({ detail }) => {
      runTargets.set(detail.prompt_id, cacheNodes());
      if (runTargets.size > 32) runTargets.delete(runTargets.keys().next().value);
    });
    api.addEventListener(EVENT, ({ detail }) => onRecord(detail));
    api.fetchApi("/krea2_cachedit/stats")
      .then((response) => (response.ok ? response.json() : { runs: [] }))
      .then(({ runs }) => {
        for (const record of runs ?? []) pageLoadRecords?.set(record.node_id, record);
        if (graphsConfigured === 1) applyPageLoadRecords();
      })
      .catch((error) => console.warn("[Krea-2 Cache-DiT] could not load stats:", error));
  },

  beforeConfigureGraph() {
    // Any graph after the restored one is a different workflow: old stats don't apply.
    if (graphsConfigured >= 1) pageLoadRecords = null;
  },

  afterConfigureGraph() {
    graphsConfigured += 1;
    if (graphsConfigured === 1) applyPageLoadRecords();
  },
});

function applyPageLoadRecords() {
  if (!pageLoadRecords) return;
  for (const [id, node] of cacheNodes()) {
    if (pageLoadRecords.has(id)) show(node, pageLoadRecords.get(id));
  }
}
