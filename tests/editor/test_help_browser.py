"""The nodes' help pages and the zh locale in the real graph editor (headless Chromium).

A node placed on the canvas and selected, its help opened with the selection toolbox's "Node Info" button: the
right side panel's Info tab shows the node's page from web/docs (English, or zh with the editor in Chinese), and
with the editor's language (``Comfy.Locale``) set to zh the nodes carry their zh titles and input labels from
locales/zh/nodeDefs.json, those of the inputs a preset shows included.

Needs Chromium and ``npm ci`` in tests/browser (``tests/browser/setup.sh``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from browser_harness import ARTIFACTS, BROWSER_DIR, quiet_first_run
from node_schemas import DYNAMIC_COMBO, pack_node_infos, translatable_inputs

pytestmark = pytest.mark.tier("browser")

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "web" / "docs"
ZH = json.loads((REPO / "locales" / "zh" / "nodeDefs.json").read_text(encoding="utf-8"))
PACK_URL = "/extensions/krea2_cachedit/docs/"


def page_paragraphs(path: Path) -> list[str]:
    """The page's prose paragraphs as the panel renders them (no Markdown marks), for matching shown text."""
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", path.read_text(encoding="utf-8"))
    return [re.sub(r"\*\*|`", "", block).strip() for block in text.split("\n\n")
            if block.strip() and not block.lstrip().startswith(("#", "-", "|"))]


def flat(text: str) -> str:
    return " ".join(text.split())


def open_help(server, node_runner, request: dict, locale: str) -> dict:
    node, chromium = node_runner
    quiet_first_run(server)
    # The right side panel opens closed, as for a new user: the toolbox's "Node Info" button opens it.
    server.post("/settings/Comfy.RightSidePanel.IsOpen", False)
    server.post("/settings/Comfy.Locale", locale)
    try:
        ARTIFACTS.mkdir(exist_ok=True)
        request_path = ARTIFACTS / f"{request['result']}.request"
        request_path.write_text(json.dumps(request))
        driver = subprocess.run([node, str(BROWSER_DIR / "help_on_node.mjs"), server.url, str(request_path),
                                 str(ARTIFACTS)], cwd=BROWSER_DIR, env=dict(os.environ, CHROMIUM_PATH=chromium),
                                capture_output=True, text=True, timeout=600)
    finally:
        # The other browser tests read the editor in English, with the side panel closed.
        server.post("/settings/Comfy.Locale", "en")
        server.post("/settings/Comfy.RightSidePanel.IsOpen", False)
    result_path = ARTIFACTS / request["result"]
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    print(f"screenshot: {ARTIFACTS / request['screenshot']}  (frontend {result.get('frontend_version')})")
    assert driver.returncode == 0 and "error" not in result, (
        f"browser driver failed: {result.get('error')}\nhelp requests: {result.get('help_requests')}\n"
        f"{driver.stdout[-3000:]}\n{driver.stderr[-3000:]}\nserver log:\n{server.log_tail()}")
    assert not result["console_errors"], result["console_errors"]
    assert not [r for r in result["failed_requests"] if "krea2" in r or "i18n" in r], result["failed_requests"]
    return result


def test_help_panel_shows_the_nodes_english_page(browser_tools, editor_server):
    node = "Krea2CacheDiT"
    result = open_help(editor_server, browser_tools, {
        "nodes": [node], "help_for": node, "screenshot": "browser_help.png", "result": "help_result.json"}, "en")

    help_ = result["help"]
    assert help_["visible"] and help_["selected_tab"] == "Info", help_
    assert f"200 {editor_server.url}{PACK_URL}{node}.md" in result["help_requests"], result["help_requests"]
    shown = flat(help_["text"])
    assert shown.startswith("Krea-2 Cache-DiT"), shown[:200]
    missing = [p for p in page_paragraphs(DOCS / f"{node}.md") if flat(p) not in shown]
    assert not missing, f"paragraphs of web/docs/{node}.md not shown in the help panel: {missing}"
    inputs = ZH[node]["inputs"]   # every input of the node (tests/editor/test_help_pages.py holds the keys to the schema)
    assert not [name for name in inputs if name not in shown], f"inputs not in the help panel: {inputs}"


def other_options_inputs(info: dict, chosen: dict[str, str]) -> set[str]:
    """The keys of the inputs a dynamic combo shows only under an option other than the one ``chosen`` for it
    (the forecast node's ``auto`` input while ``custom`` is chosen): the canvas does not draw them."""
    hidden = set()
    for name, (kind, options, *_) in info["input"]["required"].items():
        if kind == DYNAMIC_COMBO and name in chosen:
            shown = {key for option in options["options"] if option["key"] == chosen[name]
                     for key in option["inputs"].get("required", {})}
            hidden |= {f"{name}_{key}" for option in options["options"] if option["key"] != chosen[name]
                       for key in option["inputs"].get("required", {}) if key not in shown}
    return hidden


def test_editor_in_zh_shows_the_translated_nodes_and_zh_page(browser_tools, editor_server, comfy_root):
    """The forecast node with its ``custom`` preset (the inputs a dynamic combo shows) and the compare node."""
    node = "CacheDiTSpectrum"
    result = open_help(editor_server, browser_tools, {
        "nodes": [node, "Krea2CompareImages"], "help_for": node, "widgets": {node: {"preset": "custom"}},
        "screenshot": "browser_help_zh.png", "result": "help_zh_result.json"}, "zh")

    schemas = {info["name"]: info for info in pack_node_infos(comfy_root)}
    for placed in result["nodes"]:
        zh = ZH[placed["type"]]
        assert placed["title"] == zh["display_name"], (placed["title"], zh["display_name"])
        shown = {item["name"].replace(".", "_"): item["label"] for item in placed["widgets"] + placed["inputs"]}
        hidden = other_options_inputs(schemas[placed["type"]], {"preset": "custom"})   # not on the canvas
        wrong = {item.key: shown.get(item.key) for item in translatable_inputs(schemas[placed["type"]])
                 if item.key not in hidden
                 and shown.get(item.key) != zh["inputs"].get(item.key, {}).get("name", "(not in the zh locale)")}
        assert not wrong, f"{placed['type']}: inputs not labelled from the zh locale: {wrong}"
    spectrum = result["nodes"][0]
    assert "preset.forecast" in {w["name"] for w in spectrum["widgets"]}, spectrum["widgets"]

    help_ = result["help"]
    assert help_["visible"], help_
    assert f"200 {editor_server.url}{PACK_URL}{node}/zh.md" in result["help_requests"], result["help_requests"]
    shown = flat(help_["text"])
    assert shown.startswith(ZH[node]["display_name"]), shown[:200]
    missing = [p for p in page_paragraphs(DOCS / node / "zh.md") if flat(p) not in shown]
    assert not missing, f"paragraphs of web/docs/{node}/zh.md not shown in the help panel: {missing}"
