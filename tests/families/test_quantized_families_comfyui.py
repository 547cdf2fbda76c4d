"""Each family's quantized files through the loaders users load them with, in the real ComfyUI server.

- GGUF through city96's ComfyUI-GGUF ``UnetLoaderGGUF`` (installed into this module's server from its
  snapshot in ``../shared/third_party``, see ``comfy_harness.third_party_pack``; skipped without it):
  the family's tiny seeded checkpoint (``devkit/comfy_models.py``: the one the family tests sample, or, for
  the families whose stand-in is narrow, the same blocks at the real width these loaders detect) written as a
  Q8_0 GGUF with the ``gguf`` package (``krea2_gguf_files``' layout: 1-D and small tensors and the bare
  parameters ComfyUI-GGUF's conversion keeps in F32, ``general.architecture`` as its loader expects it), detected
  by ComfyUI from its tensors as the safetensors file is;
- fp8 through *Load Diffusion Model* (``UNETLoader``) with ``weight_dtype`` ``fp8_e4m3fn`` ("fp8"), or, where that
  fails in ComfyUI itself (MiniMax H3, see its ``refused``), a scaled-fp8 file of the checkpoint with ``weight_dtype``
  ``default`` ("fp8_scaled": ComfyUI's mixed-precision layers, the norms kept in full precision);
- ComfyUI's own quantized files (``comfy_quant`` layers: Comfy-Org's ``*_int8_convrot`` files are "int8_convrot"),
  the checkpoint's block layers written by ComfyUI's own mixed-precision layers (``devkit/comfy_quant_files.py``),
  through *Load Diffusion Model* with ``weight_dtype`` ``default``, under a ``LoraLoaderModelOnly`` as Comfy-Org's
  int8 Krea-2 Turbo template has it: see ``test_a_comfy_quant_file_under_a_lora_is_cached_by_both_nodes``.

For each family and file: the ``fast`` mask caches its step of 4 (the stats record of the queued
prompt says so, with the family's name, calls and blocks), and, where ``QUANTIZED`` says, the node with
caching off gives a latent bit-identical to the same loader's graph without the node. CFG 1, 4 steps,
the family's tiny latent; the full-width families run fewer calls (see ``QUANTIZED``). Every latent the
graph saves is compared (MiniMax H3's video and audio). One server for the module.

Krea-2 has its ``comfy_quant`` files only: stock ComfyUI-GGUF has no Krea-2 entry (docs/nodes.md, "Krea-2 GGUF
files"); its GGUF files are read by the pack's own loader (``test_gguf_comfyui.py``) and its fp8 weights are
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
from devkit.comfy_models import QUANTIZED_LAYERS, SHALLOW_MODELS
from devkit.comfy_quant_files import COMFY_QUANT, make_comfy_quant_checkpoint
from family_harness import with_av_latent, with_ltxv_conditioning, with_separate_av
from devkit.family_prompts import FAMILIES, family_prompt
from devkit.krea2_prompts import with_forecast
from helpers import FAST, OFF, insert_after_loader, prompt_error, write_native_lora
from krea2_gguf_files import write_krea2_gguf
from record_checks import FORECAST_NOTHING

pytestmark = pytest.mark.comfyui

GGUF_PACK = "ComfyUI-GGUF"
FILE_TYPE = "Q8_0"
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 71
AUTO_FORECAST = [1, 3]   # the Forecast node's ``auto`` at speedup 2 over 4 steps: steps 0 and 2 computed
LORA_STRENGTH = 0.8      # Comfy-Org's int8 Krea-2 Turbo template's LoraLoaderModelOnly


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
    # ComfyUI's own quantized files (``COMFY_QUANT``'s formats) that run under a LoRA, cached by both nodes.
    comfy_quant: tuple[str, ...] = ()
    # The Linear layers those files store quantized (fnmatch patterns of their names), and the LoRA's layers.
    quant_layers: tuple[str, ...] = ()
    lora_layers: tuple[str, ...] = ()
    # Formats that cannot run in ComfyUI itself, and why: "gguf" wherever ``architecture`` is None.
    refused: dict[str, Refused] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Refused:
    reason: str
    # What ComfyUI's failure says when the graph without the node samples the file: the test below checks
    # it still fails so, and the refusal is out of date once it does not. "": a file not run at all.
    error: str = ""


# One line per family (every FAMILIES key but Krea-2, see above). The full-width families (Z-Image, Qwen-Image and
# Chroma: ComfyUI's loaders detect them only at their real width, so their files here are written on demand at it:
# 0.4-1B parameters, dequantized or cast on every call, 2-15 s a call on 2 busy CPU cores) run fewer calls:
# Qwen-Image the GGUF's caching-off pair at 2 steps, Z-Image and Chroma the GGUF's mask run alone. The layers that
# dequantize or cast are the same classes for every family: the caching-off pair runs on the others, fp8 on an fp32
# (Wan, Flux) and a bf16 (Qwen-Image) checkpoint.
QUANTIZED = {
    # Krea-2: ComfyUI's int8 files only (GGUF and fp8: see the module's docstring); the session's tiny Krea-2 is
    # cheap enough for every ``comfy_quant`` format.
    "krea2": Quantized(None, server="comfy_server", formats=(), off_pair=(), comfy_quant=tuple(COMFY_QUANT),
                       quant_layers=tuple(f"blocks.*.{layer}" for layer in QUANTIZED_LAYERS),
                       lora_layers=tuple(f"blocks.{block}.{layer}" for block in range(4)
                                         for layer in ("attn.wq", "mlp.down")),
                       refused={"gguf": Refused("stock ComfyUI-GGUF has no Krea-2 entry: its GGUF files load through "
                                                "the pack's Load Krea-2 (diffusers), tests/krea2_loader")}),
    "wan": Quantized("wan"),
    # Z-Image: the int8 file of Comfy-Org's Z-Image Turbo int8 template (convrot), its blocks' modulation layers int8
    # (the model's other layers run through ComfyUI's mixed-precision layers all the same). On a CPU an int8 layer
    # multiplies with torch._int_mm, about 30 s for one 3840 x 11520 layer at 48 tokens on 2 cores (2 minutes a call
    # with the attention and MLP layers int8), while the modulation layers see one row, the step's embedding. Plain
    # int8 (the same layer class without the rotation) runs on Krea-2: at the real width its six runs take minutes.
    "zimage": Quantized("lumina2", server=None, formats=("gguf",), off_pair=(), comfy_quant=("int8_convrot",),
                        quant_layers=("layers.*.adaLN_modulation.0",),
                        lora_layers=tuple(f"layers.{block}.adaLN_modulation.0" for block in range(2))),
    "qwen_image": Quantized("qwen_image", server=None, off_pair=("gguf",), off_steps=2),
    "flux1": Quantized("flux"),
    "flux2": Quantized("flux"),
    "chroma": Quantized("flux", server=None, formats=("gguf",), off_pair=()),
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
NOT_QUANTIZED: dict[str, str] = {
    "ernie_image": "ComfyUI 0.33 builds ERNIE-Image only at its 8B config, so neither Load Diffusion Model nor "
                   "ComfyUI-GGUF's loader loads a file of the 128-wide stand-in (its tests load it with the test "
                   "nodes' sized loader); its layers are ComfyUI's ops, the ones the files here run through",
}
# Tensors kept in F32 whatever the file type, by architecture: bare parameters (not layers), which
# ComfyUI-GGUF's ops never dequantize (its conversion's ``keys_hiprec``; Z-Image's 1 x 3840 pad tokens too,
# which a Q8_0 file otherwise holds as 1 x 4080 bytes: "While copying the parameter named x_pad_token").
HIGH_PRECISION = {"wan": (".modulation",), "ltxv": ("scale_shift_table",), "lumina2": ("_pad_token",)}


def test_every_family_is_quantized():
    assert set(QUANTIZED) | set(NOT_QUANTIZED) == set(FAMILIES), (
        "every family needs its line in QUANTIZED, or a reason in NOT_QUANTIZED "
        "(tests/families/test_quantized_families_comfyui.py)")
    assert not set(QUANTIZED) & set(NOT_QUANTIZED)
    assert all("gguf" in quant.refused for quant in QUANTIZED.values() if quant.architecture is None), (
        "a family with no GGUF architecture needs its refused['gguf'] reason")
    assert all(not set(quant.formats + quant.comfy_quant) & set(quant.refused) for quant in QUANTIZED.values())
    assert all(quant.scaled_layers for quant in QUANTIZED.values() if "fp8_scaled" in quant.formats)
    assert all(quant.quant_layers and quant.lora_layers for quant in QUANTIZED.values() if quant.comfy_quant)
    assert all(set(quant.comfy_quant) <= set(COMFY_QUANT) for quant in QUANTIZED.values())
    # Every comfy_quant format ComfyUI has is run on Krea-2, or refused there with its reason.
    assert set(QUANTIZED["krea2"].comfy_quant) | (set(QUANTIZED["krea2"].refused) & set(COMFY_QUANT)) == set(
        COMFY_QUANT)


@pytest.fixture(scope="module")
def quant_server(comfy_root, tmp_path_factory):
    """A server with this pack and ComfyUI-GGUF (where its snapshot is: the GGUF cases skip without it); the
    family files are added as tests ask for them."""
    snapshot = third_party_pack(GGUF_PACK)
    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_quantized"))
    if snapshot is not None:
        (base / "custom_nodes" / GGUF_PACK).symlink_to(snapshot, target_is_directory=True)
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def stock_file(family: str) -> str:
    """The family's checkpoint as ComfyUI's own loaders detect it: its stand-in, or the real-width shallow file
    where the stand-in is narrow (``SHALLOW_MODELS``)."""
    return SHALLOW_MODELS.get(family, FAMILIES[family].model)


def gguf_name(family: str) -> str:
    return f"{family}_tiny-{FILE_TYPE}.gguf"


def scaled_name(family: str) -> str:
    return f"{family}_tiny_fp8_scaled.safetensors"


def comfy_quant_name(family: str, file_format: str) -> str:
    return f"{family}_tiny_{file_format}.safetensors"


def comfy_quant_files(quant: Quantized) -> list[str]:
    """The ``COMFY_QUANT`` files a family's line runs: its formats, and the refused ones whose failure is checked."""
    return [*quant.comfy_quant, *(fmt for fmt, refused in quant.refused.items() if fmt in COMFY_QUANT and refused.error)]


@pytest.fixture(scope="module")
def family_files(request, comfy_root, tmp_path_factory, quant_server):
    """``family_files(family)``: the family's checkpoint (linked), its GGUF, scaled-fp8 and ``comfy_quant`` files
    (where its ``QUANTIZED`` line runs them) in ``quant_server``, once."""
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

            # The real-width file where the family's stand-in is narrow: what these loaders detect.
            source = tmp_path_factory.mktemp(f"{family}_checkpoint") / stock_file(family)
            make_family_checkpoint(comfy_root, f"{family}_shallow" if family in SHALLOW_MODELS else family, source,
                                   seed=family_checkpoint_seed(family))
        else:
            source = request.getfixturevalue(quant.server).base_dir / "models" / "diffusion_models" / stock_file(family)
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
        for file_format in comfy_quant_files(quant):
            make_comfy_quant_checkpoint(comfy_root, source, models / comfy_quant_name(family, file_format),
                                        file_format, quant.quant_layers)
        (models / stock_file(family)).symlink_to(source)
        done[family] = types
        return types

    return files


def loader(family: str, file_format: str) -> dict:
    if file_format == "gguf":
        return {"class_type": "UnetLoaderGGUF", "inputs": {"unet_name": gguf_name(family)}}
    if file_format == "fp8_scaled":
        return {"class_type": "UNETLoader", "inputs": {"unet_name": scaled_name(family), "weight_dtype": "default"}}
    if file_format in COMFY_QUANT:
        return {"class_type": "UNETLoader", "inputs": {"unet_name": comfy_quant_name(family, file_format),
                                                       "weight_dtype": "default"}}
    return {"class_type": "UNETLoader", "inputs": {"unet_name": stock_file(family), "weight_dtype": "fp8_e4m3fn"}}


def prompt(family: str, file_format: str, steps: int, cache: dict | None, prefix: str) -> dict:
    graph = family_prompt(family, cfg=1.0, steps=steps, seed=SEED, cache=cache, loader=loader(family, file_format),
                          node="CacheDiTDBCache", prefix=f"{family}_{file_format}_{prefix}")
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
    if file_format == "gguf" and third_party_pack(GGUF_PACK) is None:
        pytest.skip(f"no {GGUF_PACK} snapshot: put it in ../shared/third_party beside the clone "
                    f"(or set KREA2_THIRD_PARTY_DIR)")
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


COMFY_QUANT_CASES = [(family, file_format) for family, quant in QUANTIZED.items() for file_format in quant.comfy_quant]


@pytest.fixture(scope="module")
def family_lora(quant_server, family_files):
    """``family_lora(family)``: a LoRA on the family's ``lora_layers`` in ``quant_server``, written once."""
    done = {}

    def lora(family: str) -> str:
        if family not in done:
            family_files(family)
            checkpoint = quant_server.base_dir / "models" / "diffusion_models" / stock_file(family)
            done[family] = write_native_lora(quant_server, checkpoint, QUANTIZED[family].lora_layers,
                                             f"{family}_quantized_lora.safetensors")
        return done[family]

    return lora


def check_comfy_quant_file(path, file_format: str, layers: tuple[str, ...]):
    """Every layer ``layers`` names holds its weight stored quantized and its ``comfy_quant`` format; nothing else.
    The int8 files as Comfy-Org's: "int8" one scale per tensor, "int8_convrot" a scale per row and the ConvRot
    marks (``{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}``)."""
    import fnmatch
    import json

    from safetensors import safe_open

    quant_format = COMFY_QUANT[file_format][0]
    convrot = file_format == "int8_convrot"
    with safe_open(str(path), "pt") as stored:
        keys = set(stored.keys())
        marked = {key.removesuffix(".comfy_quant") for key in keys if key.endswith(".comfy_quant")}
        wanted = {key.removesuffix(".weight") for key in keys
                  if key.endswith(".weight") and any(fnmatch.fnmatchcase(key.removesuffix(".weight"), p) for p in layers)}
        assert marked == wanted and marked, (sorted(marked), sorted(wanted))
        for layer in marked:
            conf = json.loads(bytes(stored.get_tensor(f"{layer}.comfy_quant").tolist()))
            weight = stored.get_tensor(f"{layer}.weight")
            assert conf["format"] == quant_format, conf
            assert weight.dtype not in (torch.float32, torch.bfloat16, torch.float16)
            if quant_format == "int8_tensorwise":
                assert conf == ({"format": quant_format, "convrot": True, "convrot_groupsize": 256} if convrot
                                else {"format": quant_format}), conf
                scale = stored.get_tensor(f"{layer}.weight_scale")
                assert scale.numel() == (weight.shape[0] if convrot else 1), (layer, scale.shape)


@pytest.mark.parametrize("family, file_format", COMFY_QUANT_CASES, ids=[f"{f}-{fmt}" for f, fmt in COMFY_QUANT_CASES])
def test_a_comfy_quant_file_under_a_lora_is_cached_by_both_nodes(quant_server, family_files, family_lora, family,
                                                                 file_format):
    """ComfyUI's own quantized file of the family's checkpoint through *Load Diffusion Model* and a
    ``LoraLoaderModelOnly`` (the LoRA on quantized layers changes the latent, every key loaded), at CFG 1 over 4
    steps: the DBCache node with caching off and the Forecast node forecasting nothing each bit-identical to the
    graph without a node, the ``fast`` mask caching step 2, and the Forecast node's ``auto`` at speedup 2
    forecasting steps 1 and 3 (a call that runs no block)."""
    quant = QUANTIZED[family]
    family_files(family)
    check_comfy_quant_file(quant_server.base_dir / "models" / "diffusion_models" / comfy_quant_name(family, file_format),
                           file_format, quant.quant_layers)
    lora = family_lora(family)
    log_start = len(quant_server.log_text())

    def graph(prefix: str, cache: dict | None = None, forecast: tuple[str, dict] | None = None,
              with_lora: bool = True) -> dict:
        built = prompt(family, file_format, STEPS, {} if forecast else cache, prefix)
        if forecast is not None:
            built = with_forecast(built, forecast[0], **forecast[1])
        if with_lora:
            built = insert_after_loader(built, "8", {"class_type": "LoraLoaderModelOnly",
                                                     "inputs": {"lora_name": lora, "strength_model": LORA_STRENGTH}})
        return built

    without_lora, _ = run(quant_server, graph("no_lora", with_lora=False))
    plain, _ = run(quant_server, graph("plain"))
    log = quant_server.log_text()[log_start:]
    assert "Detected mixed precision quantization" in log, "ComfyUI read the file as a plain checkpoint"
    assert "lora key not loaded" not in log
    assert not any(map(torch.equal, plain, without_lora)), "the LoRA on the quantized layers should change the latent"

    off, off_record = run(quant_server, graph("off", OFF))
    check_record(off_record, family, STEPS, cached=[])
    assert all(map(torch.equal, off, plain)), "the DBCache node with caching off must not change the latents"
    cached, record = run(quant_server, graph("fast", FAST))
    check_record(record, family, STEPS, cached=MASK_CACHED)
    assert all(torch.isfinite(latent).all() for latent in cached)

    nothing, nothing_record = run(quant_server, graph("nothing", forecast=("custom", FORECAST_NOTHING)))
    assert nothing_record["status"] == "ok" and nothing_record["forecast_steps"] == []
    assert all(map(torch.equal, nothing, plain)), "the Forecast node forecasting nothing must not change the latents"
    forecast, forecast_record = run(quant_server, graph("auto", forecast=("auto", {"speedup": 2.0})))
    assert (forecast_record["status"], forecast_record["model"]) == ("ok", FAMILIES[family].name), forecast_record
    assert forecast_record["forecast_steps"] == AUTO_FORECAST, forecast_record["step_reasons"]
    assert [call[3] for call in forecast_record["call_log"]] == [
        0 if call[0] in AUTO_FORECAST else FAMILIES[family].blocks for call in forecast_record["call_log"]]
    assert all(torch.isfinite(latent).all() for latent in forecast)
