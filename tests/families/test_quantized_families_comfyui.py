"""Each family's quantized files through the loaders users load them with, in the real ComfyUI server.

- GGUF through city96's ComfyUI-GGUF ``UnetLoaderGGUF`` (installed into this module's server from its
  snapshot in ``../shared/third_party``, see ``comfy_harness.third_party_pack``; skipped without it):
  the family's tiny seeded checkpoint (``devkit/comfy_models.py``, the one the family tests sample)
  written as a Q8_0 GGUF with the ``gguf`` package (``krea2_gguf_files``' layout: 1-D and small tensors
  and the bare parameters ComfyUI-GGUF's conversion keeps in F32, ``general.architecture`` as its
  loader expects it), detected by ComfyUI from its tensors as the safetensors file is;
- fp8 through *Load Diffusion Model* (``UNETLoader``) with ``weight_dtype`` ``fp8_e4m3fn`` ("fp8"), or, where that
  fails in ComfyUI itself (MiniMax H3, see its ``refused``), a scaled-fp8 file of the checkpoint with ``weight_dtype``
  ``default`` ("fp8_scaled": ComfyUI's mixed-precision layers, the norms kept in full precision).

For each family and file: the ``fast`` mask caches its step of 4 (the stats record of the queued
prompt says so, with the family's name, calls and blocks), and, where ``QUANTIZED`` says, the node with
caching off gives a latent bit-identical to the same loader's graph without the node. CFG 1, 4 steps,
the family's tiny latent; the full-width families run fewer calls (see ``QUANTIZED``). Every latent the
graph saves is compared (MiniMax H3's video and audio). One server for the module.

Krea-2 is not here: stock ComfyUI-GGUF has no Krea-2 entry (docs/nodes.md, "Krea-2 GGUF files"); its
GGUF files are read by the pack's own loader (``test_gguf_comfyui.py``) and its fp8 weights are
checked in ``test_compat_comfyui.py``.

Adding a family: its ``FamilySpec`` in ``devkit/family_prompts.py`` and ONE line in ``QUANTIZED``
below: the ``general.architecture`` ComfyUI-GGUF's loader accepts for it (``loader.py``'s
``IMG_ARCH_LIST``, e.g. "ltxv", "hyvid"; None where it has none: then only fp8 runs, and its ``refused``
says why), the session
fixture that writes its checkpoint when that is not ``family_server``, and fewer calls where each is
slow. ``test_every_family_is_quantized`` fails until that line exists.
"""

from __future__ import annotations

import dataclasses
import os
import typing

import pytest
import torch

from devkit.comfy_harness import ComfyServer, third_party_pack
from family_harness import with_av_latent, with_ltxv_conditioning, with_separate_av
from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, OFF, prompt_error
from krea2_gguf_files import write_krea2_gguf

pytestmark = pytest.mark.comfyui

GGUF_PACK = "ComfyUI-GGUF"
FILE_TYPE = "Q8_0"
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 71


@dataclasses.dataclass(frozen=True)
class Quantized:
    architecture: str | None                    # general.architecture UnetLoaderGGUF accepts; None: no GGUF
    # The session fixture whose models folder holds the checkpoint; None: a small checkpoint this module
    # writes itself (a family whose own test module writes its checkpoint for its own server).
    server: str | None = "family_server"
    formats: tuple[str, ...] = ("gguf", "fp8")   # the files whose mask run runs ("gguf", "fp8", "fp8_scaled")
    off_pair: tuple[str, ...] = ("gguf", "fp8")  # the files whose caching-off pair runs too
    off_steps: int = STEPS                      # steps of the caching-off pair
    # What the family's graph needs beyond ``family_prompt``'s (as its own test module builds it), or None.
    graph: typing.Callable[[dict], dict] | None = None
    # The linear layers of each ``blocks.N`` a scaled-fp8 file stores in fp8 (format "fp8_scaled").
    scaled_layers: tuple[str, ...] = ()
    # Formats that cannot run in ComfyUI itself, and why: "gguf" wherever ``architecture`` is None.
    refused: dict[str, Refused] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Refused:
    reason: str
    # What ComfyUI's failure says when the graph without the node samples the file: the test below checks
    # it still fails so, and the refusal is out of date once it does not. "": a file not run at all.
    error: str = ""


# One line per family (every FAMILIES key but Krea-2, see above). The full-width families (ComfyUI
# detects them only at their real width: 0.4-1B parameters, dequantized or cast on every call, 2-15 s a
# call on 2 busy CPU cores) run fewer calls: Qwen-Image the GGUF's caching-off pair at 2 steps, Z-Image
# and Chroma the GGUF's mask run alone. The layers that dequantize or cast are the same classes for every
# family: the caching-off pair runs on the others, fp8 on an fp32 (Wan, Flux) and a bf16 (Qwen-Image)
# checkpoint.
QUANTIZED = {
    "wan": Quantized("wan"),
    "zimage": Quantized("lumina2", formats=("gguf",), off_pair=()),
    "qwen_image": Quantized("qwen_image", off_pair=("gguf",), off_steps=2),
    "flux1": Quantized("flux"),
    "flux2": Quantized("flux"),
    "chroma": Quantized("flux", server="chroma_server", formats=("gguf",), off_pair=()),
    "ltxv": Quantized("ltxv", server=None, graph=with_ltxv_conditioning),
    "hunyuan_video15": Quantized("hyvid", server=None),
    "hunyuan_image21": Quantized("hyvid", server=None, off_pair=("fp8",)),
    # LTX-2: fp8 only, its audio-video latent as its own tests build it.
    "ltx2": Quantized(None, server=None, formats=("fp8",), off_pair=("fp8",), graph=with_av_latent, refused={
        "gguf": Refused("ComfyUI reads LTX-2's audio and caption widths from a checkpoint's metadata config, which "
                        "ComfyUI-GGUF's loader does not hand it: only a GGUF at LTX-2's real widths (19B) loads")}),
    # fp8 as a scaled-fp8 file (ComfyUI's mixed-precision layers: the norms stay fp32); the sampled audio-video
    # latent split into the video and the audio latent, as its own tests do.
    "minimax_h3": Quantized(None, server="minimax_server", formats=("fp8_scaled",), off_pair=("fp8_scaled",),
                            graph=with_separate_av,
                            scaled_layers=("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"), refused={
                                "gguf": Refused("ComfyUI-GGUF's loader accepts no MiniMax architecture "
                                                "(IMG_ARCH_LIST), so no GGUF file of it loads"),
                                "fp8": Refused(
                                    "weight_dtype fp8_e4m3fn stores every weight in fp8, the attention's q_norm and "
                                    "k_norm too, and MiniMax H3's attention hands those weights uncast (cast_to with "
                                    "a device, no dtype) to comfy_kitchen's fused RMSNorm + rope, which takes only "
                                    "fp32, bf16 or fp16 scales: the graph fails without the node",
                                    error="No backend can handle 'rms_rope_split_half_': eager: q_scale: dtype "
                                          "torch.float8_e4m3fn")}),
}
# Families not here, and why (each must say): the test below fails on a family in neither.
NOT_QUANTIZED: dict[str, str] = {}
# Tensors kept in F32 whatever the file type, by architecture: bare parameters (not layers), which
# ComfyUI-GGUF's ops never dequantize (its conversion's ``keys_hiprec``; Z-Image's 1 x 3840 pad tokens too,
# which a Q8_0 file otherwise holds as 1 x 4080 bytes: "While copying the parameter named x_pad_token").
HIGH_PRECISION = {"wan": (".modulation",), "ltxv": ("scale_shift_table",), "lumina2": ("_pad_token",)}


def test_every_family_is_quantized():
    assert set(QUANTIZED) | set(NOT_QUANTIZED) == set(FAMILIES) - {"krea2"}, (
        "every family but Krea-2 needs its line in QUANTIZED, or a reason in NOT_QUANTIZED "
        "(tests/families/test_quantized_families_comfyui.py)")
    assert not set(QUANTIZED) & set(NOT_QUANTIZED)
    assert all("gguf" in quant.refused for quant in QUANTIZED.values() if quant.architecture is None), (
        "a family with no GGUF architecture needs its refused['gguf'] reason")
    assert all(not set(quant.formats) & set(quant.refused) for quant in QUANTIZED.values())
    assert all(quant.scaled_layers for quant in QUANTIZED.values() if "fp8_scaled" in quant.formats)


@pytest.fixture(scope="module")
def quant_server(comfy_root, tmp_path_factory):
    """A server with this pack and ComfyUI-GGUF; the family files are added as tests ask for them."""
    snapshot = third_party_pack(GGUF_PACK)
    if snapshot is None:
        pytest.skip(f"no {GGUF_PACK} snapshot: put it in ../shared/third_party beside the clone "
                    f"(or set KREA2_THIRD_PARTY_DIR)")
    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_quantized"))
    (base / "custom_nodes" / GGUF_PACK).symlink_to(snapshot, target_is_directory=True)
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def gguf_name(family: str) -> str:
    return f"{family}_tiny-{FILE_TYPE}.gguf"


def scaled_name(family: str) -> str:
    return f"{family}_tiny_fp8_scaled.safetensors"


@pytest.fixture(scope="module")
def family_files(request, comfy_root, tmp_path_factory, quant_server):
    """``family_files(family)``: the family's checkpoint (linked), its GGUF and scaled-fp8 file (where its
    ``QUANTIZED`` line runs them) in ``quant_server``, once."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from devkit.comfy_models import fp8_scaled_state_dict

    done = {}

    def files(family: str) -> dict[str, str]:
        if family in done:
            return done[family]
        quant = QUANTIZED[family]
        if quant.server is None:
            from devkit.comfy_models import make_family_checkpoint
            from conftest import family_checkpoint_seed

            source = tmp_path_factory.mktemp(f"{family}_checkpoint") / FAMILIES[family].model
            make_family_checkpoint(comfy_root, family, source, seed=family_checkpoint_seed(family))
        else:
            source = request.getfixturevalue(quant.server).base_dir / "models" / "diffusion_models" / FAMILIES[family].model
        models = quant_server.base_dir / "models" / "diffusion_models"
        types = {}
        if quant.architecture is not None or "fp8_scaled" in quant.formats:
            with safe_open(str(source), "pt") as checkpoint:
                state = {key: checkpoint.get_tensor(key) for key in checkpoint.keys()}
        if "fp8_scaled" in quant.formats:
            partial = models / f".{scaled_name(family)}.part"
            save_file(fp8_scaled_state_dict(state, quant.scaled_layers), str(partial))
            os.replace(partial, models / scaled_name(family))
        if quant.architecture is not None:
            keep = HIGH_PRECISION.get(quant.architecture, ())
            partial = models / f".{gguf_name(family)}.part"   # listed only once whole
            types = write_krea2_gguf(partial, state, FILE_TYPE, architecture=quant.architecture,
                                     high_precision=[key for key in state if any(part in key for part in keep)])
            os.replace(partial, models / gguf_name(family))
        (models / FAMILIES[family].model).symlink_to(source)
        done[family] = types
        return types

    return files


def loader(family: str, file_format: str) -> dict:
    if file_format == "gguf":
        return {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": gguf_name(family)}}
    if file_format == "fp8_scaled":
        return {"class_type": "UNETLoader", "inputs": {"unet_name": scaled_name(family), "weight_dtype": "default"}}
    return {"class_type": "UNETLoader", "inputs": {"unet_name": FAMILIES[family].model, "weight_dtype": "fp8_e4m3fn"}}


def prompt(family: str, file_format: str, steps: int, cache: dict | None, prefix: str) -> dict:
    graph = family_prompt(family, cfg=1.0, steps=steps, seed=SEED, cache=cache, loader=loader(family, file_format),
                          prefix=f"{family}_{file_format}_{prefix}")
    adjust = QUANTIZED[family].graph
    return adjust(graph) if adjust else graph


def run(server: ComfyServer, graph: dict) -> tuple[list[torch.Tensor], dict]:
    """Every latent the graph saves (its ``SaveLatent`` nodes, by id) and node "5"'s record of this prompt."""
    prompt_id = server.queue(graph)
    entry = server.wait(prompt_id, 900)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    record = server.stats_for(prompt_id, "5")[0] if "5" in graph else None
    saved = sorted(node_id for node_id, node in graph.items() if node["class_type"] == "SaveLatent")
    return [server.saved_latent(entry, node_id) for node_id in saved], record


def check_record(record: dict, family: str, steps: int, cached: list[int]):
    spec = FAMILIES[family]
    assert (record["status"], record["model"], record["steps"], record["node_id"]) == ("ok", spec.name, steps, "5")
    assert (record["cfg_mode"], record["calls"], record["extra_calls"]) == ("none", steps, 0)
    assert record["cached_steps"] == cached
    assert record["block_evals_uncached"] == steps * spec.blocks


CASES = [(family, file_format) for family, quant in QUANTIZED.items() for file_format in quant.formats
         if file_format != "gguf" or quant.architecture is not None]


@pytest.mark.parametrize("family, file_format", CASES, ids=[f"{family}-{fmt}" for family, fmt in CASES])
def test_caching_off_is_bit_identical_and_the_mask_caches(quant_server, family_files, family, file_format):
    types = family_files(family)
    assert file_format != "gguf" or FILE_TYPE in types.values(), "the GGUF should hold quantized tensors"
    quant = QUANTIZED[family]
    log_start = len(quant_server.log_text())
    if file_format in quant.off_pair:
        steps = quant.off_steps
        plain, _ = run(quant_server, prompt(family, file_format, steps, None, "plain"))
        off, off_record = run(quant_server, prompt(family, file_format, steps, OFF, "off"))
        check_record(off_record, family, steps, cached=[])
        assert all(map(torch.equal, off, plain)), "the node with caching off must not change the latents"
    cached, record = run(quant_server, prompt(family, file_format, STEPS, FAST, "fast"))
    check_record(record, family, STEPS, cached=MASK_CACHED)
    assert all(torch.isfinite(latent).all() for latent in cached)
    if file_format == "fp8_scaled":   # ComfyUI read its layers as quantized, not as a plain checkpoint
        assert "Detected mixed precision quantization" in quant_server.log_text()[log_start:]


REFUSED_CASES = [(family, file_format) for family, quant in QUANTIZED.items()
                 for file_format, refused in quant.refused.items() if refused.error]


@pytest.mark.parametrize("family, file_format", REFUSED_CASES, ids=[f"{f}-{fmt}" for f, fmt in REFUSED_CASES])
def test_a_refused_format_still_fails_in_comfyui_without_the_node(quant_server, family_files, family, file_format):
    """The graph without the node fails as the refusal says: once ComfyUI runs it, the family's line in
    ``QUANTIZED`` should run the format instead."""
    family_files(family)
    prompt_id = quant_server.queue(prompt(family, file_format, STEPS, None, "refused"))
    error = prompt_error(quant_server.wait(prompt_id, 900))
    assert error is not None and QUANTIZED[family].refused[file_format].error in error, error
