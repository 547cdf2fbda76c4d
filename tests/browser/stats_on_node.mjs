// Drives the real graph editor in headless Chromium: load a workflow, queue it, and
// report what the Krea2CacheDiT node shows (see tests/test_browser.py for the checks).
//
// usage: node stats_on_node.mjs <comfyui url> <workflow.json> <out dir>
// writes <out dir>/result.json and <out dir>/browser_stats.png
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [url, workflowPath, outDir] = process.argv.slice(2);
const workflow = JSON.parse(readFileSync(workflowPath, "utf8"));
const chromiumPath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const RUN_TIMEOUT_MS = Number(process.env.KREA2_BROWSER_RUN_TIMEOUT_MS || 240_000);

const profile = mkdtempSync(join(tmpdir(), "krea2-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: chromiumPath,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const result = { console_errors: [], failed_requests: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  // Errors from this pack's extension, or its event arriving unregistered.
  page.on("pageerror", (error) => {
    if (/krea2/i.test(error.stack ?? String(error))) result.console_errors.push(error.stack);
  });
  page.on("console", (msg) => {
    if (/krea2|Unknown message type/i.test(msg.text())) result.console_errors.push(msg.text());
  });
  page.on("response", async (response) => {
    if (response.status() < 400) return;
    // A rejected prompt says why in its body; other misses are just listed.
    const why = response.url().endsWith("/api/prompt") ? ` ${await response.text().catch(() => "")}` : "";
    result.failed_requests.push(`${response.status()} ${response.url()}${why}`);
  });

  // The editor is ready once the graph it opens with (default or restored) is configured.
  // scripts/app.js re-exports window.comfyAPI, so it can only be imported once that exists;
  // the predicates below then use the imported app (waitForFunction needs sync predicates).
  const openEditor = async () => {
    await page.goto(url);
    await page.waitForFunction(() => !!window.comfyAPI?.app?.app, null, { timeout: 120_000 });
    await page.evaluate(async () => {
      const { app } = await import("/scripts/app.js");
      const { api } = await import("/scripts/api.js");
      window.krea2TestApp = app;
      window.krea2TestPanel = (id) => app.graph.getNodeById(Number(id))
        ?.widgets?.find((w) => w.name === "krea2_cache_stats")?.element;
      // How prompts ended, so a run that never reaches the panel fails fast.
      window.krea2TestEnded = [];
      for (const type of ["execution_success", "execution_error", "execution_interrupted"]) {
        api.addEventListener(type, ({ detail }) => window.krea2TestEnded.push(`${type} ${detail?.prompt_id}`));
      }
      api.addEventListener("status", ({ detail }) => { window.krea2TestQueued = detail?.exec_info?.queue_remaining; });
    });
    await page.waitForFunction(() => window.krea2TestApp.canvas && window.krea2TestApp.graph.nodes.length > 0,
      null, { timeout: 120_000, polling: 250 });
  };
  // What the node shows, read from the DOM the user sees; null when the node has no panel.
  const readPanel = (nodeId) => page.evaluate((id) => {
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
    };
  }, nodeId);
  // Until the node shows a run, or a prompt ends without it showing up.
  const waitForRun = async (nodeId) => {
    await page.waitForFunction(
      (id) => !!window.krea2TestPanel(id)?.dataset.promptId || window.krea2TestEnded.length > 0,
      nodeId, { timeout: RUN_TIMEOUT_MS, polling: 250 });
    const shown = await readPanel(nodeId);
    if (!shown?.prompt_id) {
      const ended = await page.evaluate(() => window.krea2TestEnded);
      throw new Error(`prompt ended (${ended}) but the node shows no stats: ${JSON.stringify(shown)}`);
    }
    // Screenshot an idle editor, not one still finishing the rest of the graph.
    await page.waitForFunction(() => window.krea2TestEnded.length > 0 && window.krea2TestQueued === 0,
      null, { timeout: RUN_TIMEOUT_MS, polling: 100 });
    return shown;
  };
  const loadWorkflow = () => page.evaluate((graph) => window.krea2TestApp.loadGraphData(graph), workflow);

  const cacheNodeId = String(workflow.nodes.find((n) => n.type === "Krea2CacheDiT").id);
  result.cache_node_id = cacheNodeId;

  await openEditor();
  result.frontend_version = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  await loadWorkflow();
  result.before_run = await readPanel(cacheNodeId);

  // Queue through the public app API, like the Queue button does; the panel must then
  // fill from the pack's websocket event alone (no reload).
  const started = Date.now();
  result.queued = await page.evaluate(() => window.krea2TestApp.queuePrompt(0));
  result.live = await waitForRun(cacheNodeId);
  result.run_seconds = (Date.now() - started) / 1000;
  await page.evaluate(() => window.krea2TestApp.canvas.setDirty(true, true));
  await page.waitForTimeout(500);
  result.screenshot = join(outDir, "browser_stats.png");
  await page.screenshot({ path: result.screenshot });

  // Page load: the restored workflow gets the same record from GET /krea2_cachedit/stats.
  await openEditor();
  await page.waitForFunction(([id, prompt]) => window.krea2TestPanel(id)?.dataset.promptId === prompt,
    [cacheNodeId, result.live.prompt_id], { timeout: 15_000, polling: 250 }).catch(() => {});
  result.after_reload = await readPanel(cacheNodeId);

  // Loading a workflow (even the same one) is a graph change: the stats clear.
  await loadWorkflow();
  result.after_new_graph = await readPanel(cacheNodeId);
} catch (error) {
  result.error = String(error?.stack || error);
} finally {
  writeFileSync(join(outDir, "result.json"), JSON.stringify(result, null, 2));
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.exit(result.error ? 1 : 0);
