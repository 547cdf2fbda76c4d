"""The stats panel on the cache nodes (Krea2CacheDiT, CacheDiTDBCache, CacheDiTSpectrum), in the real graph editor in
headless Chromium.

A real sampling run through the real ComfyUI server: the test opens two editor tabs
(two clients) on the same workflow, queues it from tab A, and checks that A's node
shows what ``GET /krea2_cachedit/stats`` reports for that prompt (text, step strip,
residual-diff chart, threshold suggestions, time estimate) while B's same-id node
shows nothing, then that it comes back on A's reload (not on B's), also in the
Nodes 2.0 renderer, and clears when another workflow is loaded. With the editor's language (``Comfy.Locale``) set
to zh, the panel speaks Chinese: its strings from locales/zh/main.json.

Needs Chromium and ``npm ci`` in tests/browser (``tests/browser/setup.sh``).
``KREA2_FRONTEND_ROOT`` runs it against another frontend build (an unpacked
``comfyui-frontend-package``'s ``static`` folder) through ComfyUI's ``--front-end-root``.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
from pathlib import Path

import pytest

from browser_harness import ARTIFACTS, BROWSER_DIR, quiet_first_run
from devkit.comfy_harness import STATS_ROUTE, ComfyServer
from devkit.krea2_prompts import CACHE_NODE_DEFAULTS, TINY_CONTEXT_FEATURES, TINY_MODEL

pytestmark = pytest.mark.tier("browser")

LOCALES = Path(__file__).resolve().parents[2] / "locales"

# The random tiny model's residual changes are large (~0.7-1 per step after warmup): at this
# threshold some steps cache and others don't, so the chart has both kinds of marks.
RUN_CACHE = {"residual_diff_threshold": 0.9}
STEPS = 8
CACHE_NODE_ID = 5


def ui_workflow(seed: int, cache: dict | None = None, node_type: str = "Krea2CacheDiT",
                widgets: list | None = None) -> dict:
    """UNETLoader -> Krea2CacheDiT -> KSampler -> SaveLatent in the editor's own (UI) format.

    Without ``cache`` the Krea2CacheDiT node keeps its defaults (no widgets_values), as a
    user's freshly added node would; ``cache`` sets some of its inputs; ``widgets``, the node's
    widget values as they are (another node type's). ``seed`` must be new
    to the server: ComfyUI would otherwise serve the KSampler from its cache of an earlier
    test's identical graph, and nothing samples.
    """
    def node(node_id, type_, pos, inputs=(), outputs=(), widgets=None):
        data = {"id": node_id, "type": type_, "pos": pos, "flags": {}, "order": node_id, "mode": 0,
                "properties": {}, "inputs": [{"name": n, "type": t, "link": link} for n, t, link in inputs],
                "outputs": [{"name": n, "type": t, "links": links, "slot_index": i}
                            for i, (n, t, links) in enumerate(outputs)]}
        if widgets is not None:
            data["widgets_values"] = widgets
        return data

    nodes = [
        node(1, "UNETLoader", [20, 40], outputs=[("MODEL", "MODEL", [1])],
             widgets=[TINY_MODEL, "default"]),
        node(2, "Krea2TestConditioning", [20, 200], outputs=[("CONDITIONING", "CONDITIONING", [3])],
             widgets=[1, "fixed", 8, TINY_CONTEXT_FEATURES]),
        node(3, "Krea2TestConditioning", [20, 380], outputs=[("CONDITIONING", "CONDITIONING", [4])],
             widgets=[2, "fixed", 8, TINY_CONTEXT_FEATURES]),
        node(4, "EmptyLatentImage", [20, 560], outputs=[("LATENT", "LATENT", [5])], widgets=[64, 64, 1]),
        node(CACHE_NODE_ID, node_type, [380, 40], inputs=[("model", "MODEL", 1)],
             outputs=[("MODEL", "MODEL", [2])],
             widgets=widgets if widgets is not None else None if cache is None else
             list({**CACHE_NODE_DEFAULTS, **cache}.values())),
        node(6, "KSampler", [760, 40],
             inputs=[("model", "MODEL", 2), ("positive", "CONDITIONING", 3),
                     ("negative", "CONDITIONING", 4), ("latent_image", "LATENT", 5)],
             outputs=[("LATENT", "LATENT", [6])],
             widgets=[seed, "fixed", STEPS, 1.0, "euler", "simple", 1.0]),
        node(7, "SaveLatent", [760, 420], inputs=[("samples", "LATENT", 6)], widgets=["krea2_browser"]),
    ]
    links = [[1, 1, 0, CACHE_NODE_ID, 0, "MODEL"], [2, CACHE_NODE_ID, 0, 6, 0, "MODEL"],
             [3, 2, 0, 6, 1, "CONDITIONING"], [4, 3, 0, 6, 2, "CONDITIONING"],
             [5, 4, 0, 6, 3, "LATENT"], [6, 6, 0, 7, 0, "LATENT"]]
    return {"last_node_id": 7, "last_link_id": 6, "nodes": nodes, "links": links, "groups": [],
            "config": {}, "extra": {"ds": {"scale": 1.0, "offset": [80, 110]}}, "version": 0.4}


def check_chart(shown: dict, record: dict):
    """The residual-diff chart, suggestions and time estimate on the node match the run's record."""
    steps = record["steps"]
    assert shown["chart"], "no residual-diff chart"
    marks = shown["marks"]
    assert [m["step"] for m in marks] == list(range(steps)), "one mark per step, in order"
    assert [m["state"] for m in marks] == record["step_states"]
    assert [m["step"] for m in marks if m["state"] == "cached"] == record["cached_steps"]
    assert record["cached_steps"], f"this run cached nothing; the chart's cached marks go untested: {record}"
    assert [m["diff"] for m in marks] == record["residual_diffs"]
    threshold = record["settings"]["residual_diff_threshold"]
    line = shown["threshold_line"]
    assert line is not None and f"threshold {threshold:g}" in line["tooltip"], line
    for mark, diff, reason in zip(marks, record["residual_diffs"], record["step_reasons"]):
        tooltip = mark["tooltip"]
        assert f"step {mark['step']}" in tooltip and mark["state"] in tooltip and f"reason: {reason}" in tooltip, tooltip
        if diff is None:
            assert "diff not measured" in tooltip, tooltip
            continue
        assert re.search(r"diff ([\d.]+)", tooltip) and abs(float(re.search(r"diff ([\d.]+)", tooltip)[1]) - diff) <= (
            0.006 if diff >= 1 else 0.051 * diff), (tooltip, diff)
        # On the chart, a bar reaches above the threshold line exactly when its diff is above the threshold
        # (y grows downwards).
        if abs(diff - threshold) > 1e-3 * threshold:
            assert (float(mark["bar_top"]) < float(line["y"])) == (diff > threshold), (mark, line, diff, threshold)

    # Suggestions: at most three thresholds of the record that cache a different number of steps, the
    # ones nearest the current threshold (log scale), listed by threshold.
    other = [s for s in record["threshold_suggestions"] if len(s["cached_steps"]) != len(record["cached_steps"])]
    shown_pairs = []
    for text in shown["suggestions"]:
        # Each with the plain step count it would cost as much as (the record's, for that threshold).
        match = re.fullmatch(r"([\d.]+) → (\d+) cached \(as many as (\d+) steps\)", text)
        assert match, text
        shown_pairs.append((float(match[1]), int(match[2])))
        (suggested,) = [s for s in other if s["threshold"] == float(match[1])]
        assert int(match[3]) == suggested["equal_cost_steps"], (text, suggested)
    assert len(shown_pairs) == min(3, len(other)) and shown_pairs == sorted(shown_pairs), (shown_pairs, other)
    nearest = sorted(other, key=lambda s: abs(math.log(s["threshold"] / threshold)))[:3]
    assert sorted(shown_pairs) == sorted((s["threshold"], len(s["cached_steps"])) for s in nearest), (shown_pairs, nearest)

    time = re.fullmatch(r"Time: ~([\d.]+)x, ([\d.]+) s (saved|lost) \(estimated\)", shown["time"] or "")
    assert time, shown["time"]
    saved = record["estimated_uncached_s"] - record["duration_s"]
    assert abs(float(time[1]) - record["estimated_speedup"]) <= 0.051, (time[0], record["estimated_speedup"])
    assert abs(float(time[2]) - abs(saved)) <= 0.051 and (time[3] == "saved") == (saved >= 0), (time[0], saved)


def check_calls(shown: dict, record: dict):
    """The calls computed in full and the step count that costs as much, as the record has them; the tooltip says
    what to do with it."""
    steps = record["equal_cost_steps"]
    assert steps is not None and record["full_calls"] < record["calls"], record
    counted = f"{record['full_calls']} of {record['calls']} calls computed"
    assert shown["calls"]["text"] == f"{counted}: as many as {steps} steps", shown["calls"]
    assert f"set a plain KSampler to {steps} steps" in shown["calls"]["tooltip"], shown["calls"]


def records_of(server: ComfyServer, queued: dict[str, list]) -> list[dict]:
    """Every stats record of the prompts the editor tabs queued (to say what went wrong)."""
    ids = {prompt_id for ids in queued.values() for prompt_id in ids}
    return [r for r in server.get(STATS_ROUTE)["runs"] if r["prompt_id"] in ids]


# Both cache nodes show the same panel (CacheDiTDBCache on the same Krea-2 model).
@pytest.mark.parametrize("node_type", ["Krea2CacheDiT", "CacheDiTDBCache"])
def test_stats_shown_on_cache_node_after_real_run(browser_tools, editor_server, tmp_path, node_type):
    node, chromium = browser_tools
    quiet_first_run(editor_server)
    workflow_path = tmp_path / "workflow.json"
    workflow_path.write_text(json.dumps(ui_workflow(seed=random.SystemRandom().randrange(1, 2**31), cache=RUN_CACHE,
                                                    node_type=node_type)))
    ARTIFACTS.mkdir(exist_ok=True)

    driver = subprocess.run(
        [node, str(BROWSER_DIR / "stats_on_node.mjs"), editor_server.url, str(workflow_path), str(ARTIFACTS)],
        cwd=BROWSER_DIR, env=dict(os.environ, CHROMIUM_PATH=chromium),
        capture_output=True, text=True, timeout=900)
    result_path = ARTIFACTS / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    print(f"screenshot: {ARTIFACTS / 'browser_stats.png'}  (frontend {result.get('frontend_version')}, "
          f"run {result.get('run_seconds')}s)")
    queued = result.get("queued_prompt_ids", {})
    assert driver.returncode == 0 and "error" not in result, (
        f"browser driver failed: {result.get('error')}\nfailed requests: {result.get('failed_requests')}\n"
        f"{driver.stdout[-3000:]}\n{driver.stderr[-3000:]}\n"
        f"stats records of the queued prompts {queued}: {records_of(editor_server, queued)}\n"
        f"server log:\n{editor_server.log_tail()}")
    assert not result["console_errors"], result["console_errors"]
    ours = [r for r in result["failed_requests"] if "krea2" in r]
    assert not ours, ours

    # Before the run the node shows its empty panel, not someone else's numbers.
    assert result["before_run"] is not None, f"no stats panel on the {node_type} node"
    assert result["before_run"]["prompt_id"] == "" and result["before_run"]["cells"] == []

    # The record the server kept for the one prompt tab A queued is the one the node shows.
    assert sorted(queued) == ["A"], queued
    assert len(queued["A"]) == 1, queued
    [record] = editor_server.stats_for(queued["A"][0], str(CACHE_NODE_ID))
    assert record["steps"] == STEPS
    live = result["live"]
    assert (record["client_id"], record["workflow_id"]) == (live["client_id"], live["workflow_id"]), (
        "the record names the tab that queued the prompt and its workflow")
    assert live["visible"], "the stats panel is not visible on the canvas"
    assert (live["prompt_id"], live["node_id"]) == (record["prompt_id"], record["node_id"])
    assert live["cells"] == record["step_states"]
    text = live["text"]
    assert f"Cached steps: {len(record['cached_steps'])}/{STEPS}" in text, text
    saved = re.search(r"Block evals saved: ([\d.]+)% \((\d+)/(\d+) run\)", text)
    assert saved, text
    assert abs(float(saved.group(1)) - 100 * record["blocks_saved"]) <= 0.051, text
    assert (int(saved.group(2)), int(saved.group(3))) == (record["block_evals"], record["block_evals_uncached"])
    separate = "on" if record["has_separate_cfg"] else "off"
    assert f"CFG: {record['cfg_mode']} · separate CFG: {separate}" in text, text
    check_calls(live, record)
    assert record["calibrator"] == {"name": "none"} and live["calibrator"] == "Calibrator: none", live["calibrator"]
    assert ARTIFACTS.joinpath("browser_stats.png").stat().st_size > 10_000
    assert live["fits"], "the panel cuts its content off"
    check_chart(live, record)

    # Tab B shows the same workflow (same workflow id, same node id) in another client: A's run is
    # not B's. The server sends B nothing, and B's editor ignores A's record if it gets one.
    for state in ("b_before_run", "b_live", "b_after_foreign_event", "b_after_reload"):
        shown = result[state]
        assert shown["client_id"] != record["client_id"], (state, shown)
        assert (shown["workflow_id"], shown["prompt_id"], shown["cells"]) == (record["workflow_id"], "", []), (
            state, shown)
    assert result["b_live"]["stats_events"] == 0, "the stats event went to a client that did not queue the prompt"

    # Reopening tab A restores the workflow and the stats, from the route this time.
    reloaded = result["after_reload"]
    assert reloaded["client_id"] == record["client_id"], "a reload keeps the tab's client id"
    assert (reloaded["prompt_id"], reloaded["cells"]) == (record["prompt_id"], record["step_states"])
    assert reloaded["text"] == text
    # The DOM-based "Nodes 2.0" renderer shows the same panel, chart included, uncut.
    nodes2 = result["nodes2"]
    assert nodes2["vue_node"], "the editor did not switch to Nodes 2.0"
    assert nodes2["visible"] and nodes2["fits"] and nodes2["prompt_id"] == record["prompt_id"], nodes2
    check_chart(nodes2, record)
    # Loading a workflow (even the same one) is a graph change: no stale numbers on the new graph's node,
    # nor when the editor reopens with that new workflow.
    cleared = result["after_new_graph"]
    assert cleared["prompt_id"] == "" and cleared["cells"] == [] and "/" not in cleared["text"]
    reopened = result["after_new_graph_reload"]
    assert reopened["workflow_id"] == cleared["workflow_id"] != record["workflow_id"], (reopened, cleared)
    assert reopened["client_id"] == record["client_id"]
    assert reopened["prompt_id"] == "" and reopened["cells"] == [], reopened



def drive_editor(browser_tools, editor_server: ComfyServer, workflow: dict, tmp_path, name: str) -> dict:
    """The editor driver (stats_on_node.mjs) on ``workflow``: its result, after checking it ran cleanly; its
    screenshots under ``ARTIFACTS / name``."""
    node, chromium = browser_tools
    quiet_first_run(editor_server)
    workflow_path = tmp_path / f"{name}.json"
    workflow_path.write_text(json.dumps(workflow))
    out = ARTIFACTS / name
    out.mkdir(parents=True, exist_ok=True)
    driver = subprocess.run(
        [node, str(BROWSER_DIR / "stats_on_node.mjs"), editor_server.url, str(workflow_path), str(out)],
        cwd=BROWSER_DIR, env=dict(os.environ, CHROMIUM_PATH=chromium), capture_output=True, text=True, timeout=900)
    result = json.loads((out / "result.json").read_text()) if (out / "result.json").exists() else {}
    assert driver.returncode == 0 and "error" not in result, (
        f"{result.get('error')}\n{driver.stdout[-3000:]}\n{driver.stderr[-3000:]}\n{editor_server.log_tail()}")
    assert not result["console_errors"], result["console_errors"]
    return result


def test_the_forecast_node_shows_forecast_steps_where_the_cache_nodes_show_cached_ones(browser_tools, editor_server,
                                                                                        tmp_path):
    """The Forecast node's panel speaks of what ran: its forecast steps (not cached ones) in the count, the strip
    and the legend, its forecaster and preset, and no residual chart (nothing is measured)."""
    workflow = ui_workflow(seed=random.SystemRandom().randrange(1, 2**31), node_type="CacheDiTSpectrum",
                           widgets=["turbo_5_of_8"])
    result = drive_editor(browser_tools, editor_server, workflow, tmp_path, "forecast")
    [record] = editor_server.stats_for(result["queued_prompt_ids"]["A"][0], str(CACHE_NODE_ID))
    assert record["method"]["name"] == "forecast" and record["forecast_steps"] == [2, 4, 6]
    assert record["cached_steps"] == [] and record["calibrator"] is None
    live = result["live"]
    assert live["visible"] and live["fits"], "the forecast panel is cut off"
    assert live["cells"] == record["step_states"] and live["cells"].count("forecast") == 3, live["cells"]
    assert f"Forecast steps: 3/{STEPS}" in live["text"] and "Cached steps" not in live["text"], live["text"]
    assert live["forecast"] == "Forecast: linear · preset turbo_5_of_8", live["forecast"]
    # A forecast call runs no block: the 5 computed steps cost exactly 5 steps.
    assert (record["full_calls"], record["equal_cost_steps"]) == (5, 5), record
    check_calls(live, record)
    assert " forecast " in live["text"] and " cached " not in live["text"], "the legend names forecast steps"
    assert not live["chart"] and live["calibrator"] is None
    assert result["after_reload"]["text"] == live["text"]


def test_the_forecast_panel_shows_the_auto_plan_as_the_log_line_says_it(browser_tools, editor_server, tmp_path):
    """``auto`` at speedup 2 (a saved workflow holds the preset and its input): the panel names the plan, each
    gap's share and the speedup, in the log line's words."""
    workflow = ui_workflow(seed=random.SystemRandom().randrange(1, 2**31), node_type="CacheDiTSpectrum",
                           widgets=["auto", 2.0])
    result = drive_editor(browser_tools, editor_server, workflow, tmp_path, "auto")
    [record] = editor_server.stats_for(result["queued_prompt_ids"]["A"][0], str(CACHE_NODE_ID))
    method = record["method"]
    assert (method["preset"], method["speedup"], method["computed_steps"]) == ("auto", 2.0, [0, 2, 4, 6]), method
    shares = "/".join(f"{share:g}" for share in method["gap_shares"])
    expected = f"Forecast: linear (target output, share per gap {shares}) · preset auto, speedup 2"
    assert result["live"]["forecast"] == expected, result["live"]["forecast"]
    assert f"(target output, share per gap {shares}) (preset auto, speedup 2)" in editor_server.log_text()


def two_device_workflow(seed: int) -> dict:
    """``ui_workflow`` at CFG 3.5 with ``Krea2TestMultiGPU`` (a second device key on the CPU) before the node."""
    workflow = ui_workflow(seed=seed, cache=RUN_CACHE)
    nodes = {node["id"]: node for node in workflow["nodes"]}
    nodes[6]["widgets_values"][3] = 3.5
    nodes[CACHE_NODE_ID]["inputs"][0]["link"] = 7
    nodes[1]["outputs"][0]["links"] = [1]
    workflow["nodes"].append({
        "id": 8, "type": "Krea2TestMultiGPU", "pos": [200, 420], "flags": {}, "order": 8, "mode": 0,
        "properties": {}, "inputs": [{"name": "model", "type": "MODEL", "link": 1}],
        "outputs": [{"name": "MODEL", "type": "MODEL", "links": [7], "slot_index": 0}],
        "widgets_values": [1, False]})
    workflow["links"] = [[1, 1, 0, 8, 0, "MODEL"], [7, 8, 0, CACHE_NODE_ID, 0, "MODEL"]] + [
        link for link in workflow["links"] if link[0] != 1]
    workflow["last_node_id"], workflow["last_link_id"] = 8, 7
    return workflow


def test_the_node_shows_its_devices_after_a_two_device_run(browser_tools, editor_server, tmp_path):
    workflow = two_device_workflow(seed=random.SystemRandom().randrange(1, 2**31))
    result = drive_editor(browser_tools, editor_server, workflow, tmp_path, "two_devices")
    [record] = editor_server.stats_for(result["queued_prompt_ids"]["A"][0], str(CACHE_NODE_ID))
    assert record["device_count"] == 2 and [d["device"] for d in record["devices"]] == ["cpu", "cpu:1"]
    live = result["live"]
    assert live["visible"] and live["fits"], "the panel with its devices line is cut off"
    assert live["cells"] == record["step_states"]
    assert "Devices: 2 (cpu, cpu:1)" in live["text"], live["text"]
    assert "CFG: split · separate CFG: off" in live["text"], live["text"]
    check_calls(live, record)   # both devices' calls, the step count from the busiest device of each step
    assert result["after_reload"]["text"] == live["text"]


def panel_strings(lang: str) -> dict:
    return json.loads((LOCALES / lang / "main.json").read_text(encoding="utf-8"))["krea2_cachedit"]["panel"]


def template_pattern(template: str) -> str:
    """A regex of a panel string, each ``{placeholder}`` a named group matching a number (a share ends in %)."""
    return re.sub(r"\\\{(\w+)\\\}", lambda m: rf"(?P<{m[1]}>[\d.]+%?)", re.escape(template))


def test_the_panel_speaks_the_editors_language(browser_tools, editor_server, tmp_path):
    """With the editor in zh, the panel reads in Chinese from locales/zh/main.json: empty before the run, then the
    run's own numbers live, after a reload and in Nodes 2.0."""
    zh = panel_strings("zh")
    workflow = ui_workflow(seed=random.SystemRandom().randrange(1, 2**31), cache=RUN_CACHE)
    editor_server.post("/settings/Comfy.Locale", "zh")
    try:
        result = drive_editor(browser_tools, editor_server, workflow, tmp_path, "zh")
    finally:
        # The other browser tests read the editor in English.
        editor_server.post("/settings/Comfy.Locale", "en")
    print(f"screenshot: {ARTIFACTS / 'zh' / 'browser_stats_node.png'}")
    [record] = editor_server.stats_for(result["queued_prompt_ids"]["A"][0], str(CACHE_NODE_ID))
    partial = zh["partial"].format(count=len(record.get("partial_steps"))) if record.get("partial_steps") else ""
    assert result["before_run"]["text"] == zh["empty"], result["before_run"]
    live = result["live"]
    assert live["visible"] and live["fits"], "the zh panel is cut off"
    assert live["cells"] == record["step_states"]
    text = live["text"]
    expected = [zh["cached_steps"].format(count=len(record["cached_steps"]), steps=STEPS, partial=partial),
                zh["calls_equal_cost"].format(full=record["full_calls"], calls=record["calls"],
                                              steps=record["equal_cost_steps"]),
                zh["cfg"].format(mode=record["cfg_mode"], separate=zh["on" if record["has_separate_cfg"] else "off"]),
                zh["calibrator"].format(calibrator="none"), f" {zh['states']['cached']} ", zh["chart_caption"],
                zh["suggestions_caption"]]
    missing = [line for line in expected if line not in text]
    assert not missing, f"zh strings not on the panel: {missing}\n{text}"
    # "节省的块计算：37.5%（运行 ...）": the share as the panel rounds it, the counts exactly.
    saved = re.search(template_pattern(zh["block_evals"]), text)
    assert saved, text
    assert abs(float(saved["share"].rstrip("%")) - 100 * record["blocks_saved"]) <= 0.051, text
    assert (int(saved["run"]), int(saved["uncached"])) == (record["block_evals"], record["block_evals_uncached"])
    suggestions = [re.fullmatch(template_pattern(zh["suggestion"]), shown) for shown in live["suggestions"]]
    assert suggestions and all(suggestions), live["suggestions"]
    # Each suggestion with the plain step count it would cost as much as, one of the record's.
    costs = {str(s["equal_cost_steps"]) for s in record["threshold_suggestions"]}
    assert all(shown["equal"] in costs for shown in suggestions), (live["suggestions"], costs)
    english = [line for line in ("Cached steps", "Block evals saved", "calls computed", "separate CFG",
                                 "Residual diff per step")
               if line in text]
    assert not english, f"English left on the zh panel: {english}\n{text}"
    assert live["time"] and live["time"].startswith(zh["time_saved"].split("{")[0]), live["time"]
    tooltip = live["marks"][0]["tooltip"]
    assert tooltip.startswith(zh["step"].format(step=0)), tooltip
    assert live["calls"]["tooltip"] == zh["calls_title"].format(steps=record["equal_cost_steps"]), live["calls"]
    assert result["after_reload"]["text"] == text
    assert result["nodes2"]["text"] == text and result["nodes2"]["fits"], result["nodes2"]
    assert (ARTIFACTS / "zh" / "browser_stats_node.png").stat().st_size > 5_000
