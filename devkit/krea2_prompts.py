"""API-format prompts (what the graph editor sends to /prompt) for a tiny generated Krea-2."""

from __future__ import annotations

import itertools

TINY_MODEL = "krea2_tiny.safetensors"
TINY_CONTEXT_FEATURES = 120  # txtlayers * txtdim of synthetic.Krea2Shape()

CACHE_NODE_DEFAULTS = {
    "steps_mask": "none", "Fn_compute_blocks": 1, "Bn_compute_blocks": 0,
    "residual_diff_threshold": 0.24, "max_warmup_steps": 4, "warmup_interval": 1, "max_cached_steps": -1,
    "max_continuous_cached_steps": 3, "calibrator": "none", "taylorseer_order": 1, "dmd_history": 6,
}


# A new value per prompt: ComfyUI keeps the outputs of every graph it ran and serves an identical
# graph from that cache without sampling, so a test would compare or read stats of an older run.
_NONCES = itertools.count(1)


def krea2_prompt(*, cfg=1.0, steps=8, sampler="euler", scheduler="simple", cache: dict | None = None,
                 pos_tokens=8, neg_tokens=8, seed=0, size=64, batch=1, model=TINY_MODEL,
                 prefix="krea2_test", loader: dict | None = None, compile_backend: str | None = None,
                 nonce: int | None = None) -> dict:
    """UNETLoader -> [TorchCompileModel] -> [Krea2CacheDiT] -> KSampler -> SaveLatent, conditioning from the test node.

    ``cache=None`` leaves the Cache-DiT node out (the bypassed / plain graph);
    otherwise its inputs override ``CACHE_NODE_DEFAULTS``. ``compile_backend``
    puts ComfyUI's TorchCompileModel (that backend) right after the loader. Node
    ids are fixed: "1" loader, "8" TorchCompileModel, "5" Cache-DiT, "6" KSampler,
    "7" SaveLatent.

    Every prompt samples for real: the conditioning nodes get a ``nonce`` new to the
    session (it changes no tensor, only ComfyUI's cache key). Pass one to allow reuse.
    """
    nonce = next(_NONCES) if nonce is None else nonce
    prompt = {
        "1": loader or {"class_type": "UNETLoader", "inputs": {"unet_name": model, "weight_dtype": "default"}},
        "2": {"class_type": "Krea2TestConditioning",
              "inputs": {"seed": 1, "tokens": pos_tokens, "features": TINY_CONTEXT_FEATURES, "nonce": nonce}},
        "3": {"class_type": "Krea2TestConditioning",
              "inputs": {"seed": 2, "tokens": neg_tokens, "features": TINY_CONTEXT_FEATURES, "nonce": nonce}},
        "4": {"class_type": "EmptyLatentImage", "inputs": {"width": size, "height": size, "batch_size": batch}},
        "6": {"class_type": "KSampler", "inputs": {
            "model": ["1", 0], "seed": seed, "steps": steps, "cfg": cfg, "sampler_name": sampler,
            "scheduler": scheduler, "positive": ["2", 0], "negative": ["3", 0], "latent_image": ["4", 0],
            "denoise": 1.0}},
        "7": {"class_type": "SaveLatent", "inputs": {"samples": ["6", 0], "filename_prefix": prefix}},
    }
    model_output = ["1", 0]
    if compile_backend is not None:
        prompt["8"] = {"class_type": "TorchCompileModel", "inputs": {"model": model_output, "backend": compile_backend}}
        model_output = ["8", 0]
    if cache is not None:
        prompt["5"] = {"class_type": "Krea2CacheDiT", "inputs": {"model": model_output, **CACHE_NODE_DEFAULTS, **cache}}
        model_output = ["5", 0]
    prompt["6"]["inputs"]["model"] = model_output
    return prompt


FORECAST_NODE = "CacheDiTSpectrum"
# The forecasting node's ``custom`` settings (its ``preset`` dynamic combo's inputs), as the node defaults them.
FORECAST_CUSTOM_DEFAULTS = {"forecast": "spectrum", "chebyshev_degree": 4, "ridge_lambda": 0.1, "blend_w": 1.0,
                            "extrapolation": 1.0, "target": "feature",
                            "warmup_steps": 5, "window_size": 2.0, "window_growth": 0.75, "final_computed_steps": 0}


def with_forecast(prompt: dict, preset: str = "turbo_5_of_8", **custom) -> dict:
    """The cache node "5" replaced by the whole-call forecasting node on the same model: a named
    ``preset``, ``preset="custom"`` with ``custom`` over ``FORECAST_CUSTOM_DEFAULTS``, or ``preset="auto"`` with
    its ``speedup`` (the API format of a dynamic combo: the chosen key, and its inputs as ``preset.<name>``)."""
    inputs = {"model": prompt["5"]["inputs"]["model"], "preset": preset}
    if preset == "custom":
        inputs.update({f"preset.{name}": value for name, value in {**FORECAST_CUSTOM_DEFAULTS, **custom}.items()})
    elif preset == "auto":   # its one input, ``speedup`` (``custom``: {"speedup": x}; none: the node's default)
        inputs.update({f"preset.{name}": value for name, value in custom.items()})
    prompt["5"] = {"class_type": FORECAST_NODE, "inputs": inputs}
    return prompt


def with_lora(prompt: dict, lora_name: str, strength: float, order: str) -> dict:
    """LoraLoaderModelOnly "8" on the loader's model, before ("lora_first") or after ("cache_first")
    the Cache-DiT node "5" (node ids of ``krea2_prompt``; family prompts use the same)."""
    prompt["8"] = {"class_type": "LoraLoaderModelOnly",
                   "inputs": {"model": ["1", 0], "lora_name": lora_name, "strength_model": strength}}
    if order == "lora_first":
        prompt["5"]["inputs"]["model"] = ["8", 0]
    else:
        prompt["8"]["inputs"]["model"] = ["5", 0]
        prompt["6"]["inputs"]["model"] = ["8", 0]
    return prompt


def guided_prompt(guider: dict, *, steps=8, sampler="euler", cache: dict | None = None, seed=0, size=64,
                  sigmas_from: list | None = None, prefix="krea2_guided") -> dict:
    """UNETLoader -> [Krea2CacheDiT] -> ``guider`` -> SamplerCustomAdvanced -> SaveLatent.

    ``guider`` is the guider node ("class_type" and its non-model inputs); conds "2" (seed 1),
    "3" (seed 2, 13 tokens) and "8" (seed 3) are available to it. Node ids: "1" loader,
    "5" Cache-DiT, "9" guider, "11" sigmas, "12" sampler, "7" SaveLatent. ``sigmas_from``
    replaces the sigmas input (e.g. a SplitSigmas output).
    """
    prompt = krea2_prompt(steps=steps, sampler=sampler, cache=cache, seed=seed, size=size, neg_tokens=13,
                          prefix=prefix)
    model = prompt["6"]["inputs"]["model"]
    del prompt["6"]
    prompt["8"] = {"class_type": "Krea2TestConditioning",
                   "inputs": {"seed": 3, "tokens": 8, "features": TINY_CONTEXT_FEATURES}}
    prompt["9"] = {"class_type": guider["class_type"], "inputs": {"model": model, **guider["inputs"]}}
    prompt["10"] = {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}}
    prompt["11"] = {"class_type": "BasicScheduler",
                    "inputs": {"model": model, "scheduler": "simple", "steps": steps, "denoise": 1.0}}
    prompt["12"] = {"class_type": "KSamplerSelect", "inputs": {"sampler_name": sampler}}
    prompt["13"] = {"class_type": "SamplerCustomAdvanced", "inputs": {
        "noise": ["10", 0], "guider": ["9", 0], "sampler": ["12", 0], "sigmas": sigmas_from or ["11", 0],
        "latent_image": ["4", 0]}}
    prompt["7"]["inputs"]["samples"] = ["13", 0]
    return prompt


PROXY_MODEL = "krea2_proxy.safetensors"                # the small trained Krea-2 (devkit/krea2_proxy.py)
# The proxy distilled to 8 steps at CFG 1 (devkit/krea2_turbo_proxy.py): the few-step (Turbo-like) regime's model.
TURBO_PROXY_MODEL = "krea2_turbo_proxy.safetensors"
PROXY_RANDOM_MODEL = "krea2_proxy_random.safetensors"  # seeded-random weights of the proxy's shape
# The small trained Flux (devkit/flux_proxy.py): the same data set and class conditionings, with Flux's pooled vector.
FLUX_PROXY_MODEL = "flux_proxy.safetensors"
PROXY_SIZE = 128


def proxy_prompt(*, label: int, cfg=1.0, steps=8, cache: dict | None = None, seed=0, batch=1,
                 model=PROXY_MODEL, prefix="krea2_proxy", nonce: int | None = None) -> dict:
    """``krea2_prompt`` for the proxy: class ``label``'s conditioning as the positive prompt, that
    conditioning zeroed (``ConditioningZeroOut``, what the proxy learned as "no prompt") as the
    negative, 128x128. Node ids as in ``krea2_prompt``; "3" is the ConditioningZeroOut. The Flux proxy's
    conditioning carries the pooled vector it learned beside the tokens (zeroed with them)."""
    from devkit.krea2_proxy import SETTINGS, class_seed

    prompt = krea2_prompt(cfg=cfg, steps=steps, cache=cache, seed=seed, size=PROXY_SIZE, batch=batch, model=model,
                          pos_tokens=SETTINGS.tokens, prefix=prefix, nonce=nonce)
    prompt["2"]["inputs"].update(seed=class_seed(label), features=SETTINGS.context_features)
    if model == FLUX_PROXY_MODEL:   # and the any-DiT cache node: the Krea-2 node refuses a Flux model
        from devkit.flux_proxy import SETTINGS as FLUX

        prompt["2"]["inputs"]["pooled_features"] = FLUX.pooled_features
        if cache is not None:
            prompt["5"]["class_type"] = "CacheDiTDBCache"
    prompt["3"] = {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": ["2", 0]}}
    return prompt
