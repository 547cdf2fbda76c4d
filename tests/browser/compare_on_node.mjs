// Drives the real graph editor in headless Chromium: load a workflow, queue it, and report
// what the Krea2CompareImages node shows (see tests/editor/test_browser_compare.py for the checks).
//
// usage: node compare_on_node.mjs <comfyui url> <workflow.json> <out dir>
// writes <out dir>/compare_result.json and <out dir>/browser_compare.png
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { launchHeadless } from "./headless_editor.mjs";

const [url, workflowPath, outDir] = process.argv.slice(2);
const workflow = JSON.parse(readFileSync(workflowPath, "utf8"));
const RUN_TIMEOUT_MS = Number(process.env.KREA2_BROWSER_RUN_TIMEOUT_MS || 120_000);
// The widget the editor adds to a node for the progress text the server sends it.
const TEXT_WIDGET = "$$node-text-preview";

const { context, close } = await launchHeadless();
const result = { console_errors: [], failed_requests: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (error) => result.console_errors.push(String(error.stack ?? error)));
  page.on("console", (msg) => {
    if (/krea2|Unknown message type/i.test(msg.text())) result.console_errors.push(msg.text());
  });
  page.on("response", async (response) => {
    if (response.status() < 400) return;
    const why = response.url().endsWith("/api/prompt") ? ` ${await response.text().catch(() => "")}` : "";
    result.failed_requests.push(`${response.status()} ${response.url()}${why}`);
  });

  await page.goto(url);
  await page.waitForFunction(() => !!window.comfyAPI?.app?.app, null, { timeout: 120_000 });
  await page.evaluate(async () => {
    const { app } = await import("/scripts/app.js");
    const { api } = await import("/scripts/api.js");
    window.krea2TestApp = app;
    window.krea2TestEnded = [];
    for (const type of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(type, ({ detail }) => window.krea2TestEnded.push({ type, prompt_id: detail?.prompt_id }));
    }
  });
  await page.waitForFunction(() => window.krea2TestApp.canvas && window.krea2TestApp.graph.nodes.length > 0,
    null, { timeout: 120_000, polling: 250 });
  result.frontend_version = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  await page.evaluate((graph) => window.krea2TestApp.loadGraphData(graph), workflow);

  const nodeId = workflow.nodes.find((n) => n.type === "Krea2CompareImages").id;
  result.queued = await page.evaluate(() => window.krea2TestApp.queuePrompt(0));
  await page.waitForFunction(() => window.krea2TestEnded.length > 0, null,
    { timeout: RUN_TIMEOUT_MS, polling: 250 });
  result.ended = await page.evaluate(() => window.krea2TestEnded);
  // The heatmap preview loads as an <img> on the node; wait until it has pixels.
  await page.waitForFunction((id) => {
    const node = window.krea2TestApp.graph.getNodeById(id);
    return (node?.imgs ?? []).some((img) => img.complete && img.naturalWidth > 0);
  }, nodeId, { timeout: 30_000, polling: 250 }).catch(() => {});
  await page.evaluate(() => window.krea2TestApp.canvas.setDirty(true, true));
  await page.waitForTimeout(500);

  result.node = await page.evaluate(([id, widgetName]) => {
    const node = window.krea2TestApp.graph.getNodeById(id);
    return {
      text: node?.widgets?.find((w) => w.name === widgetName)?.value ?? null,
      images: (node?.imgs ?? []).map((img) => ({ src: img.src, width: img.naturalWidth, height: img.naturalHeight })),
    };
  }, [nodeId, TEXT_WIDGET]);
  // What the user reads: the widget's first line, found on the page as rendered text.
  const firstLine = (result.node.text ?? "").split("\n")[0];
  if (firstLine) {
    const shown = page.getByText(firstLine, { exact: false }).first();
    result.node.dom_visible = await shown.isVisible();
    result.node.dom_text = result.node.dom_visible ? await shown.innerText() : null;
  }
  await page.screenshot({ path: join(outDir, "browser_compare.png") });
} catch (error) {
  result.error = String(error?.stack || error);
} finally {
  writeFileSync(join(outDir, "compare_result.json"), JSON.stringify(result, null, 2));
  await close();
}
process.exit(result.error ? 1 : 0);
