"""What the Krea2CompareImages node shows in the real graph editor after a run (headless Chromium).

The node has no editor extension of its own: the metrics arrive as the node's progress text and
the heatmap as its preview image, both of which the stock editor draws on any node.
"""

from __future__ import annotations

import json
import os
import random
import subprocess

import pytest

from browser_harness import ARTIFACTS, BROWSER_DIR, quiet_first_run

pytestmark = pytest.mark.tier("browser")

COMPARE_NODE_ID = 3
SIZE = 48


def ui_workflow(level: int) -> dict:
    """Two EmptyImage greys 10 apart -> Krea2CompareImages, in the editor's own format.

    ``level`` must be new to the server, or ComfyUI serves the node from its cache of an
    earlier identical graph and sends no progress text.
    """
    def empty_image(node_id, pos, grey, link):
        return {"id": node_id, "type": "EmptyImage", "pos": pos, "flags": {}, "order": node_id - 1, "mode": 0,
                "properties": {}, "inputs": [],
                "outputs": [{"name": "IMAGE", "type": "IMAGE", "links": [link], "slot_index": 0}],
                "widgets_values": [SIZE, SIZE, 1, grey * 0x010101]}

    compare = {"id": COMPARE_NODE_ID, "type": "Krea2CompareImages", "pos": [420, 40], "size": [420, 520],
               "flags": {}, "order": 2, "mode": 0, "properties": {},
               "inputs": [{"name": "reference", "type": "IMAGE", "link": 1},
                          {"name": "candidate", "type": "IMAGE", "link": 2}],
               "outputs": [{"name": name, "type": kind, "links": [], "slot_index": i}
                           for i, (name, kind) in enumerate([("difference", "IMAGE"), ("mae_255", "FLOAT"),
                                                              ("psnr_db", "FLOAT")])]}
    return {"last_node_id": 3, "last_link_id": 2,
            "nodes": [empty_image(1, [20, 40], level, 1), empty_image(2, [20, 300], level + 10, 2), compare],
            "links": [[1, 1, 0, COMPARE_NODE_ID, 0, "IMAGE"], [2, 2, 0, COMPARE_NODE_ID, 1, "IMAGE"]],
            "groups": [], "config": {}, "extra": {"ds": {"scale": 1.0, "offset": [80, 110]}}, "version": 0.4}


def test_metrics_and_heatmap_shown_on_compare_node(browser_tools, editor_server, tmp_path):
    node, chromium = browser_tools
    quiet_first_run(editor_server)
    workflow_path = tmp_path / "workflow.json"
    workflow_path.write_text(json.dumps(ui_workflow(level=random.SystemRandom().randrange(0, 245))))
    ARTIFACTS.mkdir(exist_ok=True)

    driver = subprocess.run(
        [node, str(BROWSER_DIR / "compare_on_node.mjs"), editor_server.url, str(workflow_path), str(ARTIFACTS)],
        cwd=BROWSER_DIR, env=dict(os.environ, CHROMIUM_PATH=chromium),
        capture_output=True, text=True, timeout=600)
    result_path = ARTIFACTS / "compare_result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    print(f"screenshot: {ARTIFACTS / 'browser_compare.png'}  (frontend {result.get('frontend_version')})")
    assert driver.returncode == 0 and "error" not in result, (
        f"browser driver failed: {result.get('error')}\nfailed requests: {result.get('failed_requests')}\n"
        f"{driver.stdout[-3000:]}\n{driver.stderr[-3000:]}\nserver log:\n{editor_server.log_tail()}")
    assert [e["type"] for e in result["ended"]] == ["execution_success"], result["ended"]
    assert not result["console_errors"], result["console_errors"]
    ours = [r for r in result["failed_requests"] if "krea2" in r or "/api/view" in r]
    assert not ours, ours

    shown = result["node"]
    assert shown["text"] and "MAE 10.000 / 255 · PSNR 28.13 dB" in shown["text"], shown
    assert shown["dom_visible"] and "MAE 10.000 / 255 · PSNR 28.13 dB" in shown["dom_text"], shown
    (heatmap,) = shown["images"]
    assert (heatmap["width"], heatmap["height"]) == (SIZE, SIZE) and "type=temp" in heatmap["src"], heatmap
