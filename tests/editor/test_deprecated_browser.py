"""The cache nodes' input labels, the node search and a saved workflow with the deprecated ``Krea2CacheDiT``, in the
real graph editor (headless Chromium) against the real ComfyUI server (issue 60).

One editor session (tests/browser/deprecated_node.mjs) reports three things, each checked by a test of its own:

- the labels: each of CacheDiTDBCache, Krea2CacheDiT and CacheDiTSpectrum placed on the canvas draws every input
  under its ``display_name`` from the server's ``/object_info`` (the raw id only where it has none); in the
  Nodes 2.0 renderer too, where the inputs marked ``advanced`` show only once the node's "Show advanced inputs"
  button is clicked;
- the search: a double click on the empty canvas and a typed query ("Cache-DiT", "Krea-2 Cache") find the DBCache
  node but not the deprecated Krea2CacheDiT, with the editor's "show deprecated nodes" setting at its default;
- a saved workflow with a Krea2CacheDiT node opens without a missing-node error, keeps its settings, and queued from
  the editor runs to the end with the node's stats recorded for that very prompt.

Needs Chromium and ``npm ci`` in tests/browser (``tests/browser/setup.sh``).
"""

from __future__ import annotations

import json
import os
import random
import subprocess

import pytest

from browser_harness import ARTIFACTS, BROWSER_DIR, quiet_first_run
from devkit.comfy_harness import prompt_error
from test_browser import CACHE_NODE_ID, RUN_CACHE, STEPS, ui_workflow

pytestmark = pytest.mark.tier("browser")

DEPRECATED = "Krea2CacheDiT"
GENERAL = "CacheDiTDBCache"
FORECAST = "CacheDiTSpectrum"
NODES = [GENERAL, DEPRECATED, FORECAST]
QUERIES = ["Cache-DiT", "Krea-2 Cache"]
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
OUT = ARTIFACTS / "deprecated"


def labelled_inputs(info: dict) -> dict[str, dict]:
    """Every input of an ``/object_info`` entry under the name the editor gives its widget or socket (an input that a
    dynamic combo shows is ``<combo>.<input>``): {name: {"id", "display_name", "advanced", "top"}}."""
    found = {}

    def walk(inputs: dict, prefix: str = ""):
        for section in ("required", "optional"):
            for name, spec in (inputs.get(section) or {}).items():
                options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
                found.setdefault(prefix + name, {"id": name, "display_name": options.get("display_name"),
                                                 "advanced": bool(options.get("advanced")), "top": not prefix})
                if spec[0] == DYNAMIC_COMBO:
                    for option in options.get("options", []):
                        walk(option.get("inputs") or {}, f"{prefix}{name}.")

    walk(info["input"])
    return found


def dynamic_hint(names) -> str:
    """Why an input a dynamic combo shows may carry its id: the frontend (1.49) labels those by their id, or by the
    locale's name for them, and never by their display_name."""
    nested = sorted(name for name in names if "." in name)
    if not nested:
        return ""
    keys = ", ".join(name.replace(".", "_") for name in nested)
    return (f"\n(inputs a dynamic combo shows are labelled by the editor's locale, nodeDefs.<node>.inputs.<key>.name, "
            f"else by their id: the frontend drops their display_name; keys: {keys})")


@pytest.fixture(scope="module")
def object_info(editor_server) -> dict:
    return {node: editor_server.get(f"/object_info/{node}")[node] for node in NODES}


@pytest.fixture(scope="module")
def saved_workflow() -> dict:
    """A workflow as the editor saved it, its Krea2CacheDiT node with every widget value written out (one changed
    from its default: the run must use the saved value); a seed new to the server, so the KSampler samples."""
    return ui_workflow(seed=random.SystemRandom().randrange(1, 2**31), cache=RUN_CACHE, node_type=DEPRECATED)


@pytest.fixture(scope="module")
def editor(browser_tools, editor_server, saved_workflow) -> dict:
    """What the editor showed (tests/browser/deprecated_node.mjs's result), after checking the driver ran cleanly."""
    node, chromium = browser_tools
    quiet_first_run(editor_server)
    OUT.mkdir(parents=True, exist_ok=True)
    request = {"nodes": NODES, "widgets": {FORECAST: {"preset": "custom"}}, "queries": QUERIES,
               "workflow": saved_workflow, "node_id": CACHE_NODE_ID, "result": "result.json"}
    request_path = OUT / "request.json"
    request_path.write_text(json.dumps(request))
    (OUT / "result.json").unlink(missing_ok=True)
    try:
        driver = subprocess.run([node, str(BROWSER_DIR / "deprecated_node.mjs"), editor_server.url, str(request_path),
                                 str(OUT)], check=False, cwd=BROWSER_DIR, env=dict(os.environ, CHROMIUM_PATH=chromium),
                                capture_output=True, text=True, timeout=900)
    finally:
        # The other browser tests open the classic canvas (the driver's last step is in Nodes 2.0).
        editor_server.post("/settings/Comfy.VueNodes.Enabled", False)
    result = json.loads((OUT / "result.json").read_text()) if (OUT / "result.json").exists() else {}
    print(f"screenshots in {OUT}  (frontend {result.get('frontend_version')})")
    assert driver.returncode == 0 and "error" not in result, (
        f"browser driver failed: {result.get('error')}\nfailed requests: {result.get('failed_requests')}\n"
        f"{driver.stdout[-3000:]}\n{driver.stderr[-3000:]}\nserver log:\n{editor_server.log_tail()}")
    assert not result["console_errors"], result["console_errors"]
    ours = [r for r in result["failed_requests"] if "krea2" in r or "cachedit" in r.lower()]
    assert not ours, ours
    return result


def test_the_cache_nodes_show_their_inputs_display_names(editor, object_info):
    renamed = {name: item["display_name"] for name, item in labelled_inputs(object_info[GENERAL]).items()
               if item["display_name"] and item["display_name"] != item["id"]}
    assert renamed, f"no input of {GENERAL} has a display name other than its id in /object_info: nothing to show"
    placed = {node["type"]: node for node in editor["nodes"]}
    assert sorted(placed) == sorted(NODES), editor["nodes"]
    for node_type in NODES:
        expected = labelled_inputs(object_info[node_type])
        widgets = {w["name"]: w for w in placed[node_type]["widgets"]}
        sockets = {s["name"]: s for s in placed[node_type]["sockets"]}
        shown = {**{name: s["drawn_label"] for name, s in sockets.items()},
                 **{name: w["drawn_label"] for name, w in widgets.items()}}
        # Every input the node has from the start is on the node (those a dynamic combo shows: the chosen option's).
        missing = [name for name, item in expected.items() if item["top"] and name not in shown]
        assert not missing, f"{node_type}: inputs not on the placed node: {missing} (it shows {sorted(shown)})"
        wrong = {name: {"shown": shown[name], "display_name": item["display_name"]} for name, item in expected.items()
                 if name in shown and shown[name] != (item["display_name"] or item["id"])}
        assert not wrong, (f"{node_type}: inputs not labelled with their display name from /object_info: {wrong}"
                           f"{dynamic_hint(wrong)}")
        # The advanced flag reaches each widget (the classic canvas of this frontend draws them all the same).
        flags = {name: w["advanced"] for name, w in widgets.items() if name in expected}
        assert flags == {name: expected[name]["advanced"] for name in flags}, f"{node_type}: advanced flags {flags}"


def test_nodes_2_shows_the_display_names_and_the_advanced_inputs_behind_their_toggle(editor, object_info):
    """In the DOM-based Nodes 2.0 renderer each widget row starts with its label: the advanced inputs' rows appear
    only after a click on the node's "Show advanced inputs" button."""
    shown = {node["type"]: node for node in editor["nodes2"]}
    assert sorted(shown) == sorted(NODES), editor["nodes2"]
    for node_type in NODES:
        classic = next(node for node in editor["nodes"] if node["type"] == node_type)
        expected = {name: item for name, item in labelled_inputs(object_info[node_type]).items()
                    if name in {w["name"] for w in classic["widgets"]}}
        label = {name: item["display_name"] or item["id"] for name, item in expected.items()}
        before = [row.split("\n")[0] for row in shown[node_type]["before"]["rows"]]
        plain = [label[name] for name, item in expected.items() if not item["advanced"]]
        advanced = [label[name] for name, item in expected.items() if item["advanced"]]
        assert [text for text in before if text in label.values()] == plain, (
            f"{node_type}: Nodes 2.0 rows before the advanced toggle {before}, expected the labels {plain}"
            f"{dynamic_hint(name for name in label if label[name] not in before)}")
        if not advanced:
            assert "after" not in shown[node_type], f"{node_type} has no advanced input but a toggle for them"
            continue
        assert "after" in shown[node_type], f"{node_type}: no 'Show advanced inputs' button: {shown[node_type]}"
        after = [row.split("\n")[0] for row in shown[node_type]["after"]["rows"]]
        assert [text for text in after if text in label.values()] == list(label.values()), (
            f"{node_type}: Nodes 2.0 rows with the advanced inputs shown {after}, expected the labels "
            f"{list(label.values())}")


def test_the_node_search_finds_the_dbcache_node_but_not_the_deprecated_one(editor, object_info):
    assert object_info[DEPRECATED].get("deprecated") is True, (
        f"/object_info does not mark {DEPRECATED} deprecated: {object_info[DEPRECATED].get('deprecated')!r}")
    assert not object_info[GENERAL].get("deprecated"), f"{GENERAL} is marked deprecated"
    # The test leaves the editor's "Show deprecated nodes in search" at its default (off).
    assert editor["show_deprecated_setting"] is not True, editor["show_deprecated_setting"]
    defs = editor["node_defs"]
    assert defs is not None, "could not read the editor's node definitions"
    assert defs[DEPRECATED] == {"known": True, "deprecated": True, "in_search": False}, defs
    assert defs[GENERAL]["in_search"] and not defs[GENERAL]["deprecated"], defs

    general, deprecated = object_info[GENERAL]["display_name"], object_info[DEPRECATED]["display_name"]
    searches = {search["query"]: search for search in editor["searches"]}
    assert sorted(searches) == sorted(QUERIES), editor["searches"]
    for query, search in searches.items():
        assert search["typed"] == query, search
        assert deprecated not in search["names"], (
            f"the search box lists the deprecated {DEPRECATED} ({deprecated!r}) for {query!r}: {search['names']}")
    assert general in searches["Cache-DiT"]["names"], (
        f"the search box does not list {general!r} for 'Cache-DiT': {searches['Cache-DiT']['names']}")


def test_a_saved_workflow_with_the_deprecated_node_loads_and_runs(editor, editor_server, saved_workflow):
    saved = next(node for node in saved_workflow["nodes"] if node["id"] == CACHE_NODE_ID)
    loaded = editor["loaded"]
    assert loaded is not None, "the saved Krea2CacheDiT node is not in the loaded graph"
    assert (loaded["type"], loaded["comfy_class"], loaded["has_errors"]) == (DEPRECATED, DEPRECATED, False), (
        f"the node loaded as a missing node: {loaded}")
    assert loaded["widgets_values"] == saved["widgets_values"], "the node did not keep its saved settings"
    missing = [d for d in editor["dialogs"] if "missing" in d.lower() or DEPRECATED in d]
    assert not missing, f"a missing-node dialog opened: {missing}"
    assert not [w for w in editor["console_warnings"] if DEPRECATED in w], editor["console_warnings"]

    # Queued from the editor: one prompt, run to the end, the node's stats recorded for that prompt.
    assert len(editor["queued_prompt_ids"]) == 1 and editor["queued_prompt_ids"][0], editor["queued_prompt_ids"]
    prompt_id = editor["queued_prompt_ids"][0]
    assert {"type": "execution_success", "prompt_id": prompt_id} in editor["ended"], editor["ended"]
    entry = editor_server.wait(prompt_id)
    assert prompt_error(entry) is None, f"the prompt failed: {prompt_error(entry)}\n{editor_server.log_tail()}"
    [record] = editor_server.stats_for(prompt_id, str(CACHE_NODE_ID))
    assert (record["prompt_id"], record["node_id"]) == (prompt_id, str(CACHE_NODE_ID)), record
    assert record["steps"] == STEPS, record
    assert record["settings"]["residual_diff_threshold"] == RUN_CACHE["residual_diff_threshold"], record["settings"]
