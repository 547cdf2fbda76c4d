"""How the family scenario set (tests/families/test_family_scenarios_comfyui.py) drives each family: its server, how
its graph is built and read, and which scenarios apply to it.

The families differ only in how their graph is built (LTXV's conditioning node, LTX-2's and MiniMax H3's audio
and video latents), what a run gives back (one latent, or video and audio), and what their loops allow (MiniMax
H3 never batches its conds, LTX-2 has nothing single for Spectrum to forecast, Qwen-Image's LoRAs name its
modules without a prefix). A ``FamilyHarness`` says that as data; each scenario runs on every harness that has
its capability, and checks every output of the run. What a family's loop makes its own stays in its own file
(tests/families/test_families_<family>_comfyui.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from devkit.comfy_harness import ComfyServer
from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, FAST_8_CACHED, insert_after_loader, outputs_and_record

MASKS = {4: [2], 8: FAST_8_CACHED}   # cache-dit's "fast" mask: 4 steps 1 1 0 1; 8 steps 1 1 1 0 1 0 0 1
LAYOUTS = ("none", "batched", "split")   # CFG 1, cond and uncond batched, apart


# --- graph builders (the family's own nodes around ``family_prompt``'s graph) ----------------------------

def with_ltxv_conditioning(graph: dict, frame_rate: float = 25.0) -> dict:
    """ComfyUI's ``LTXVConditioning`` ("9") between the conditioning (with its attention mask: ``family_prompt``
    adds it) and the sampler."""
    graph["9"] = {"class_type": "LTXVConditioning",
                  "inputs": {"positive": ["2", 0], "negative": ["3", 0], "frame_rate": frame_rate}}
    graph["6"]["inputs"]["positive"], graph["6"]["inputs"]["negative"] = ["9", 0], ["9", 1]
    return graph


def with_separate_av(graph: dict) -> dict:
    """The sampled AV latent split by ComfyUI's ``LTXVSeparateAVLatent`` ("14"): the video latent saved by "7",
    the audio latent by "15"."""
    graph["14"] = {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["6", 0]}}
    graph["7"]["inputs"]["samples"] = ["14", 0]
    prefix = graph["7"]["inputs"]["filename_prefix"]
    graph["15"] = {"class_type": "SaveLatent", "inputs": {"samples": ["14", 1], "filename_prefix": f"{prefix}_audio"}}
    return graph


def with_av_latent(graph: dict) -> dict:
    """A family graph sampling an AV latent: the video latent "4" joined with an 8-frame audio latent ("16")
    by "17", the sampled latent split by "14": video saved by "7", audio by "15"."""
    graph["16"] = {"class_type": "Krea2TestEmptyAudioLatent", "inputs": {"length": 8}}
    graph["17"] = {"class_type": "LTXVConcatAVLatent", "inputs": {"video_latent": ["4", 0], "audio_latent": ["16", 0]}}
    graph["6"]["inputs"]["latent_image"] = ["17", 0]
    return with_separate_av(graph)


def as_built(graph: dict) -> dict:
    """``family_prompt``'s graph as it is (the graph the session's uncached runs share)."""
    return graph


# --- patches the block loop applies by index (a cached call would skip them: computed in full) --------------

@dataclasses.dataclass(frozen=True)
class Patch:
    name: str                        # the test id
    apply: Callable[[dict], dict]    # puts the patch into a graph
    named: str                       # what the record's warning names


def dit_replace(graph: dict) -> dict:
    """A ``patches_replace["dit"]`` entry ("double_block", 1) that the loop calls instead of block 1."""
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestBlockReplace",
                                             "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}})


def double_block_patch(graph: dict) -> dict:
    """A ``patches["double_block"]`` entry (a ControlNet's) that the loop runs after block 1."""
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestDoubleBlockPatch",
                                             "inputs": {"block": 1, "scale": 0.5}})


def single_block_replace(graph: dict) -> dict:
    """A ``patches_replace["dit"]`` entry ("single_block", 1): Flux's loop applies no ``double_block`` patch."""
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestBlockReplace",
                                             "inputs": {"kind": "single_block", "block": 1, "scale": 0.5}})


def stg_blocks(graph: dict) -> dict:
    """``stg_self_attn_blocks`` naming block 1, whose self-attention LTX-2's loop perturbs."""
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestTransformerOption",
                                             "inputs": {"key": "stg_self_attn_blocks", "blocks": "1"}})


def control(features: int) -> Callable[[dict], dict]:
    """A ControlNet's residual for block 1's image tokens (the model call's ``control``, ``features`` wide)."""
    def apply(graph: dict) -> dict:
        graph["21"] = {"class_type": "Krea2TestBlockControl",
                       "inputs": {"conditioning": ["2", 0], "block": 1, "features": features, "scale": 0.5}}
        graph["6"]["inputs"]["positive"] = ["21", 0]
        return graph
    return apply


DIT_REPLACE = Patch("dit_replace", dit_replace, "patches_replace.dit")
DOUBLE_BLOCK = Patch("double_block", double_block_patch, "patches.double_block")
SINGLE_BLOCK_REPLACE = Patch("single_block_replace", single_block_replace, "patches_replace.dit")


# --- the harness -------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Threshold:
    """Threshold caching's run: ``steps`` steps, the node's default 4 of them warmup; ``full``: first, threshold 2
    caches every step the limits allow."""
    steps: int = 8
    full: bool = False


@dataclasses.dataclass(frozen=True)
class Heun:
    """heun (two evaluations a step): ``cached``, the layout the mask is cached in (each step's first evaluation
    served, the other computed beside the cache); ``off``, the layout caching off is bit-identical to no node in
    (None: not run)."""
    cached: str | None
    off: str | None


@dataclasses.dataclass(frozen=True)
class FamilyHarness:
    family: str                                 # the ``FAMILIES`` key (its spec names its server's fixture)
    seed: int
    steps: int = 4                              # the sampler's steps (threshold and Spectrum: their own)
    build: Callable[[dict], dict] = as_built    # the family's own nodes around ``family_prompt``'s
    outputs: tuple[str, ...] = ("7",)           # the SaveLatent nodes a run gives back, in order
    shapes: tuple[tuple[int, ...], ...] = ()    # each output's shape (not checked when empty)
    timeout: float = 600.0                      # per prompt (TorchCompileModel's: 300 s more)
    # Capabilities: which scenarios apply, and how.
    layouts: tuple[str, ...] = LAYOUTS          # the CFG layouts ComfyUI gives it, each cached with the mask
    split_tokens: int | None = None             # the negative prompt's tokens in the split layout (None: the spec's)
    off_layouts: tuple[str, ...] = ("split",)   # caching off bit-identical to no node, in each of these layouts
    after_cached: bool = False                  # a cached run leaves the model as it was: the next plain run equal
    medium_mask: tuple[int, ...] = ()           # the steps cache-dit's "medium" mask caches (empty: not run)
    # At CFG 1, each block's attention seen with its true index, the cache running this many Bn blocks (None: no
    # probe; 0: the probe rides on the mask's run at CFG 1).
    attention_bn: int | None = None
    cfg1_error: float | None = None             # at CFG 1, the cached run within this relative error of no node
    threshold: Threshold | None = None
    easycache: bool = True                      # EasyCache on the same model leaves the run to it
    patches: tuple[Patch, ...] = ()             # patches applied by block index: calls computed in full
    heun: Heun | None = None
    lora_layers: tuple[str, ...] = ()           # a LoRA on these layers changes every output
    lora_prefix: str = "diffusion_model."       # how the LoRA file names them: ComfyUI's prefix, or the family's
    compile_tolerance: float | None = None      # TorchCompileModel before the node: relative error to eager
    compile_after: bool = False                 # and after the node
    two_devices: bool = False                   # split CFG over two device copies, the mask cached on both
    two_devices_off: bool = False               # and caching off there bit-identical to no node
    spectrum: tuple[str, ...] = ()              # the CFG layouts the Forecast node forecasts in
    spectrum_refused: tuple[str, ...] = ()      # or: the Forecast node refuses it, naming these
    forecast_nothing: str | None = None         # the Forecast node forecasting nothing equals no node in this layout

    @property
    def spec(self):
        return FAMILIES[self.family]

    @property
    def server_fixture(self) -> str:
        """conftest's session fixture: a server with the checkpoint."""
        return self.spec.server

    @property
    def shares_uncached_runs(self) -> bool:
        """Its graph is ``family_prompt``'s with one output: its runs without the node are conftest's
        ``uncached_latent``, which other test files compare with too."""
        return self.build is as_built and self.outputs == ("7",)

    @property
    def mask_cached(self) -> list[int]:
        return MASKS[self.steps]

    def cfg(self, layout: str) -> dict:
        """The prompt arguments of a CFG layout."""
        split_tokens = self.split_tokens or self.spec.split_tokens
        return {"none": dict(cfg=1.0, neg_tokens=8), "batched": dict(cfg=3.5, neg_tokens=8),
                "split": dict(cfg=3.5, neg_tokens=split_tokens)}[layout]

    def prompt_args(self, layout: str = "none", **kwargs) -> dict:
        """``family_prompt``'s arguments (the prefix left out) of the graph in a CFG layout."""
        return {"seed": self.seed, "steps": self.steps, **self.cfg(layout), **kwargs}

    def calls(self, layout: str) -> int:
        """Model calls the sampler makes in ``layout``: one per step, two when cond and uncond run apart."""
        return self.steps * (2 if layout == "split" else 1)

    def prompt(self, layout: str = "none", *, cache: dict | None = None, prefix: str, **kwargs) -> dict:
        """The family's graph in a CFG layout, the cache node's inputs ``cache`` (None: no cache node)."""
        return self.build(family_prompt(self.family, cache=cache, prefix=f"{self.family}_{prefix}",
                                        **self.prompt_args(layout, **kwargs)))

    def run(self, server: ComfyServer, graph: dict, node_id: str | None = "5", timeout: float | None = None):
        """(the run's outputs, the record node ``node_id`` published for this prompt, or None without it)."""
        return outputs_and_record(server, graph, self.outputs, node_id, timeout or self.timeout)

    def check_record(self, record: dict, layout: str, *, devices: int = 1, bn: int = 0):
        """The record of node "5" caching the mask's steps in ``layout``: its calls, each list's cached steps, and
        the blocks run (a computed call every block, a cached one the first of each list and its last ``bn``:
        Fn 1, Bn ``bn``), per call in order (for one device)."""
        spec, steps, lists = self.spec, self.steps, self.spec.block_lists
        ran_when_cached = len(lists) * (1 + bn)
        cached, calls = self.mask_cached, self.calls(layout)
        assert record["status"] == "ok" and record["model"] == spec.name and record["steps"] == steps
        assert record["node_id"] == "5" and record["cfg_mode"] == layout and record["calls"] == calls
        # Split over several devices, each device is sent one cond: none has separate CFG.
        assert record["has_separate_cfg"] == (layout == "split" and devices == 1)
        assert record["device_count"] == devices
        assert record["cached_steps"] == cached
        if len(lists) > 1:
            assert [(b["blocks"], b["size"], b["cached_steps"]) for b in record["block_lists"]] == [
                (f"{kind}_blocks", size, cached) for kind, size in lists]
        else:
            assert record["block_lists"] == [], "one list: the record's per-list account is for several"
        per_step = calls // steps
        assert record["block_evals_uncached"] == calls * spec.blocks
        assert record["block_evals"] == per_step * (spec.blocks * (steps - len(cached)) + ran_when_cached * len(cached))
        if devices == 1:
            assert [(call[0], call[3]) for call in record["call_log"]] == [
                (step, ran_when_cached if step in cached else spec.blocks)
                for step in range(steps) for _ in range(per_step)]


KREA2 = FamilyHarness(
    # The session's main server; seed 0 at CFG 3.5 (batched) is the Krea-2 node tests' baseline, so its runs without
    # the node are theirs. Threshold, EasyCache, patches, heun, LoRA, compile and two devices: the Krea-2 node's own
    # test files, which check them against Krea-2's own loop.
    "krea2", seed=0, steps=8, off_layouts=("batched",), after_cached=True, easycache=False, spectrum=LAYOUTS,
    forecast_nothing="batched")

# Wan, Z-Image, Qwen-Image, Flux.1 and Flux.2 share ``family_server``. Their graph without the node in a layout is
# sampled once (conftest's ``uncached_latent``) for caching off and the Forecast node forecasting nothing alike.
WAN = FamilyHarness(
    # Four blocks: the attention probe with a Bn block. heun cached in every layout: its own file's sampler matrix.
    "wan", seed=3, steps=8, off_layouts=LAYOUTS, after_cached=True, medium_mask=(4, 6), attention_bn=1,
    threshold=Threshold(full=True), patches=(DOUBLE_BLOCK,), heun=Heun(None, "split"),
    compile_tolerance=1e-3, compile_after=True, two_devices=True, two_devices_off=True, spectrum=LAYOUTS,
    forecast_nothing="split")

ZIMAGE = FamilyHarness(
    "zimage", seed=3, steps=8, attention_bn=0, threshold=Threshold(full=True), patches=(DOUBLE_BLOCK,),
    heun=Heun(None, "split"),
    lora_layers=tuple(f"layers.{block}.{layer}" for block in range(2)
                      for layer in ("attention.out", "feed_forward.w2")),
    compile_tolerance=1e-3, compile_after=True, two_devices=True, two_devices_off=True, spectrum=LAYOUTS,
    forecast_nothing="split")

QWEN_IMAGE = FamilyHarness(
    # Its LoRAs name its modules as they are (``transformer_blocks.N...``), without ComfyUI's prefix.
    "qwen_image", seed=3, steps=8, attention_bn=0, threshold=Threshold(full=True),
    patches=(DOUBLE_BLOCK,), heun=Heun(None, "none"),
    lora_layers=tuple(f"transformer_blocks.{block}.{layer}" for block in range(2)
                      for layer in ("attn.to_out.0", "img_mlp.net.2")), lora_prefix="",
    compile_tolerance=1e-3, compile_after=True, two_devices=True, two_devices_off=True, spectrum=LAYOUTS,
    forecast_nothing="split")

FLUX1 = FamilyHarness(
    # Two lists; its loop applies no ``double_block`` patch, a replacement of its middle single block stands in.
    # Two devices: its own file (one decision per step and list shared by the devices).
    "flux1", seed=3, steps=8, off_layouts=("batched", "split"), attention_bn=0, threshold=Threshold(full=True),
    patches=(SINGLE_BLOCK_REPLACE,), heun=Heun("split", "split"),
    lora_layers=(*(f"double_blocks.{block}.img_attn.proj" for block in range(2)),
                 *(f"single_blocks.{block}.linear2" for block in range(3))),
    compile_tolerance=1e-3, compile_after=True, spectrum=LAYOUTS, forecast_nothing="split")

FLUX2 = FamilyHarness(
    # Klein: every prompt padded to 512 tokens, so its split layout's negative is 600 (the spec's).
    "flux2", seed=3, steps=8, off_layouts=("batched", "split"), attention_bn=0, threshold=Threshold(full=True),
    patches=(SINGLE_BLOCK_REPLACE,), heun=Heun("split", "split"), spectrum=LAYOUTS, forecast_nothing="split")

CHROMA = FamilyHarness(
    # Flux's two lists without the modulation of their own: the approximator's table, sliced by block index.
    "chroma", seed=61, steps=8, off_layouts=("batched", "split"), attention_bn=0, threshold=Threshold(full=True),
    patches=(DIT_REPLACE,), heun=Heun("split", "split"),
    lora_layers=(*(f"double_blocks.{block}.img_attn.proj" for block in range(2)),
                 *(f"single_blocks.{block}.linear2" for block in range(2))),
    compile_tolerance=1e-3, compile_after=True, two_devices=True, two_devices_off=True, spectrum=LAYOUTS,
    forecast_nothing="split")

LTXV = FamilyHarness(
    "ltxv", seed=91, build=with_ltxv_conditioning, shapes=((1, 128, 2, 2, 2),),
    # Its blocks add into their input in place: with a zero residual kept, the cached step would be 0.073 off.
    cfg1_error=0.04, threshold=Threshold(), patches=(DIT_REPLACE,), heun=Heun("split", "none"),
    lora_layers=tuple(f"transformer_blocks.{block}.{layer}" for block in range(4)
                      for layer in ("attn1.to_out.0", "ff.net.2")),
    compile_tolerance=1e-3, two_devices=True, two_devices_off=True, spectrum=LAYOUTS)

HUNYUAN_VIDEO = FamilyHarness(
    # One list: the real model's single-stream list is empty (54 double + 0 single), so is the tiny one's.
    "hunyuan_video15", seed=91, steps=8, attention_bn=0,
    threshold=Threshold(full=True), patches=(DIT_REPLACE, Patch("control", control(128), "control")),
    heun=Heun("split", "split"),
    lora_layers=tuple(f"double_blocks.{block}.{layer}" for block in range(3)
                      for layer in ("img_attn.proj", "img_mlp.2")),
    compile_tolerance=1e-3, two_devices=True, two_devices_off=True, spectrum=LAYOUTS)

HUNYUAN_IMAGE = FamilyHarness(
    # The same class as HunyuanVideo 1.5 with both lists, on a 2D latent: what the second list changes.
    "hunyuan_image21", seed=91, steps=8, shapes=((1, 64, 4, 4),),
    layouts=("batched",), off_layouts=("batched",), easycache=False, two_devices=True)

LTX2 = FamilyHarness(
    # A video and an audio latent joined for the sampler and split after it: both outputs checked.
    "ltx2", seed=101, build=with_av_latent, outputs=("7", "15"),
    shapes=((1, 128, 2, 2, 2), (1, 8, 8, 16)), cfg1_error=0.1, threshold=Threshold(),
    patches=(DIT_REPLACE, Patch("stg_blocks", stg_blocks, "stg_self_attn_blocks")), heun=Heun("split", "none"),
    lora_layers=tuple(f"transformer_blocks.{block}.{layer}" for block in range(4)
                      for layer in ("attn1.to_out.0", "ff.net.2", "audio_attn1.to_out.0", "audio_ff.net.2")),
    compile_tolerance=1e-3, two_devices=True, two_devices_off=True,
    # Two final layers (video and audio): nothing single to forecast.
    spectrum_refused=("LTXAVModel", "final layer"))

MINIMAX = FamilyHarness(
    # ComfyUI never batches its conds (each carries its own packed layout): CFG above 1 is split even with
    # prompts of one length, so its split layout has them (8 tokens each) and it has no batched one.
    "minimax_h3", seed=71, build=with_separate_av, outputs=("7", "15"),
    shapes=((1, 24, 2, 4, 4), (1, 32, 2, 8)), layouts=("none", "split"), split_tokens=8,
    threshold=Threshold(full=True), patches=(DIT_REPLACE,), heun=Heun("split", "split"),
    lora_layers=tuple(f"blocks.{block}.{layer}" for block in range(4) for layer in ("attn.out_proj", "mlp.fc2")),
    compile_tolerance=1e-3, two_devices=True, two_devices_off=True, spectrum=("split", "none"))

ERNIE_IMAGE = FamilyHarness(
    # ComfyUI builds it only at 8B: its spec loads the 128-wide stand-in with the test loader. Its loop applies no
    # patch by block index and its attention takes no transformer options (nothing for the attention probe).
    "ernie_image", seed=3, steps=8, off_layouts=LAYOUTS, after_cached=True, threshold=Threshold(full=True),
    heun=Heun("split", "split"),
    lora_layers=tuple(f"layers.{block}.{layer}" for block in range(4)
                      for layer in ("self_attention.to_out.0", "mlp.linear_fc2")),
    compile_tolerance=1e-3, compile_after=True, two_devices=True, two_devices_off=True, spectrum=LAYOUTS,
    forecast_nothing="split")

HARNESSES = {harness.family: harness for harness in (KREA2, WAN, ZIMAGE, QWEN_IMAGE, FLUX1, FLUX2, CHROMA, LTXV,
                                                    HUNYUAN_VIDEO, HUNYUAN_IMAGE, LTX2, MINIMAX, ERNIE_IMAGE)}


# --- a cached step's outputs from one residual per stream (LTX-2's pair, MiniMax H3's packed sequence) -------

def probed_split_calls(harness: FamilyHarness, server: ComfyServer, probe: str, log) -> dict:
    """Split CFG with the mask and the probe node ``probe`` after the loader (it saves each model call's Fn output
    and final input to ``log``): the record checked, the calls by (step, branch)."""
    graph = insert_after_loader(harness.prompt("split", cache=FAST, prefix="probe"), "20",
                                {"class_type": probe, "inputs": {"log_path": str(log)}})
    _, record = harness.run(server, graph)
    harness.check_record(record, "split")
    calls = torch.load(log)
    assert [call["branches"] for call in calls] == [[0], [1]] * harness.steps
    return {(step, branch): calls[2 * step + branch] for step in range(harness.steps) for branch in (0, 1)}


def check_served_from_one_residual(by_step: dict, parts: dict, atol: float) -> dict:
    """At 4 steps (the mask caches step 2): on the cached step each stream's final input is its Fn output plus that
    stream's residual of step 1, nonzero on each of ``parts`` (name: index into the residual); on step 3 (computed)
    it is not, so the check can fail; cond's and uncond's residuals differ. The residuals, by branch."""
    residuals = {}
    for branch in (0, 1):
        computed = by_step[(1, branch)]
        residual = computed["final_in"] - computed["fn_out"]
        for name, part in parts.items():
            assert residual[part].abs().mean() > 0, f"the residual covers the {name}"
        cached = by_step[(2, branch)]
        assert torch.allclose(cached["final_in"], cached["fn_out"] + residual, rtol=0, atol=atol)
        later = by_step[(3, branch)]
        assert not torch.allclose(later["final_in"], later["fn_out"] + residual, rtol=0, atol=1e-3)
        residuals[branch] = residual
    # Each CFG stream its own cache: cond's and uncond's residuals differ.
    assert not torch.allclose(residuals[0], residuals[1], rtol=0, atol=1e-3)
    return residuals
