// Drives the real graph editor in headless Chromium for the cache nodes' labels, the node search and a saved
// workflow with the deprecated Krea2CacheDiT node (see tests/editor/test_deprecated_browser.py for the checks):
//   1. places each of request.nodes on an empty graph and reports its widgets (name, the label the canvas draws:
//      LiteGraph draws `label || name`, the advanced flag) and its input sockets with their labels;
//   2. for each of request.queries, double-clicks the empty canvas as a user does, types the query into the search
//      box that opens and reports the results' display names (and what the editor's node definition store says
//      of the node types in request.nodes: deprecated or not, shown in search or not);
//   3. loads request.workflow (a saved workflow) as the editor opens a file, reports the node request.node_id as
//      loaded (its class, errors, widget values) and any dialog, then queues it like the Queue button and waits
//      for the prompt to end;
//   4. switches the editor to the DOM-based "Nodes 2.0" renderer, places request.nodes again and reports each node's
//      widget rows (each starts with its label) before and after a click on its "Show advanced inputs" button.
//
// usage: node deprecated_node.mjs <comfyui url> <request.json> <out dir>
//   request: {"nodes": [types], "widgets": {type: {name: value}}, "queries": [strings], "workflow": {...},
//             "node_id": the saved node's id, "result": file name}
// writes <out dir>/<result>, deprecated_labels.png, deprecated_search_<i>.png, deprecated_workflow.png and
// deprecated_nodes2.png
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { launchHeadless } from "./headless_editor.mjs";

const [url, requestPath, outDir] = process.argv.slice(2);
const request = JSON.parse(readFileSync(requestPath, "utf8"));
const RUN_TIMEOUT_MS = Number(process.env.KREA2_BROWSER_RUN_TIMEOUT_MS || 240_000);

const { context, close } = await launchHeadless();
const result = { console_errors: [], console_warnings: [], failed_requests: [], queued_prompt_ids: [] };
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (error) => result.console_errors.push(String(error.stack ?? error)));
  page.on("console", (msg) => {
    const text = msg.text();
    if (msg.type() === "error" && /krea2|cachedit/i.test(text)) result.console_errors.push(text);
    // The frontend warns of a node type it cannot create ("node type not found").
    if (/node type|not found or has errors|missing node/i.test(text)) {
      result.console_warnings.push(`${msg.type()}: ${text}`);
    }
  });
  page.on("response", async (response) => {
    if (response.ok() && response.request().method() === "POST" && response.url().endsWith("/api/prompt")) {
      const { prompt_id: promptId } = await response.json().catch(() => ({}));
      result.queued_prompt_ids.push(promptId ?? null);
    }
    if (response.status() < 400) return;
    const why = response.url().endsWith("/api/prompt") ? ` ${await response.text().catch(() => "")}` : "";
    result.failed_requests.push(`${response.status()} ${response.url()}${why}`);
  });

  await page.goto(url);
  await page.waitForFunction(() => !!window.comfyAPI?.app?.app?.canvas, null, { timeout: 120_000 });
  result.frontend_version = await page.evaluate(() => window.__COMFYUI_FRONTEND_VERSION__ ?? null);
  await page.waitForFunction(() => window.comfyAPI.app.app.graph.nodes.length > 0, null,
    { timeout: 120_000, polling: 250 });
  await page.evaluate(async () => {
    const { api } = await import("/scripts/api.js");
    window.krea2TestApi = api;
    window.krea2TestEnded = [];
    for (const type of ["execution_success", "execution_error", "execution_interrupted"]) {
      api.addEventListener(type, ({ detail }) => window.krea2TestEnded.push({ type, prompt_id: detail?.prompt_id }));
    }
    // The editor's node definitions (its Pinia store "nodeDef"): what the search box searches.
    window.krea2TestNodeDefs = () => document.getElementById("vue-app")?.__vue_app__?.config.globalProperties
      .$pinia?._s.get("nodeDef");
  });
  result.show_deprecated_setting = await page.evaluate(
    () => window.comfyAPI.app.app.extensionManager?.setting?.get("Comfy.Node.ShowDeprecated") ?? null);

  // 1. The nodes as placed on an empty graph.
  result.nodes = await page.evaluate(({ types, widgets }) => {
    const app = window.comfyAPI.app.app;
    app.graph.clear();
    return types.map((type, i) => {
      const node = window.LiteGraph.createNode(type);
      node.pos = [60 + 420 * i, 80];
      app.graph.add(node);
      for (const [name, value] of Object.entries(widgets[type] ?? {})) {
        const widget = node.widgets.find((w) => w.name === name);
        widget.value = value;
        widget.callback?.(value);   // a dynamic combo adds the chosen option's inputs on its callback
      }
      return {
        type, id: node.id, title: node.title,
        widgets: (node.widgets ?? []).map((w) => ({
          name: w.name, label: w.label ?? null, drawn_label: w.label || w.name,
          advanced: !!(w.advanced ?? w.options?.advanced),
        })),
        // The input sockets that are no widget's (model): the canvas draws `label ?? localized_name ?? name`.
        sockets: (node.inputs ?? []).filter((s) => !s.widget).map((s) => ({
          name: s.name, label: s.label ?? null, drawn_label: s.label ?? s.localized_name ?? s.name })),
      };
    });
  }, { types: request.nodes, widgets: request.widgets ?? {} });
  await page.evaluate(() => window.comfyAPI.app.app.canvas.setDirty(true, true));
  await page.waitForTimeout(500);
  await page.screenshot({ path: join(outDir, "deprecated_labels.png") });

  // 2. The node search as a user opens it: a double click on the empty canvas, then typing.
  await page.evaluate(() => window.comfyAPI.app.app.graph.clear());
  result.node_defs = await page.evaluate((types) => {
    const store = window.krea2TestNodeDefs();
    if (!store) return null;
    const visible = new Set(store.visibleNodeDefs.map((d) => d.name));
    return Object.fromEntries(types.map((t) => [t, {
      known: !!store.nodeDefsByName[t], deprecated: store.nodeDefsByName[t]?.deprecated ?? null,
      in_search: visible.has(t)}]));
  }, request.nodes);
  result.searches = [];
  for (const [i, query] of request.queries.entries()) {
    const box = await page.evaluate(() => window.comfyAPI.app.app.canvas.canvas.getBoundingClientRect().toJSON());
    await page.mouse.dblclick(box.x + box.width / 2, box.y + box.height / 2);
    const input = page.locator('input[role="combobox"][aria-controls="results-list"]').first();
    await input.waitFor({ state: "visible", timeout: 30_000 });
    await input.fill(query);
    const items = page.locator('#results-list [data-testid="result-item"]');
    // The results follow the query at once; give the list a moment to settle.
    await items.first().waitFor({ state: "visible", timeout: 15_000 }).catch(() => {});
    await page.waitForTimeout(750);
    const names = await items.evaluateAll((elements) => elements.map(
      (e) => (e.querySelector("span.truncate") ?? e).textContent.trim()));
    const texts = await items.evaluateAll((elements) => elements.map((e) => e.innerText.replace(/\s+/g, " ").trim()));
    result.searches.push({ query, typed: await input.inputValue(), names, texts });
    await page.screenshot({ path: join(outDir, `deprecated_search_${i}.png`) });
    await page.keyboard.press("Escape");
    await input.waitFor({ state: "hidden", timeout: 10_000 }).catch(() => {});
  }

  // 3. The saved workflow, opened as the editor opens a file, then queued like the Queue button.
  await page.evaluate((graph) => window.comfyAPI.app.app.loadGraphData(graph), request.workflow);
  await page.waitForTimeout(1500);   // a missing-node warning would be up by now
  result.loaded = await page.evaluate((id) => {
    const node = window.comfyAPI.app.app.graph.getNodeById(Number(id));
    if (!node) return null;
    return {
      type: node.type, comfy_class: node.constructor?.comfyClass ?? null, title: node.title,
      has_errors: !!node.has_errors, widgets_values: node.serialize().widgets_values ?? null,
      widget_names: (node.widgets ?? []).map((w) => w.name),
    };
  }, request.node_id);
  result.dialogs = await page.evaluate(() => [...document.querySelectorAll('[role="dialog"], .p-dialog')]
    .filter((d) => d.getBoundingClientRect().width > 0).map((d) => d.innerText.replace(/\s+/g, " ").trim()));
  await page.screenshot({ path: join(outDir, "deprecated_workflow.png") });
  result.queued = await page.evaluate(() => window.comfyAPI.app.app.queuePrompt(0));
  await page.waitForFunction(() => window.krea2TestEnded.length > 0, null, { timeout: RUN_TIMEOUT_MS, polling: 250 });
  result.ended = await page.evaluate(() => window.krea2TestEnded);

  // 4. The same nodes in the DOM-based "Nodes 2.0" renderer: the rows of widgets each node shows, before and after
  // a click on its "show advanced inputs" button.
  await page.evaluate(() => window.krea2TestApi.storeSetting("Comfy.VueNodes.Enabled", true));
  try {
    await page.goto(url);
    await page.waitForFunction(() => !!window.comfyAPI?.app?.app?.canvas
      && window.comfyAPI.app.app.graph.nodes.length > 0, null, { timeout: 120_000, polling: 250 });
    const ids = await page.evaluate(({ types, widgets }) => {
      const app = window.comfyAPI.app.app;
      app.graph.clear();
      return types.map((type, i) => {
        const node = window.LiteGraph.createNode(type);
        node.pos = [40 + 460 * i, 60];
        app.graph.add(node);
        for (const [name, value] of Object.entries(widgets[type] ?? {})) {
          const widget = node.widgets.find((w) => w.name === name);
          widget.value = value;
          widget.callback?.(value);
        }
        return node.id;
      });
    }, { types: request.nodes, widgets: request.widgets ?? {} });
    const rows = (id) => page.evaluate((nodeId) => {
      const node = document.querySelector(`.lg-node[data-node-id="${nodeId}"]`);
      if (!node) return null;
      return {
        rows: [...node.querySelectorAll(".lg-node-widget")].filter((r) => r.getBoundingClientRect().height > 0)
          .map((r) => r.innerText.trim()),
        buttons: [...node.querySelectorAll("button")].map((b) => b.innerText.trim()).filter(Boolean),
        text: node.innerText,
      };
    }, id);
    result.nodes2 = [];
    for (const [i, id] of ids.entries()) {
      await page.locator(`.lg-node[data-node-id="${id}"]`).waitFor({ state: "visible", timeout: 30_000 });
      await page.waitForTimeout(300);
      const shown = { type: request.nodes[i], before: await rows(id) };
      const toggle = page.locator(`.lg-node[data-node-id="${id}"] button`, { hasText: /advanced/i }).first();
      if (await toggle.count()) {
        await toggle.click();
        await page.waitForTimeout(500);
        shown.after = await rows(id);
      }
      result.nodes2.push(shown);
    }
    await page.screenshot({ path: join(outDir, "deprecated_nodes2.png") });
  } finally {
    // The other browser tests open the classic canvas.
    await page.evaluate(() => fetch("/api/settings/Comfy.VueNodes.Enabled", { method: "POST", body: "false" }));
  }
} catch (error) {
  result.error = String(error?.stack || error);
  await context.pages()[0]?.screenshot({ path: join(outDir, "deprecated_error.png") }).catch(() => {});
} finally {
  writeFileSync(join(outDir, request.result), JSON.stringify(result, null, 2));
  await close();
}
process.exit(result.error ? 1 : 0);
