"""Test nodes for audio + video models whose loop carries a (video, audio) pair (LTX-2).

- ``Krea2TestEmptyAudioLatent``: an empty LTX-2 audio latent (8 channels, 16 frequency bins) of a given
  length, without the audio VAE ``LTXVEmptyLatentAudio`` reads those numbers from (a multi-GB model);
- ``Krea2TestTransformerOption``: sets one transformer option to a set of block indices on every call,
  as guidance nodes set LTX-2's ``stg_self_attn_blocks`` for their own extra call;
- ``Krea2TestPairedHiddenProbe``: per model call of one sampling run, the first block's output and the
  inputs of the video and audio final norms, each as one flat tensor (video values, then audio values),
  with the call's ``cond_or_uncond``, saved to ``log_path`` at the end of the run. Hooks taken on the
  model's own modules when the node runs, held only while the run samples.
"""

from __future__ import annotations

import re

import torch


class Krea2TestEmptyAudioLatent:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("LATENT",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"length": ("INT", {"default": 8, "min": 1, "max": 4096})}}

    def make(self, length):
        return ({"samples": torch.zeros((1, 8, length, 16)), "type": "audio"},)


class Krea2TestTransformerOption:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "key": ("STRING", {"default": "stg_self_attn_blocks"}),
                             "blocks": ("STRING", {"default": "1"})}}

    def patch(self, model, key, blocks):
        patched = model.clone()
        options = dict(patched.model_options.get("transformer_options", {}))
        options[key] = frozenset(int(b) for b in re.findall(r"\d+", blocks))
        patched.model_options["transformer_options"] = options
        return (patched,)


def _flat(value) -> torch.Tensor:
    """A hidden state as one flat tensor: a tensor as it is, a pair as its parts one after the other."""
    parts = [value] if torch.is_tensor(value) else list(value)
    return torch.cat([part.detach().reshape(-1) for part in parts]).clone()


class Krea2TestPairedHiddenProbe:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "log_path": ("STRING", {"default": ""})}}

    def patch(self, model, log_path):
        import comfy.patcher_extension

        diffusion_model = model.model.diffusion_model
        first_block = diffusion_model.transformer_blocks[0]
        norms = (diffusion_model.norm_out, diffusion_model.audio_norm_out)

        def outer_sample(executor, *args, **kwargs):
            calls = []

            def after_first(module, block_args, block_kwargs, output):
                options = block_kwargs.get("transformer_options") or {}
                calls.append({"branches": list(options.get("cond_or_uncond") or []), "fn_out": _flat(output),
                              "final_in": []})

            def before_norm(module, norm_args):
                calls[-1]["final_in"].append(_flat(norm_args[0]))

            hooks = [first_block.register_forward_hook(after_first, with_kwargs=True)]
            hooks += [norm.register_forward_pre_hook(before_norm) for norm in norms]
            try:
                return executor(*args, **kwargs)
            finally:
                for hook in hooks:
                    hook.remove()
                for call in calls:
                    call["final_in"] = torch.cat(call["final_in"]) if call["final_in"] else None
                torch.save(calls, log_path)

        patched = model.clone()
        patched.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "krea2_test_paired_probe",
                                     outer_sample)
        return (patched,)


NODE_CLASS_MAPPINGS = {"Krea2TestEmptyAudioLatent": Krea2TestEmptyAudioLatent,
                       "Krea2TestTransformerOption": Krea2TestTransformerOption,
                       "Krea2TestPairedHiddenProbe": Krea2TestPairedHiddenProbe}
