"""One step cache per model: with ComfyUI's EasyCache or LazyCache on the same model, in either order,
the Krea-2 Cache-DiT node steps aside (status "skipped", a warning naming the other node) and the image
is exactly the other cache's alone."""

from __future__ import annotations

import pytest
import torch

from devkit.krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

OTHER_NODE_ID = "14"
# A reuse threshold at which both skip steps of the tiny model (so "the same image" is a real check).
OTHER_INPUTS = {"reuse_threshold": 1.5, "start_percent": 0.15, "end_percent": 0.95, "verbose": False}
CFG_MODES = {"cfg1": dict(cfg=1.0), "batched": dict(cfg=3.5), "split": dict(cfg=3.5, neg_tokens=13)}


def with_other_cache(prompt: dict, other: str, order: str) -> dict:
    """Put ``other`` (EasyCache / LazyCache) before or after the Cache-DiT node "5" (or alone when it is absent)."""
    model_in = prompt["5"]["inputs"]["model"] if "5" in prompt else prompt["6"]["inputs"]["model"]
    prompt[OTHER_NODE_ID] = {"class_type": other, "inputs": {"model": model_in, **OTHER_INPUTS}}
    if "5" not in prompt:
        prompt["6"]["inputs"]["model"] = [OTHER_NODE_ID, 0]
    elif order == "before":     # loader -> other -> Cache-DiT -> KSampler
        prompt["5"]["inputs"]["model"] = [OTHER_NODE_ID, 0]
    else:                       # loader -> Cache-DiT -> other -> KSampler
        prompt[OTHER_NODE_ID]["inputs"]["model"] = ["5", 0]
        prompt["6"]["inputs"]["model"] = [OTHER_NODE_ID, 0]
    return prompt


@pytest.fixture(scope="module")
def other_alone(comfy_server):
    """The latent of each (other cache, CFG mode) graph without the Cache-DiT node, and what it logged."""
    latents = {}

    def latent(other: str, mode: str):
        if (other, mode) not in latents:
            log_start = len(comfy_server.log_text())
            prompt = with_other_cache(krea2_prompt(**CFG_MODES[mode], seed=40, prefix=f"alone_{other}"), other, "")
            entry = comfy_server.run(prompt)
            assert entry["status"]["status_str"] == "success", comfy_server.log_tail()
            skipped = comfy_server.log_text()[log_start:]
            latents[other, mode] = comfy_server.saved_latent(entry, "7"), skipped
        return latents[other, mode]
    return latent


@pytest.mark.parametrize("mode", list(CFG_MODES))
@pytest.mark.parametrize("order", ["before", "after"])
@pytest.mark.parametrize("other", ["EasyCache", "LazyCache"])
def test_another_step_cache_on_the_model_leaves_the_run_to_it(comfy_server, other_alone, other, order, mode):
    alone, alone_log = other_alone(other, mode)
    assert f"{other} - skipped" in alone_log and f"{other} - skipped 0/" not in alone_log, \
        f"{other} must skip steps on its own for this check to mean anything:\n{alone_log[-2000:]}"
    prompt = with_other_cache(krea2_prompt(**CFG_MODES[mode], cache={"steps_mask": "fast"}, seed=40,
                                           prefix=f"both_{other}_{order}"), other, order)
    log_start = len(comfy_server.log_text())
    entry, [record] = comfy_server.run_with_stats(prompt)

    assert record["status"] == "skipped", record
    assert (record["cached_steps"], record["calls"], record["cfg_mode"]) == ([], 0, None)
    # The other cache skipped steps of its own: no count of calls, no step count to compare with.
    assert (record["full_calls"], record["equal_cost_steps"]) == (None, None), record
    [warning] = record["warnings"]
    assert other in warning and f"bypass {other} or this node" in warning
    assert warning in comfy_server.log_text()[log_start:], "the warning is in the log too"
    both = comfy_server.saved_latent(entry, "7")
    assert torch.equal(both, alone), f"with {other} {order} the node, the image must be {other}'s alone"
