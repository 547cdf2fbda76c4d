"""The node with the rest of ComfyUI (real server): model patches that use block indices,
LoRAs before or after it, fp8 weights, and edit (reference latent) conditioning.

Each check compares against the same graph without the node, or without the patch,
LoRA or reference, as its reference.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import torch

from comfy_harness import prompt_error
from krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

FAST = {"steps_mask": "fast"}
FAST_8_CACHED = [3, 5, 6]
OFF = {"residual_diff_threshold": 0.0}
TINY_BLOCKS = 4


def run(server, prompt, node_id="5"):
    """The latent a prompt saved and the stats record it published for ``node_id`` (None when the
    prompt has no such node; a prompt with the node must have published its own record)."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    record = server.stats_for(prompt_id, node_id)[0] if node_id in prompt else None
    return server.saved_latent(entry, "7"), record


# --- model patches that use block indices ----------------------------------------------------

def with_probe(prompt: dict, log_path, scale_block=-1, scale=1.0) -> dict:
    """Krea2TestAttentionProbe right after the loader (before the Cache-DiT node, if any)."""
    prompt["20"] = {"class_type": "Krea2TestAttentionProbe", "inputs": {
        "model": ["1", 0], "log_path": str(log_path), "scale_block": scale_block, "scale": scale}}
    consumer = "5" if "5" in prompt else "6"
    prompt[consumer]["inputs"]["model"] = ["20", 0]
    return prompt


def seen_by_patches(log_path) -> dict[str, list]:
    """Per patch kind: for each model call (in order), the (block_index, total_blocks) it saw."""
    calls: dict[str, list] = defaultdict(list)
    last_sigma: dict[str, float] = {}
    for line in log_path.read_text().splitlines():
        event = json.loads(line)
        kind = event["kind"]
        if event["block_index"] == 0 or kind not in last_sigma or event["sigma"] != last_sigma[kind]:
            calls[kind].append([])
        last_sigma[kind] = event["sigma"]
        calls[kind][-1].append((event["block_index"], event["total_blocks"]))
    return calls


def test_patches_see_each_blocks_true_index_on_computed_and_cached_steps(comfy_server, tmp_path):
    plain_log, cached_log = tmp_path / "plain.jsonl", tmp_path / "cached.jsonl"
    run(comfy_server, with_probe(krea2_prompt(seed=31), plain_log))
    _, record = run(comfy_server, with_probe(krea2_prompt(cache={**FAST, "Bn_compute_blocks": 1}, seed=31),
                                             cached_log))
    assert record["cached_steps"] == FAST_8_CACHED
    every_block = [(i, TINY_BLOCKS) for i in range(TINY_BLOCKS)]
    plain, cached = seen_by_patches(plain_log), seen_by_patches(cached_log)
    for kind in ("attn1_patch", "attn1_output_patch"):
        assert plain[kind] == [every_block] * 8, kind
        # Computed steps run every block; cached ones the first (Fn 1) and last (Bn 1), under their own index.
        expected = [[(0, TINY_BLOCKS), (TINY_BLOCKS - 1, TINY_BLOCKS)] if step in FAST_8_CACHED else every_block
                    for step in range(8)]
        assert cached[kind] == expected, kind


def test_a_patch_on_a_chosen_block_acts_on_that_block(comfy_server, tmp_path):
    """With caching off, a patch scaling block 2's attention gives the image it gives without the node."""
    without, _ = run(comfy_server, with_probe(krea2_prompt(seed=32, prefix="scaled"), tmp_path / "a.jsonl", 2, 0.5))
    with_node, _ = run(comfy_server, with_probe(krea2_prompt(cache=OFF, seed=32, prefix="scaled_node"),
                                                tmp_path / "b.jsonl", 2, 0.5))
    unscaled, _ = run(comfy_server, with_probe(krea2_prompt(cache=OFF, seed=32, prefix="unscaled"),
                                               tmp_path / "c.jsonl"))
    assert torch.equal(with_node, without)
    assert not torch.equal(with_node, unscaled), "the patch must change the image, or the check says nothing"
