"""A model that ran through a node of the pack is freed once ComfyUI drops it (real server, every family).

Per case, one prompt runs with ``Krea2TestModelWatch`` just before the node: it loads the model as
the sampler will and takes, in the server process, a weak reference to the model and to every
module of its diffusion model (the transformer, its text path, its blocks: a superset of what the
run patches or hooks), with each module's own attributes. Then, read back over HTTP:
- right after the run: no module has an attribute or a hook the run left (what cache-dit leaves on
  a module after ``disable_cache`` included), and no module-level registry of the pack or of
  cache-dit reaches a ``torch.nn.Module`` or a ``torch.Tensor`` (a record's tensors included);
- after ``POST /free`` (unload the models, free the memory, as the editor's button does) and
  ``gc.collect()``: every watched object is gone, and the registries still reach nothing.
The cases: Krea-2 through ComfyUI's loader and the pack's (safetensors and GGUF), cached, caching
off, interrupted, with the text-path reuse on and off, under TorchCompileModel, after a LoRA, and
the Forecast node; each other family cached (those whose checkpoint is written on demand, ``FamilySpec.on_demand``,
on the graph their harness builds: LTXV's conditioning, MiniMax H3's latent split into video and
audio; Chroma at 2 steps, each of its calls being slow), Wan and MiniMax H3 under the Forecast node.
"""

from __future__ import annotations

import functools
import re
import time
import urllib.parse

import pytest
from safetensors.torch import save_file

from devkit.comfy_harness import WATCH_ROUTE, prompt_error
from devkit.comfy_models import make_lora
from family_harness import with_av_latent, with_ltxv_conditioning, with_separate_av
from devkit.family_prompts import FAMILIES, SHARED, family_prompt
from helpers import OFF
from krea2_gguf_files import write_krea2_gguf
from devkit.krea2_prompts import TINY_MODEL, with_forecast, with_lora
from devkit.krea2_synthetic import native_state_dict

pytestmark = pytest.mark.comfyui

WATCH = "40"
KREA2 = "krea2"
# Families with no case of their own, and the family whose case runs their class.
SAME_CLASS = {"hunyuan_image21": "hunyuan_video15"}
LORA = "krea2_release_lora.safetensors"
GGUF = "krea2_release-Q8_0.gguf"
PACK_LOADER = "Krea2DiffusersLoader"
PACK_FAMILY = "Krea-2 (diffusers)"   # the registry's name for a model of the pack's loader
FREE_TIMEOUT = 60.0   # seconds for the server's prompt worker to take the flags of POST /free (a busy machine is slow)
GONE_TIMEOUT = 5.0    # then for it to unload, reset its caches and so drop the model
STEPS = 4
INTERRUPTED_STEPS = 400
# Every step after the first cached (a threshold no change reaches): few steps, each cached one skips its blocks.
EVERY_STEP = {"residual_diff_threshold": 2.0, "max_warmup_steps": 1, "max_continuous_cached_steps": -1}


def watched(prompt: dict, label: str) -> dict:
    """The watch node "40" on the node's model input (right after the loader, LoRA or compile node)."""
    consumer = "5" if "5" in prompt else "6"
    prompt[WATCH] = {"class_type": "Krea2TestModelWatch",
                     "inputs": {"model": prompt[consumer]["inputs"]["model"], "label": label}}
    prompt[consumer]["inputs"]["model"] = [WATCH, 0]
    return prompt


def pack_loader(model: str) -> dict:
    return {"class_type": PACK_LOADER, "inputs": {"model_name": model, "weight_dtype": "default"}}


def without_text_reuse(prompt: dict) -> dict:
    """A pass-through ``model_function_wrapper`` after the node: the text path is computed on every call."""
    prompt["41"] = {"class_type": "Krea2TestModelFunctionWrapper", "inputs": {"model": ["5", 0]}}
    prompt["6"]["inputs"]["model"] = ["41", 0]
    return prompt


def with_compile(prompt: dict) -> dict:
    """ComfyUI's TorchCompileModel (inductor) between the loader and the node."""
    prompt["8"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["1", 0], "backend": "inductor"}}
    prompt["5"]["inputs"]["model"] = ["8", 0]
    return prompt


def interrupted(server, prompt: dict) -> tuple[str, dict]:
    """Runs ``prompt`` with 400 steps and interrupts it (POST /interrupt) once its sampling has begun."""
    prompt["6"]["inputs"]["steps"] = INTERRUPTED_STEPS
    log_offset = len(server.log_text())
    prompt_id = server.queue(prompt)
    progress = re.compile(rf"(\d+)/{INTERRUPTED_STEPS} \[")
    deadline = time.time() + 120
    while not any(int(n) >= 2 for n in progress.findall(server.log_text()[log_offset:])):
        assert time.time() < deadline, f"sampling did not begin\n{server.log_tail()}"
        time.sleep(0.1)
    server.post("/interrupt", {})
    return prompt_id, server.wait(prompt_id)


def graph(family: str, cache: dict | None = None, steps: int = STEPS, cfg: float = 3.5, **kwargs) -> dict:
    """The family's test graph with its cache node (``cache``: its inputs; every step after the first
    cached when None); at CFG 3.5 cond and uncond apart (two streams, two texts)."""
    return family_prompt(family, cache=EVERY_STEP if cache is None else cache, cfg=cfg, steps=steps,
                         neg_tokens=FAMILIES[family].split_tokens, **kwargs)


def spectrum(family: str) -> dict:
    return with_forecast(own_graph(family, cache={}, steps=8))   # its preset forecasts 3 of 8 steps


# What the graph of a family written on demand needs beyond ``family_prompt``'s, as its harness builds it.
OWN_GRAPH = {"ltxv": with_ltxv_conditioning, "minimax_h3": with_separate_av, "ltx2": with_av_latent}
# The session fixture whose server holds a family's checkpoint (``family_server`` when not here).
SERVERS = {KREA2: "comfy_server", "ltxv": "ltxv_server",
           "hunyuan_video15": "hunyuan_video15_server", "minimax_h3": "minimax_server", "ltx2": "ltx2_server",
           "ernie_image": "ernie_image_server"}


def own_graph(family: str, **kwargs) -> dict:
    adjust = OWN_GRAPH.get(family)
    built = graph(family, **kwargs)
    return adjust(built) if adjust else built


# case -> (family, the prompt, whether it is interrupted, whether steps are cached or forecast)
DIFFUSERS, GGUF_LOADER = pack_loader(TINY_MODEL), pack_loader(GGUF)
CASES = {
    "krea2 native cached": (KREA2, lambda: graph(KREA2), False, True),
    "krea2 native caching off": (KREA2, lambda: graph(KREA2, OFF), False, False),
    "krea2 native interrupted": (KREA2, lambda: graph(KREA2), True, True),
    "krea2 native text reuse off": (KREA2, lambda: without_text_reuse(graph(KREA2)), False, True),
    "krea2 native TorchCompileModel": (KREA2, lambda: with_compile(graph(KREA2)), False, True),
    "krea2 native after a LoRA": (KREA2, lambda: with_lora(graph(KREA2), LORA, 1.0, "lora_first"), False, True),
    "krea2 native Spectrum": (KREA2, lambda: spectrum(KREA2), False, True),
    "krea2 diffusers cached": (KREA2, lambda: graph(KREA2, loader=DIFFUSERS), False, True),
    "krea2 diffusers interrupted": (KREA2, lambda: graph(KREA2, loader=DIFFUSERS), True, True),
    "krea2 diffusers after a LoRA": (KREA2, lambda: with_lora(graph(KREA2, loader=DIFFUSERS), LORA, 1.0,
                                                              "lora_first"), False, True),
    "krea2 gguf cached": (KREA2, lambda: graph(KREA2, loader=GGUF_LOADER), False, True),
    # Every other family of the shared checks, in one stream (CFG 1).
    **{f"{family} cached": (family, functools.partial(graph, family, cfg=1.0), False, True)
       for family in SHARED if family != KREA2},
    "wan Spectrum": ("wan", lambda: spectrum("wan"), False, True),
    # The families written on demand (HunyuanImage 2.1 is HunyuanVideo 1.5's class), in one stream.
    **{f"{family} cached": (family, functools.partial(own_graph, family, cfg=1.0), False, True)
       for family, spec in FAMILIES.items() if spec.on_demand and family not in SAME_CLASS},
    # Spectrum's final-layer forecast on the one packed sequence both of MiniMax H3's outputs read, split CFG.
    "minimax_h3 Spectrum": ("minimax_h3", lambda: spectrum("minimax_h3"), False, True),
}


def test_every_family_has_a_case():
    covered = {family for family, *_ in CASES.values()}
    assert covered | set(SAME_CLASS) == set(FAMILIES) and set(SAME_CLASS.values()) <= covered, (
        "every family needs a cached case in CASES (tests/pack/test_model_release_comfyui.py)")


@pytest.fixture(scope="module")
def krea2_files(comfy_server, tiny_shape):
    """A LoRA on the session's tiny Krea-2, and the same weights as a GGUF."""
    root = comfy_server.base_dir / "models"
    save_file(make_lora(tiny_shape, native_names=True), str(root / "loras" / LORA))
    write_krea2_gguf(root / "diffusion_models" / GGUF, native_state_dict(tiny_shape, 0), "Q8_0")


@pytest.fixture
def server(request, comfy_root, case):
    family = CASES[case][0]
    if family == KREA2:
        request.getfixturevalue("krea2_files")
    return request.getfixturevalue(SERVERS.get(family, "family_server"))


def watch_report(server, label: str = "", collect: bool = False) -> dict:
    query = urllib.parse.urlencode({"label": label, "collect": "1" if collect else "0"})
    return server.get(f"{WATCH_ROUTE}?{query}")


def free_and_report(server, label: str) -> dict:
    """The watch's report after ``free``, once the model is gone or ``GONE_TIMEOUT`` has passed (the
    worker unloads and resets its caches right after it took the flags)."""
    server.free(FREE_TIMEOUT)
    deadline = time.time() + GONE_TIMEOUT
    while True:
        report = watch_report(server, label, collect=True)
        if not report["alive_count"] or time.time() > deadline:
            return report
        time.sleep(0.25)


def registry_problem(report: dict) -> str | None:
    if not report["complete"]:
        return f"the registry walk stopped after {report['visited']} objects"
    if report["holding_count"]:
        return f"module-level registries hold {report['holding_count']} module(s)/tensor(s): {report['holdings']}"
    return None


@pytest.mark.parametrize("case", list(CASES))
def test_a_model_that_ran_through_the_node_is_freed(server, case):
    family, build, interrupt, skips_steps = CASES[case]
    label = case.replace(" ", "_")
    server.free(FREE_TIMEOUT)   # nothing of an earlier prompt loaded or cached: the watched model is this prompt's own
    prompt = watched(build(), label)
    if interrupt:
        prompt_id, entry = interrupted(server, prompt)
        assert prompt_error(entry) is not None, "the prompt was not interrupted"
    else:
        prompt_id = server.queue(prompt)
        entry = server.wait(prompt_id)
        assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    [record] = server.stats_for(prompt_id, "5")
    assert record["model"] == (PACK_FAMILY if "diffusers" in case or "gguf" in case else FAMILIES[family].name)
    assert record["status"] == ("interrupted" if interrupt else "ok"), record
    assert bool(record["skipped_steps"]) == skips_steps, record["skipped_steps"]
    after_run = watch_report(server, label, collect=False)
    assert after_run["alive_count"] == after_run["watched"], "the model went before ComfyUI dropped it"
    assert not after_run["changed_count"], f"the run left attributes or hooks on modules: {after_run['changed']}"
    assert not any(after_run["global_hooks"].values()), f"global module hooks left: {after_run['global_hooks']}"
    assert registry_problem(after_run) is None, registry_problem(after_run)

    freed = free_and_report(server, label)
    assert not freed["alive_count"], (f"{freed['alive_count']} of {freed['watched']} watched objects still alive "
                                      f"{GONE_TIMEOUT:.0f}s after POST /free and gc.collect(): {freed['alive']}")
    assert registry_problem(freed) is None, registry_problem(freed)
