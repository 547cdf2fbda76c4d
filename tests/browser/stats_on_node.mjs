// Drives the real graph editor in headless Chromium: two tabs (two clients) on one
// server show the same workflow; tab A queues it; report what the Krea2CacheDiT node
// shows in each tab, live and after a reload (see tests/editor/test_browser.py for the checks).
//
// usage: node stats_on_node.mjs <comfyui url> <workflow.json> <out dir>
// writes <out dir>/result.json, browser_stats.png (the editor after the run), and close-ups of
// the node: browser_stats_node.png (classic canvas) and browser_stats_nodes2.png (Nodes 2.0)
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { launchHeadless } from "./headless_editor.mjs";

const [url, workflowPath, outDir] = process.argv.slice(2);
const workflow = JSON.parse(readFileSync(workflowPath, "utf8"));
const RUN_TIMEOUT_MS = Number(process.env.KREA2_BROWSER_RUN_TIMEOUT_MS || 240_000);
const EVENT = "krea2_cachedit.stats";

const { context, close } = await launchHeadless();
const result = { console_errors: [], failed_requests: [], queued_prompt_ids: {} };

// One editor tab: its page and what it can read off the node.
function editor(page, name) {
  // Errors from this pack's extension, or its event arriving unregistered.
  page.on("pageerror", (error) => {
    if (/krea2/i.test(error.stack ?? String(error))) result.console_errors.push(`${name}: ${error.stack}`);
  });
  page.on("console", (msg) => {
    const text = msg.text();
    if (/krea2|Unknown message type/i.test(text)) result.console_errors.push(`${name}: ${text}`);
  });
  page.on("response", async (response) => {
    // The ids the server gave this tab's queued prompts: the test reads their stats by id.
    if (response.ok() && response.request().method() === "POST" && response.url().endsWith("/api/prompt")) {
      const { prompt_id: promptId } = await response.json().catch(() => ({}));
      (result.queued_prompt_ids[name] ??= []).push(promptId ?? null);
    }
    if (response.status() < 400) return;
    // A rejected prompt says why in its body; other misses are just listed.
    const why = response.url().endsWith("/api/prompt") ? ` ${await response.text().catch(() => "")}` : "";
    result.failed_requests.push(`${name}: ${response.status()} ${response.url()}${why}`);
  });

  // The editor is ready once the graph it opens with (default or restored) is configured
  // and its websocket has its client id. scripts/app.js re-exports window.comfyAPI, so it
  // can only be imported once that exists; the predicates below then use the imported app
  // (waitForFunction needs sync predicates).
  const open = async () => {
    await page.goto(url);
    await page.waitForFunction(() => !!window.comfyAPI?.app?.app, null, { timeout: 120_000 });
    await page.evaluate(async (event) => {
      const { app } = await import("/scripts/app.js");
      const { api } = await import("/scripts/api.js");
      window.krea2TestApp = app;
      window.krea2TestApi = api;
      window.krea2TestPanel = (id) => app.graph.getNodeById(Number(id))
        ?.widgets?.find((w) => w.name === "krea2_cache_stats")?.element;
      // How prompts ended, so a run that never reaches the panel fails fast.
      window.krea2TestEnded = [];
      for (const type of ["execution_success", "execution_error", "execution_interrupted"]) {
        api.addEventListener(type, ({ detail }) => window.krea2TestEnded.push(`${type} ${detail?.prompt_id}`));
      }
      window.krea2TestStatsEvents = 0;
      api.addEventListener(event, () => { window.krea2TestStatsEvents += 1; });
      api.addEventListener("status", ({ detail }) => { window.krea2TestQueued = detail?.exec_info?.queue_remaining; });
    }, EVENT);
    await page.waitForFunction(() => window.krea2TestApp.canvas && window.krea2TestApp.graph.nodes.length > 0
      && !!window.krea2TestApi.clientId, null, { timeout: 120_000, polling: 250 });
  };
  // What the node shows, read from the DOM the user sees; null when the node has no panel.
  const read = (nodeId) => page.evaluate((id) => {
    const panel = window.krea2TestPanel(id);
    if (!panel) return null;
    const box = panel.getBoundingClientRect();
    return {
      text: panel.innerText,
      prompt_id: panel.dataset.promptId,
      node_id: panel.dataset.nodeId ?? null,
      cells: [...panel.querySelectorAll('[data-role="steps"] > [data-state]')].map((c) => c.dataset.state),
      visible: panel.isConnected && box.width > 0 && box.height > 0
        && getComputedStyle(panel).visibility !== "hidden",
      // Content taller than the panel would be cut off.
      fits: panel.scrollHeight <= panel.clientHeight + 1,
      chart: !!panel.querySelector('[data-role="chart"]'),
      marks: [...panel.querySelectorAll('[data-role="chart"] [data-role="step"]')].map((mark) => ({
        step: Number(mark.dataset.step),
        state: mark.dataset.state,
        diff: mark.dataset.diff === "" ? null : Number(mark.dataset.diff),
        tooltip: mark.querySelector("title")?.textContent ?? "",
        bar_top: mark.querySelector("rect:not([fill=transparent])")?.getAttribute("y") ?? null,
      })),
      threshold_line: (() => {
        const line = panel.querySelector('[data-role="chart"] [data-role="threshold"]');
        return line && { y: line.getAttribute("y1"), tooltip: line.querySelector("title")?.textContent ?? "" };
      })(),
      suggestions: [...panel.querySelectorAll('[data-role="suggestions"] > span')].map((s) => s.textContent),
      time: panel.querySelector('[data-role="time"]')?.textContent ?? null,
      calls: (() => {
        const line = panel.querySelector('[data-role="calls"]');
        return line && { text: line.textContent, tooltip: line.title };
      })(),
      calibrator: panel.querySelector('[data-role="calibrator"]')?.textContent ?? null,
      forecast: panel.querySelector('[data-role="forecast"]')?.textContent ?? null,
      client_id: window.krea2TestApi.clientId,
      workflow_id: window.krea2TestApp.rootGraph.id,
      stats_events: window.krea2TestStatsEvents,
    };
  }, nodeId);
  // The node on screen (title bar included), for a close-up screenshot.
  const shoot = async (nodeId, path) => {
    const box = await page.evaluate((id) => {
      const app = window.krea2TestApp;
      const vueNode = document.querySelector(`.lg-node[data-node-id="${id}"]`);  // Nodes 2.0 renders nodes as DOM
      if (vueNode) return vueNode.getBoundingClientRect().toJSON();
      const node = app.graph.getNodeById(Number(id));
      const title = window.comfyAPI?.litegraph?.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
      const canvas = app.canvas.canvas.getBoundingClientRect();
      const { scale, offset } = app.canvas.ds;
      return { x: canvas.x + (node.pos[0] + offset[0]) * scale, y: canvas.y + (node.pos[1] - title + offset[1]) * scale,
        width: node.size[0] * scale, height: (node.size[1] + title) * scale };
    }, nodeId);
    const pad = 12;
    await page.screenshot({ path, clip: { x: Math.max(0, box.x - pad), y: Math.max(0, box.y - pad),
      width: box.width + 2 * pad, height: box.height + 2 * pad } });
  };
  const setting = (id, value) => page.evaluate(([i, v]) => window.krea2TestApi.storeSetting(i, v), [id, value]);
  const load = (graph) => page.evaluate((g) => window.krea2TestApp.loadGraphData(g), graph);
  const serialize = () => page.evaluate(() => window.krea2TestApp.rootGraph.serialize());
  return { page, open, read, load, serialize, shoot, setting };
}

try {
  const a = editor(context.pages()[0] ?? (await context.newPage()), "A");
  const b = editor(await context.newPage(), "B");
  // Any of the pack's cache nodes (Krea2CacheDiT, CacheDiTDBCache, CacheDiTSpectrum): the panel is the same.
  const cacheNodeId = String(workflow.nodes.find((n) => ["Krea2CacheDiT", "CacheDiTDBCache", "CacheDiTSpectrum"]
    .includes(n.type)).id);
  result.cache_node_id = cacheNodeId;

  // Until A's node shows a run, or a prompt ends without it showing up.
  const waitForRun = async () => {
    await a.page.waitForFunction(
      (id) => !!window.krea2TestPanel(id)?.dataset.promptId || window.krea2TestEnded.length > 0,
      cacheNodeId, { timeout: RUN_TIMEOUT_MS, polling: 250 });
    // The node grows to fit the new content on the next canvas frames: give it a moment
    // (a panel that never fits is still read, and the test says so).
    await a.page.waitForFunction((id) => {
      const panel = window.krea2TestPanel(id);
      return !!panel && panel.scrollHeight <= panel.clientHeight + 1;
    }, cacheNodeId, { timeout: 5_000, polling: 100 }).catch(() => {});
    const shown = await a.read(cacheNodeId);
    if (!shown?.prompt_id) {
      const ended = await a.page.evaluate(() => window.krea2TestEnded);
      throw new Error(`prompt ended (${ended}) but the node shows no stats: ${JSON.stringify(shown)}`);
    }
    // Screenshot an idle editor, not one still finishing the rest of the graph.
    await a.page.waitForFunction(() => window.krea2TestEnded.length > 0 && window.krea2TestQueued === 0,
      null, { timeout: RUN_TIMEOUT_MS, polling: 100 });
    return shown;
  };

  await a.open();
  result.frontend_version = await a.page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  await a.load(workflow);
  result.before_run = await a.read(cacheNodeId);
  // B shows the very same workflow (same workflow id, same node ids): only the client differs.
  await b.open();
  await b.load(await a.serialize());
  result.b_before_run = await b.read(cacheNodeId);

  // Queue from A through the public app API, like the Queue button does; the panel must
  // then fill from the pack's websocket event alone (no reload).
  const started = Date.now();
  result.queued = await a.page.evaluate(() => window.krea2TestApp.queuePrompt(0));
  result.live = await waitForRun();
  result.run_seconds = (Date.now() - started) / 1000;
  await a.page.evaluate(() => window.krea2TestApp.canvas.setDirty(true, true));
  await a.page.waitForTimeout(500);
  result.screenshot = join(outDir, "browser_stats.png");
  await a.page.screenshot({ path: result.screenshot });
  await a.shoot(cacheNodeId, join(outDir, "browser_stats_node.png"));
  result.b_live = await b.read(cacheNodeId);
  // Even if A's record reached B's editor, B must not show it.
  const record = await a.page.evaluate(async () => {
    const { runs } = await (await window.krea2TestApi.fetchApi("/krea2_cachedit/stats")).json();
    return runs.at(-1);
  });
  await b.page.evaluate(([event, r]) => window.krea2TestApi.dispatchCustomEvent(event, r), [EVENT, record]);
  result.b_after_foreign_event = await b.read(cacheNodeId);

  // Page load: A's restored workflow gets the same record from GET /krea2_cachedit/stats;
  // B's restored workflow (the same one) does not: A queued it.
  await a.open();
  await a.page.waitForFunction(([id, prompt]) => window.krea2TestPanel(id)?.dataset.promptId === prompt,
    [cacheNodeId, result.live.prompt_id], { timeout: 15_000, polling: 250 }).catch(() => {});
  result.after_reload = await a.read(cacheNodeId);
  await b.open();
  await b.page.waitForTimeout(1500); // the stats list and the client id are in: nothing should follow
  result.b_after_reload = await b.read(cacheNodeId);

  // The same panel in the DOM-based "Nodes 2.0" renderer (restored workflow, record from the route).
  await a.setting("Comfy.VueNodes.Enabled", true);
  try {
    await a.open();
    await a.page.waitForFunction(([id, prompt]) => window.krea2TestPanel(id)?.dataset.promptId === prompt,
      [cacheNodeId, result.live.prompt_id], { timeout: 15_000, polling: 250 }).catch(() => {});
    await a.page.waitForTimeout(500);
    result.nodes2 = await a.read(cacheNodeId);
    result.nodes2.vue_node = await a.page.evaluate((id) => !!document.querySelector(`.lg-node[data-node-id="${id}"]`),
      cacheNodeId);
    await a.shoot(cacheNodeId, join(outDir, "browser_stats_nodes2.png"));
  } finally {
    await a.setting("Comfy.VueNodes.Enabled", false);
  }

  // Loading a workflow (even the same one) is a graph change: the stats clear; and
  // reloading that new workflow does not bring back the old workflow's record.
  await a.load(workflow);
  result.after_new_graph = await a.read(cacheNodeId);
  await a.page.waitForTimeout(1500); // the frontend saves the open workflow for the reload
  await a.open();
  await a.page.waitForTimeout(1500);
  result.after_new_graph_reload = await a.read(cacheNodeId);

} catch (error) {
  result.error = String(error?.stack || error);
} finally {
  writeFileSync(join(outDir, "result.json"), JSON.stringify(result, null, 2));
  await close();
}
process.exit(result.error ? 1 : 0);
