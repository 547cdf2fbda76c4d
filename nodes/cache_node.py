"""The Cache-DiT nodes: settings in, a MODEL clone with the cache wrappers out.

``CacheDiTDBCache`` takes any supported family; ``Krea2CacheDiT`` is the same node restricted to
Krea-2 (its id, inputs and behaviour are what saved workflows hold). Both build their schema here.
"""

from __future__ import annotations

from comfy_api.latest import io

from ..adapters.calibrators import CALIBRATORS, DMD_HISTORY, TAYLORSEER_ORDERS
from ..adapters.registry import ANY_SCOPE, KREA2_SCOPE, NodeScope, resolve
from ..adapters.settings import STEP_MASKS, CacheSettings, check_compute_blocks
from .input_checks import schema_problem
from .plain_errors import plain_errors
from .wrappers import CacheDiTHolder, install

DEFAULTS = CacheSettings()


def _int(name, default, minimum, maximum, tooltip):
    return io.Int.Input(name, default=default, min=minimum, max=maximum, tooltip=tooltip)


def _schema(node_id: str, display_name: str, description: str, model_tooltip: str) -> io.Schema:
    """The schema both cache nodes share: only their names and the model they take differ."""
    return io.Schema(
        node_id=node_id,
        display_name=display_name,
        category="Krea-2",
        description=description,
        inputs=[
            io.Model.Input("model", tooltip=model_tooltip),
            io.Combo.Input("steps_mask", options=list(STEP_MASKS), default=DEFAULTS.steps_mask, tooltip=(
                "Cache a fixed set of steps for a predictable speedup (slow < medium < fast < ultra). "
                "'none' (default): the residual threshold decides.")),
            _int("Fn_compute_blocks", DEFAULTS.Fn_compute_blocks, 1, 64,
                 "First blocks, always computed; their change decides whether a step is cached."),
            _int("Bn_compute_blocks", DEFAULTS.Bn_compute_blocks, 0, 64,
                 "Last blocks, always computed to refine a cached step."),
            io.Float.Input("residual_diff_threshold", default=DEFAULTS.residual_diff_threshold, min=0.0,
                           max=2.0, step=0.01, tooltip=(
                               "Cache a step when the first blocks changed less than this. Higher is faster, "
                               "lower is closer to the uncached image; 0 turns it off.")),
            _int("max_warmup_steps", DEFAULTS.max_warmup_steps, 0, 1000,
                 "Steps at the start that are always computed."),
            _int("warmup_interval", DEFAULTS.warmup_interval, 1, 100,
                 "Compute only every n-th warmup step (1: all of them)."),
            _int("max_cached_steps", DEFAULTS.max_cached_steps, -1, 1000,
                 "Most steps cached in one run (-1: no limit)."),
            _int("max_continuous_cached_steps", DEFAULTS.max_continuous_cached_steps, -1, 1000,
                 "Most cached steps in a row before one is computed again (-1: no limit)."),
            io.Combo.Input("calibrator", options=list(CALIBRATORS), default=DEFAULTS.calibrator, tooltip=(
                "What a cached step serves: the last computed result (none, default) or a forecast of it "
                "(taylorseer, foca, dmd). The forecasts are not measured on real Krea-2 weights.")),
            io.Int.Input("taylorseer_order", default=DEFAULTS.taylorseer_order, min=TAYLORSEER_ORDERS[0],
                         max=TAYLORSEER_ORDERS[1],
                         tooltip="Order of the taylorseer forecast (1 or 2 recommended)."),
            io.Int.Input("dmd_history", default=DEFAULTS.dmd_history, min=DMD_HISTORY[0], max=DMD_HISTORY[1],
                         tooltip="Computed steps the dmd forecast is fitted on (5-6 recommended)."),
        ],
        outputs=[io.Model.Output(tooltip="The model with Cache-DiT; the input model is unchanged.")],
        hidden=[io.Hidden.unique_id],
        # The MODEL it returns carries this node's id (its stats go to this node). ComfyUI's
        # cache would hand that MODEL to another node with the same inputs under another id
        # (it does not key V3 nodes by their hidden unique_id), so key it by node id.
        not_idempotent=True,
    )


class Krea2CacheDiT(io.ComfyNode):
    SCOPE: NodeScope = KREA2_SCOPE

    @classmethod
    def define_schema(cls) -> io.Schema:
        return _schema(
            "Krea2CacheDiT", "Krea-2 Cache-DiT",
            "Speeds up Krea-2 sampling with cache-dit: steps whose early blocks barely change reuse the "
            "last computed result. Put it between the model loader and the sampler. The defaults are the "
            "reference settings measured on real Krea-2 weights. After each run the node shows what was "
            "cached and why.",
            "A Krea-2 model from Load Diffusion Model or Load Krea-2 (diffusers).")

    @classmethod
    def validate_inputs(cls, **kwargs) -> bool | str:
        # At queue time: a bad number is refused with POST /prompt's 400 before anything runs.
        return schema_problem(cls.define_schema().inputs, kwargs) or True

    @classmethod
    def execute(cls, model, steps_mask, Fn_compute_blocks, Bn_compute_blocks, residual_diff_threshold,
                max_warmup_steps, warmup_interval, max_cached_steps, max_continuous_cached_steps,
                calibrator, taylorseer_order, dmd_history) -> io.NodeOutput:
        with plain_errors():
            settings = CacheSettings(
                Fn_compute_blocks=Fn_compute_blocks, Bn_compute_blocks=Bn_compute_blocks,
                residual_diff_threshold=residual_diff_threshold, max_warmup_steps=max_warmup_steps,
                warmup_interval=warmup_interval, max_cached_steps=max_cached_steps,
                max_continuous_cached_steps=max_continuous_cached_steps, calibrator=calibrator,
                taylorseer_order=taylorseer_order, dmd_history=dmd_history, steps_mask=steps_mask)
            return cls._patched(model, settings)

    @classmethod
    def _patched(cls, model, settings: CacheSettings) -> io.NodeOutput:
        target = resolve(model.model.diffusion_model, cls.SCOPE)
        check_compute_blocks(settings, target.cacheable_blocks, cls.SCOPE.node_name)
        patched = model.clone()
        install(patched, CacheDiTHolder(settings=settings, node_id=str(cls.hidden.unique_id or ""),
                                        node_name=cls.SCOPE.node_name))
        return io.NodeOutput(patched)


class CacheDiTDBCache(Krea2CacheDiT):
    """The same node for every supported family (Krea-2, Wan 2.1/2.2, Z-Image, Qwen-Image, Flux.1 / Flux.2)."""

    SCOPE: NodeScope = ANY_SCOPE

    @classmethod
    def define_schema(cls) -> io.Schema:
        families = ", ".join(dict.fromkeys(f.model for f in cls.SCOPE.families))
        return _schema(
            "CacheDiTDBCache", "Cache-DiT DBCache (any supported DiT)",
            f"Speeds up sampling of {families} with cache-dit's DBCache: steps whose early blocks barely "
            "change reuse the last computed result. Put it between the model loader and the sampler. The "
            "defaults are the reference settings measured on real Krea-2 weights; no other family has "
            "published settings for them. After each run the node shows what was cached and why.",
            f"A {families} model from Load Diffusion Model (Krea-2 also from Load Krea-2 (diffusers)).")
