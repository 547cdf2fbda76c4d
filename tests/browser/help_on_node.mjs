// Drives the real graph editor in headless Chromium: place nodes, select one, open its help through the
// selection toolbox's "Node Info" button (the right side panel's Info tab) and report what the editor shows
// (see tests/editor/test_help_browser.py for the checks).
//
// usage: node help_on_node.mjs <comfyui url> <request.json> <out dir>
//   request: {"nodes": [node types to place], "help_for": a type among them, "widgets": {type: {name: value}},
//             "screenshot": file name, "result": file name}
// writes <out dir>/<result> and <out dir>/<screenshot>
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { launchHeadless } from "./headless_editor.mjs";

const [url, requestPath, outDir] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));

const { context, close } = await launchHeadless();
const result = { console_errors: [], failed_requests: [], help_requests: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (error) => result.console_errors.push(String(error.stack ?? error)));
  page.on("console", (msg) => {
    if (/krea2|cachedit|i18n/i.test(msg.text()) && msg.type() === "error") result.console_errors.push(msg.text());
  });
  page.on("response", (response) => {
    if (/\/docs\/.*\.md$/.test(response.url())) result.help_requests.push(`${response.status()} ${response.url()}`);
    else if (response.status() >= 400) result.failed_requests.push(`${response.status()} ${response.url()}`);
  });

  await page.goto(url);
  await page.waitForFunction(() => !!window.comfyAPI?.app?.app?.canvas, null, { timeout: 120_000 });
  result.frontend_version = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  // The default graph is loaded once the editor is up; place the nodes on an empty one.
  await page.waitForFunction(() => window.comfyAPI.app.app.graph.nodes.length > 0, null,
    { timeout: 120_000, polling: 250 });
  result.nodes = await page.evaluate(({ types, widgets }) => {
    const app = window.comfyAPI.app.app;
    app.graph.clear();
    return types.map((type, i) => {
      const node = window.LiteGraph.createNode(type);
      node.pos = [120 + 40 * i, 120 + 300 * i];
      app.graph.add(node);
      for (const [name, value] of Object.entries(widgets[type] ?? {})) {
        node.widgets.find((w) => w.name === name).value = value;
      }
      return {
        type, id: node.id, title: node.title,
        widgets: (node.widgets ?? []).map((w) => ({ name: w.name, label: w.label ?? null })),
        inputs: (node.inputs ?? []).map((s) => ({ name: s.name, label: s.localized_name ?? s.label ?? null })),
      };
    });
  }, { types: request.nodes, widgets: request.widgets ?? {} });

  const target = result.nodes.find((n) => n.type === request.help_for);
  // Select the node as a user does: a click on its title bar.
  const title = await page.evaluate((id) => {
    const app = window.comfyAPI.app.app;
    const node = app.graph.getNodeById(id);
    const { offset, scale } = app.canvas.ds;   // canvas to screen: (position + offset) * scale
    const [x, y] = [(node.pos[0] + 60 + offset[0]) * scale,
      (node.pos[1] - window.LiteGraph.NODE_TITLE_HEIGHT / 2 + offset[1]) * scale];
    const rect = app.canvas.canvas.getBoundingClientRect();
    return { x: rect.left + x, y: rect.top + y };
  }, target.id);
  await page.waitForTimeout(500);
  await page.mouse.click(title.x, title.y);
  await page.getByTestId("info-button").click({ timeout: 30_000 });
  const help = page.locator(".node-help-content").first();
  await help.locator("h1").first().waitFor({ state: "visible", timeout: 30_000 });
  result.help = {
    visible: await help.isVisible(),
    text: await help.innerText(),
    selected_tab: await page.locator("[role=tab][aria-selected=true]").first().innerText().catch(() => null),
  };
  await page.screenshot({ path: join(outDir, request.screenshot) });
} catch (error) {
  result.error = String(error?.stack || error);
  await context.pages()[0]?.screenshot({ path: join(outDir, request.screenshot) }).catch(() => {});
} finally {
  writeFileSync(join(outDir, request.result), JSON.stringify(result, null, 2));
  await close();
}
process.exit(result.error ? 1 : 0);
