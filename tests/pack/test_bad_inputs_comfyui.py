"""Every widget input of every node of the pack, sent every kind of bad JSON value, is refused at queue time.

The nodes and their widgets come from the real server's ``/object_info`` (what the editor reads), so a new
node or input is covered without a change here. Each bad value goes in a prompt that is valid otherwise;
POST /prompt must answer 400 before anything runs, with errors on that node alone, each naming the input,
none an exception, one saying what is expected, and the answer strict JSON. Then a valid prompt runs.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request

import pytest

from devkit.comfy_harness import PACK_DIR_NAME, strict_loads
from helpers import FAST, FAST_8_CACHED
from devkit.krea2_prompts import TINY_MODEL, krea2_prompt

pytestmark = pytest.mark.comfyui

PACK_MODULE = f"custom_nodes.{PACK_DIR_NAME}"
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
# Valid values the schema cannot give (the loader lists only the Krea-2 files it recognises at start-up).
VALID = {("Krea2DiffusersLoader", "model_name"): TINY_MODEL}

# Wrong JSON kinds, for every widget. A two-item list is a link in ComfyUI's API format: one to no node.
WRONG_KINDS = [("a string", "abc"), ("an empty string", ""), ("a list", [1]), ("a list of three", [1, 2, 3]),
               ("a link to no node", ["999999", 0]), ("an object", {"a": 1}), ("an object value", {"__value__": "x"}),
               ("true", True), ("false", False), ("null", None)]
NON_FINITE = [("NaN", math.nan), ("Infinity", math.inf), ("-Infinity", -math.inf), ("the string nan", "nan"),
              ("a huge integer", 10 ** 400), ("a huge float", 1e308)]


def bad_values(kind: str, options: dict) -> list[tuple[str, object]]:
    """(label, value) pairs that a widget of this kind and options must refuse."""
    if kind in ("INT", "FLOAT"):
        bounds = [(f"below min {options['min']}", options["min"] - 1)] if "min" in options else []
        bounds += [(f"above max {options['max']}", options["max"] + 1)] if "max" in options else []
        if kind == "FLOAT" and "min" in options:
            bounds.append(("just below min", options["min"] - 1e-6))
        return WRONG_KINDS + NON_FINITE + bounds
    if kind in ("COMBO", DYNAMIC_COMBO):
        return WRONG_KINDS + [("a value not offered", "not-an-option"), ("a number", 1), ("NaN", math.nan)]
    raise AssertionError(f"no bad values for a {kind} widget yet: add them to this test")


def widgets(inputs: dict) -> dict[str, tuple[str, dict]]:
    """The widget inputs of an /object_info ``input`` block: name -> (kind, options); links are left out."""
    found = {}
    for group in ("required", "optional"):
        for name, (kind, *rest) in inputs.get(group, {}).items():
            options = rest[0] if rest else {}
            if isinstance(kind, list):
                kind, options = "COMBO", {**options, "options": kind}
            if kind in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", DYNAMIC_COMBO):
                found[name] = (kind, options)
    return found


def valid_value(node: str, name: str, kind: str, options: dict):
    if (node, name) in VALID:
        return VALID[(node, name)]
    if "default" in options:
        return options["default"]
    if kind == "COMBO":
        return options["options"][0]
    if kind == DYNAMIC_COMBO:
        return options["options"][0]["key"]
    return options.get("min", 0)


def input_sets(node: str, info: dict):
    """(valid inputs, widgets checked with them): the node's widgets at valid values, and for each option of
    a dynamic combo that has inputs, that option chosen with its inputs (as ``<combo>.<input>``)."""
    plain = widgets(info["input"])
    base = {name: valid_value(node, name, *spec) for name, spec in plain.items()}
    yield base, plain
    for combo, (kind, options) in plain.items():
        if kind != DYNAMIC_COMBO:
            continue
        for option in options["options"]:
            inner = {f"{combo}.{name}": spec for name, spec in widgets(option["inputs"]).items()}
            if inner:
                values = {name: valid_value(node, name, *spec) for name, spec in inner.items()}
                yield {**base, combo: option["key"], **values}, inner


def host_prompt(node: str, info: dict, inputs: dict) -> tuple[dict, str]:
    """A valid Krea-2 prompt with the node in it (and its id): a loader in place of ComfyUI's, a MODEL patch
    before the sampler."""
    links = {name: spec[0] for group in ("required", "optional")
             for name, spec in info["input"].get(group, {}).items() if not isinstance(spec[0], list)
             and spec[0] not in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", DYNAMIC_COMBO)}
    if info["output"] == ["MODEL"] and links == {}:
        prompt = krea2_prompt(prefix="bad_input")
        prompt["1"] = {"class_type": node, "inputs": inputs}
        return prompt, "1"
    if info["output"] == ["MODEL"] and links == {"model": "MODEL"}:
        prompt = krea2_prompt(cache={}, prefix="bad_input")
        prompt["5"] = {"class_type": node, "inputs": {"model": ["1", 0], **inputs}}
        return prompt, "5"
    raise AssertionError(f"{node}: no host graph for a node with inputs {links} and outputs {info['output']}")


def post_prompt(server, prompt: dict) -> tuple[int, str]:
    body = json.dumps({"prompt": prompt, "client_id": server.client_id}).encode()   # NaN, Infinity bare
    request = urllib.request.Request(server.url + "/prompt", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def refusal_problem(status: int, text: str, node_id: str, name: str) -> str | None:
    """What is wrong with the server's answer to a prompt with a bad ``name``, or None when it is right."""
    if status != 400:
        return f"answered {status}: {text[:300]}"
    try:
        answer = strict_loads(text)
    except ValueError as error:
        return f"the refusal is not strict JSON ({error}): {text[:300]}"
    if list(answer.get("node_errors", {})) != [node_id]:
        return f"errors on nodes {list(answer.get('node_errors', {}))}, not on node {node_id} alone: {text[:600]}"
    errors = answer["node_errors"][node_id]["errors"]
    short = name.rsplit(".", 1)[-1]
    for error in errors:
        if error["type"].startswith("exception"):
            return f"an exception instead of a refusal: {error['type']}: {error['details'][:300]}"
        if short not in error["details"]:
            return f"an error that does not name {name}: {error['type']}: {error['details'][:300]}"
    # Says what is expected: the pack's "<name> must be ..." or ComfyUI's own check of that very input.
    if not any(f"{short} must be" in e["details"] or (e["extra_info"].get("input_name") == name and e["type"] in (
            "value_not_in_list", "invalid_input_type", "value_smaller_than_min", "value_bigger_than_max"))
            for e in errors):
        return f"no error says what {name} expects: {[e['details'][:200] for e in errors]}"
    return None


def test_every_widget_of_every_node_refuses_every_bad_value_by_name(comfy_server):
    pack = {node: info for node, info in comfy_server.get("/object_info").items()
            if info.get("python_module") == PACK_MODULE}
    assert {"Krea2CacheDiT", "CacheDiTDBCache", "CacheDiTSpectrum", "Krea2DiffusersLoader",
            "Krea2CompareImages"} <= set(pack), sorted(pack)
    failures, cases, covered = [], 0, set()
    for node, info in sorted(pack.items()):
        for valid, checked in input_sets(node, info):
            for name, (kind, options) in checked.items():
                for label, value in bad_values(kind, options):
                    prompt, node_id = host_prompt(node, info, {**valid, name: value})
                    problem = refusal_problem(*post_prompt(comfy_server, prompt), node_id, name)
                    cases += 1
                    covered.add((node, name))
                    if problem:
                        failures.append(f"{node}.{name} = {label} ({value!r:.40}): {problem}")
    print(f"{cases} (node, input, bad value) cases over {len(covered)} inputs of {len(pack)} nodes")
    assert not failures, f"{len(failures)} of {cases} bad values not refused by name:\n" + "\n".join(failures[:40])
    # Every widget of every node was tried (a node without widgets, such as the compare node, has none).
    expected = {(node, name) for node, info in pack.items() for _, checked in input_sets(node, info) for name in checked}
    assert covered == expected and cases > 400, (cases, expected - covered)

    # None was queued (each answer was a 400), and the next valid prompt runs and caches as usual.
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(cache=FAST, prefix="after_bad_inputs"))
    assert stats["status"] == "ok" and stats["cached_steps"] == FAST_8_CACHED
