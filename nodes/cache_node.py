"""The Krea-2 Cache-DiT node: settings in, a MODEL clone with the cache wrappers out."""

from __future__ import annotations

from comfy_api.latest import io

from ..adapters.calibrators import CALIBRATORS, DMD_HISTORY, TAYLORSEER_ORDERS
from ..adapters.registry import resolve
from ..adapters.settings import STEP_MASKS, CacheSettings, check_compute_blocks
from .input_checks import schema_problem
from .plain_errors import plain_errors
from .wrappers import CacheDiTHolder, install

DEFAULTS = CacheSettings()


def _int(name, default, minimum, maximum, tooltip):
    return io.Int.Input(name, default=default, min=minimum, max=maximum, tooltip=tooltip)


class Krea2CacheDiT(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="Krea2CacheDiT",
            display_name="Krea-2 Cache-DiT",
            category="Krea-2",
            description=(
                "Speeds up Krea-2 sampling with cache-dit (DBCache, calibrators, step masks). Put it between "
                "the model loader and the sampler. The defaults are the reference DBCache settings measured on "
                "real Krea-2 weights (F1B0, warmup 4, threshold 0.24, at most 3 cached steps in a row). "
                "Whether cond and uncond are cached separately follows the CFG and batching the sampler "
                "actually uses, per run. After each run the node shows what was cached and why."),
            inputs=[
                io.Model.Input("model", tooltip="A Krea-2 MODEL (Load Diffusion Model or Load Krea-2 (diffusers))."),
                io.Combo.Input("steps_mask", options=list(STEP_MASKS), default=DEFAULTS.steps_mask, tooltip=(
                    "cache-dit step mask built for the run's step count: masked steps are served from the cache, "
                    "so the speedup is predictable (slow < medium < fast < ultra), and a masked step is never "
                    "computed. 'none' (default): decide by the residual threshold. Needs 4, 6 or at least 8 "
                    "steps; other counts run without a mask and say so in the stats.")),
                _int("Fn_compute_blocks", DEFAULTS.Fn_compute_blocks, 1, 64,
                     "First blocks always computed; cache-dit measures the change between steps on them."),
                _int("Bn_compute_blocks", DEFAULTS.Bn_compute_blocks, 0, 64,
                     "Last blocks always computed, to refine a cached result."),
                io.Float.Input("residual_diff_threshold", default=DEFAULTS.residual_diff_threshold, min=0.0,
                               max=2.0, step=0.01, tooltip=(
                                   "Reuse the cache when the first blocks' residual changed less than this "
                                   "(relative, against the last computed step). Higher is faster, lower is "
                                   "closer to the uncached image. 0 turns threshold caching off; 1 or more "
                                   "caches every step the other limits allow. After a run the node suggests "
                                   "thresholds from the measured changes.")),
                _int("max_warmup_steps", DEFAULTS.max_warmup_steps, 0, 1000,
                     "Steps at the start that are always computed."),
                _int("warmup_interval", DEFAULTS.warmup_interval, 1, 100,
                     "Compute every n-th warmup step only (1: compute all warmup steps)."),
                _int("max_cached_steps", DEFAULTS.max_cached_steps, -1, 1000,
                     "Most steps served from the cache in one run (-1: no limit)."),
                _int("max_continuous_cached_steps", DEFAULTS.max_continuous_cached_steps, -1, 1000,
                     "Most cached steps in a row before one is computed again (-1: no limit)."),
                io.Combo.Input("calibrator", options=list(CALIBRATORS), default=DEFAULTS.calibrator, tooltip=(
                                   "What a cached step serves. none (default, as in the reference settings): the "
                                   "last computed step's residual as is. taylorseer: a Taylor forecast of it "
                                   "(taylorseer_order). foca: an ODE predictor-corrector forecast. dmd: an "
                                   "exponential (Dynamic Mode Decomposition) forecast fitted on the last "
                                   "dmd_history computed steps; until 4 evenly spaced computed steps exist it "
                                   "serves a first-order Taylor forecast. Not measured on real Krea-2 weights.")),
                io.Int.Input("taylorseer_order", default=DEFAULTS.taylorseer_order, min=TAYLORSEER_ORDERS[0],
                             max=TAYLORSEER_ORDERS[1],
                             tooltip="calibrator taylorseer only: order of the Taylor forecast (1 or 2 recommended)."),
                io.Int.Input("dmd_history", default=DEFAULTS.dmd_history, min=DMD_HISTORY[0], max=DMD_HISTORY[1],
                             tooltip=(
                                 "calibrator dmd only: computed steps its fit uses (at least 4; cache-dit "
                                 "recommends 5-6). Each is a full residual kept in memory per CFG stream.")),
            ],
            outputs=[io.Model.Output(tooltip="A copy of the model that samples with Cache-DiT; the input is unchanged.")],
            hidden=[io.Hidden.unique_id],
            # The MODEL it returns carries this node's id (its stats go to this node). ComfyUI's
            # cache would hand that MODEL to another node with the same inputs under another id
            # (it does not key V3 nodes by their hidden unique_id), so key it by node id.
            not_idempotent=True,
        )

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
        target = resolve(model.model.diffusion_model)
        check_compute_blocks(settings, target.num_blocks)
        patched = model.clone()
        install(patched, CacheDiTHolder(settings=settings, node_id=str(cls.hidden.unique_id or "")))
        return io.NodeOutput(patched)
