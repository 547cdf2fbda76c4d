"""torch.compile with the cache (real server, inductor on the CPU).

ComfyUI's TorchCompileModel compiles the whole diffusion model, before or after the
Cache-DiT node in the graph; advanced compile nodes compile each transformer block
(``set_torch_compile_wrapper`` with keys ``diffusion_model.blocks.{i}``). Each must
cache the same steps and evaluate the same blocks as without compile, match the
uncompiled result closely, compile once (no recompiles from the cache's per-step
decisions in later runs), and leave a compiled model without the node working.
"""

from __future__ import annotations

import json

import pytest
import torch

from devkit.comfy_harness import COMPILE_ROUTE, prompt_error
from helpers import FAST, FAST_8_CACHED
from devkit.krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

COMPILERS = {"whole_model": "TorchCompileModel", "per_block": "Krea2TestCompileBlocks"}


def compiled_prompt(compiler: str, place: str, cache: dict | None, seed: int, prefix: str,
                    attention_log=None) -> dict:
    """The test graph with a compile node "20" before ("before") or after ("after") the Cache-DiT node."""
    prompt = krea2_prompt(cache=cache, seed=seed, prefix=prefix)
    prompt["20"] = {"class_type": COMPILERS[compiler], "inputs": {"backend": "inductor"}}
    upstream = "1"
    if attention_log is not None:
        prompt["22"] = {"class_type": "Krea2TestAttentionProbe", "inputs": {
            "model": ["1", 0], "log_path": str(attention_log), "scale_block": -1, "scale": 1.0}}
        upstream = "22"
    if cache is None:
        prompt["20"]["inputs"]["model"] = [upstream, 0]
        prompt["6"]["inputs"]["model"] = ["20", 0]
    elif place == "before":
        prompt["20"]["inputs"]["model"] = [upstream, 0]
        prompt["5"]["inputs"]["model"] = ["20", 0]
    else:
        prompt["5"]["inputs"]["model"] = [upstream, 0]
        prompt["20"]["inputs"]["model"] = ["5", 0]
        prompt["6"]["inputs"]["model"] = ["20", 0]
    return prompt


def run(server, prompt) -> tuple[torch.Tensor, dict | None, dict]:
    """Latent, this prompt's stats record (None without the node) and dynamo's counters after it."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id, timeout=900)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    runs = [r for r in server.get("/krea2_cachedit/stats")["runs"] if r["prompt_id"] == prompt_id]
    counters = server.get(COMPILE_ROUTE)  # cumulative in the server process
    return server.saved_latent(entry, "7"), (runs[0] if runs else None), counters


def relative_error(a, b) -> float:
    return float((a - b).norm() / b.norm())


@pytest.fixture(scope="module")
def uncompiled(comfy_server):
    """The uncompiled references: cached with mask fast, and without the node."""
    cached, record, _ = run(comfy_server, krea2_prompt(cache=FAST, seed=61, prefix="eager_cached"))
    plain, _, _ = run(comfy_server, krea2_prompt(seed=61, prefix="eager_plain"))
    return cached, record, plain


@pytest.mark.parametrize("compiler, place", [("whole_model", "before"), ("whole_model", "after"),
                                             ("per_block", "before")])
def test_compiled_and_cached_matches_the_uncached_compile_free_run(comfy_server, uncompiled, compiler, place):
    eager_cached, eager_record, eager_plain = uncompiled
    latents, records, counts = [], [], []
    for seed in (61, 63):  # another seed, so ComfyUI samples again; it must reuse the first run's graphs
        latent, record, counters = run(comfy_server, compiled_prompt(compiler, place, FAST, seed=seed,
                                                                     prefix=f"{compiler}_{place}_{seed}"))
        latents.append(latent), records.append(record), counts.append(counters)
    for record in records:
        assert record["cached_steps"] == eager_record["cached_steps"] == FAST_8_CACHED
        assert record["block_evals"] == eager_record["block_evals"]
        # The text path, computed eagerly once, reused by the compiled model's other calls.
        assert record["text_path"] == {"computed": 1, "reused": 7, "off": None}
    assert relative_error(latents[0], eager_cached) < 1e-3
    assert counts[1]["unique_graphs"] == counts[0]["unique_graphs"], "a second cached run compiles nothing new"
    assert counts[1]["recompiles"] == counts[0]["recompiles"]
    # And the same compiled model without the node afterwards: it runs, uncached, as compiled.
    plain, no_record, _ = run(comfy_server, compiled_prompt(compiler, place, None, seed=61,
                                                            prefix=f"{compiler}_plain"))
    assert no_record is None
    assert relative_error(plain, eager_plain) < 1e-3


@pytest.fixture(scope="module")
def fresh_compile_server(comfy_root, tmp_path_factory, tiny_shape):
    """A server of its own: ComfyUI's compile node filters out the guards on transformer_options, so
    graphs compiled without attention patches would be reused with them (a ComfyUI limitation, with
    or without this node); patches must be there when the model is first compiled."""
    from devkit.comfy_harness import ComfyServer
    from devkit.krea2_synthetic import save_native_checkpoint

    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("compile_base"))
    save_native_checkpoint(base / "models" / "diffusion_models" / "krea2_tiny.safetensors", tiny_shape, seed=0)
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def test_attention_patches_keep_their_block_indices_under_compile(fresh_compile_server, tmp_path):
    log = tmp_path / "compiled_attention.jsonl"
    _, record, _ = run(fresh_compile_server, compiled_prompt("whole_model", "before", {**FAST, "Bn_compute_blocks": 1},
                                                     seed=62, prefix="compiled_probe", attention_log=log))
    seen: dict[int, list] = {}
    call = -1
    for line in log.read_text().splitlines():
        event = json.loads(line)
        if event["kind"] != "attn1_patch":
            continue
        if event["block_index"] == 0:
            call += 1
        seen.setdefault(call, []).append((event["block_index"], event["total_blocks"]))
    every_block = [(i, 4) for i in range(4)]
    assert [seen[step] for step in range(8)] == [
        [(0, 4), (3, 4)] if step in record["cached_steps"] else every_block for step in range(8)]
