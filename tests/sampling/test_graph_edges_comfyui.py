"""Inputs no editor would send and graphs a user can still build, on the real ComfyUI server: non-finite
numbers that reach a run (null in every route, event and history output), a NaN image on the compare
node, two Cache-DiT nodes in a row, and samplers whose steps the node has to work out."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
import uuid

import pytest

from devkit.comfy_harness import STATS_ROUTE, prompt_error, strict_loads
from compare_prompts import compare_prompt, saved_pngs
from helpers import FAST, FAST_8_CACHED
from devkit.krea2_prompts import guided_prompt, krea2_prompt
from stats_events import queue_and_listen, stats_events

pytestmark = pytest.mark.comfyui


def strict_get(server, path: str):
    with urllib.request.urlopen(server.url + path, timeout=30) as response:
        return strict_loads(response.read())


# --- non-finite numbers ----------------------------------------------------------------

def test_non_finite_numbers_reach_route_event_and_editor_as_null(comfy_server):
    """A NaN CFG (ComfyUI lets it through) makes NaN latents, residual changes and a NaN cfg in the record."""
    body = {"prompt": krea2_prompt(cfg=float("nan"), cache={}, seed=21, prefix="nan_cfg"), "client_id": "$CLIENT_A"}
    body = json.loads(json.dumps(body))  # the prompt itself may carry NaN (ComfyUI's own parser reads it)
    prompt_id, events, _ = asyncio.run(queue_and_listen(comfy_server.url, body))

    runs = [r for r in strict_get(comfy_server, STATS_ROUTE)["runs"] if r["prompt_id"] == prompt_id]
    assert len(runs) == 1, runs
    [record] = runs
    assert record["cfg"] is None and record["guidance"]["cfg"] is None
    assert any(d is None for d in record["residual_diffs"][1:])
    assert any("Non-finite numbers (NaN or infinity) were replaced by null in: cfg" in w for w in record["warnings"])
    [event] = stats_events(events)
    assert event == record


# --- compare node ----------------------------------------------------------------------

def test_compare_flags_non_finite_pixels_in_strict_json(comfy_server):
    prompt = compare_prompt((10, 32, 32, 1), (20, 32, 32, 1), f"nan_{uuid.uuid4().hex[:6]}")
    prompt["7"] = {"class_type": "Krea2TestNonFinitePixels", "inputs": {"image": ["2", 0], "pixels": 3}}
    prompt["3"]["inputs"]["candidate"] = ["7", 0]
    prompt_id = comfy_server.queue(prompt)
    entry = comfy_server.wait(prompt_id, timeout=120)
    assert prompt_error(entry) is None, prompt_error(entry)

    history = strict_get(comfy_server, f"/history/{prompt_id}")[prompt_id]
    shown = history["outputs"]["3"]
    [metrics] = shown["metrics"]
    assert (metrics["mae_255"], metrics["psnr_db"], metrics["nonfinite_pixels"]) == (None, None, 3)
    [text] = shown["text"]
    assert "PSNR n/a" in text and "100.00 dB" not in text and "(identical)" not in text
    assert "3 non-finite pixels" in text and "blue = non-finite" in text
    # The FLOAT outputs carry NaN (a broken image has no MAE), never the 100 dB cap.
    assert all(math.isnan(float(history["outputs"][node]["text"][0])) for node in ("4", "5"))
    [heatmap] = saved_pngs(comfy_server, entry, "6", "output")
    assert [heatmap.getpixel((x, 0)) for x in range(3)] == [(0, 0, 255)] * 3, "non-finite pixels are blue"
    assert heatmap.getpixel((3, 0)) == (255, 255, 255), "the finite pixels keep the hot scale (all 10 apart)"


# --- two Cache-DiT nodes in a row --------------------------------------------------------

def test_a_superseded_cache_node_says_so(comfy_server):
    prompt = krea2_prompt(cfg=3.5, cache=FAST, seed=23, prefix="chained")
    prompt["15"] = {**prompt["5"], "inputs": {**prompt["5"]["inputs"], "model": ["5", 0], "steps_mask": "medium"}}
    prompt["6"]["inputs"]["model"] = ["15", 0]
    _, runs = comfy_server.run_with_stats(prompt, node_id=None, runs=2)
    by_node = {r["node_id"]: r for r in runs}

    first, last = by_node["5"], by_node["15"]
    assert first["status"] == "skipped" and first["cached_steps"] == [] and first["cfg_mode"] is None
    assert "Krea-2 Cache-DiT node 15 after this one on the same model replaces this node's settings" \
        in first["warnings"][0]
    assert last["status"] == "ok" and last["cached_steps"] == [4, 6], "the last node's 'medium' mask applies"
    assert any("replaces the settings of the Krea-2 Cache-DiT node(s) 5" in w for w in last["warnings"])


# --- samplers whose steps the node works out ------------------------------------------------

def sampled_with(kind: str, seed: int, s_churn: float = 1.0) -> dict:
    guider = {"class_type": "CFGGuider", "inputs": {"positive": ["2", 0], "negative": ["3", 0], "cfg": 1.0}}
    prompt = guided_prompt(guider, cache=FAST, seed=seed, prefix=f"sampler_{kind}")
    prompt["12"] = {"class_type": "Krea2TestSampler", "inputs": {"kind": kind, "s_churn": s_churn}}
    return prompt


def test_churn_is_attributed_to_its_steps(comfy_server):
    _, [record] = comfy_server.run_with_stats(sampled_with("euler_churn", seed=24, s_churn=4.0))
    assert [call[0] for call in record["call_log"]] == list(range(8)), record["call_log"]
    sigmas = record["sigmas"]
    assert all(call[4] > sigmas[call[0]] for call in record["call_log"][:-1]), "churn lifts each step's sigma"
    assert (record["extra_calls"], record["cache_contexts"]) == (0, 1)
    assert record["cached_steps"] == FAST_8_CACHED and record["warnings"] == []


def test_a_sampler_without_step_reports_is_flagged(comfy_server):
    _, [record] = comfy_server.run_with_stats(sampled_with("euler_silent", seed=25))
    assert any("The sampler never reported its steps: from step 2 on, steps were matched by the sigma" in w
               for w in record["warnings"]), record["warnings"]


def test_an_unknown_corrector_sampler_is_flagged(comfy_server):
    _, [record] = comfy_server.run_with_stats(sampled_with("heun_renamed", seed=26))
    assert any("is not a known corrector sampler: learnt at step 0" in w for w in record["warnings"]), \
        record["warnings"]
