"""The Cache-DiT DBCache nodes: settings in, a MODEL clone with the cache wrappers out.

Both nodes are built from one description of their settings (``SETTINGS``): ``CacheDiTDBCache``
takes any supported family, ``Krea2CacheDiT`` the Krea-2 ones (deprecated: its id, inputs and behaviour
are what saved workflows hold). The inputs' order is the widgets' order in saved workflows: append only;
a label (``display_name``) may change, an input's name may not.
"""

from __future__ import annotations

import dataclasses

from comfy_api.latest import io

from ..adapters.dbcache.calibrators import CALIBRATORS, DMD_HISTORY, TAYLORSEER_ORDERS
from ..adapters.dbcache.settings import STEP_MASKS, DBCacheSettings
from ..adapters.families.registry import ANY_SCOPE, KREA2_SCOPE, NodeScope
from ..adapters.methods import DBCACHE
from .input_checks import schema_problem
from .plain_errors import plain_errors
from .wrappers import patched_model

CATEGORY = "model/patch/Cache-DiT"
DEFAULTS = DBCacheSettings()


@dataclasses.dataclass(frozen=True)
class Setting:
    """One input of the cache nodes: a ``DBCacheSettings`` field, its label, widget bounds and tooltip.

    The figures behind the defaults and the masks are on the nodes' help pages (web/docs, "Evidence"): a
    tooltip says what the input does and when to change it, in at most 250 characters."""

    name: str
    display_name: str
    tooltip: str
    minimum: float | None = None
    maximum: float | None = None
    step: float | None = None          # a float widget's step (None: an int widget)
    options: tuple[str, ...] = ()      # a combo's choices
    advanced: bool = False             # behind the editor's "advanced" toggle: rarely changed

    def widget(self) -> io.Input:
        default = getattr(DEFAULTS, self.name)
        shown = dict(display_name=self.display_name, tooltip=self.tooltip, advanced=self.advanced or None)
        if self.options:
            return io.Combo.Input(self.name, options=list(self.options), default=default, **shown)
        if self.step is not None:
            return io.Float.Input(self.name, default=default, min=self.minimum, max=self.maximum, step=self.step,
                                  **shown)
        return io.Int.Input(self.name, default=default, min=self.minimum, max=self.maximum, **shown)


SETTINGS: tuple[Setting, ...] = (
    Setting("steps_mask", "step mask", options=STEP_MASKS, tooltip=(
        "Caches a fixed set of steps; 'none' (default) lets the threshold decide. The names say how many steps "
        "are cached, not sampler speed: slow the fewest, then medium, fast, ultra the most (fastest, least "
        "close).")),
    Setting("Fn_compute_blocks", "first blocks always computed", minimum=1, maximum=64, tooltip=(
        "How many first blocks every step computes; their change decides whether a step is cached. Raise it "
        "for a closer image at less speed.")),
    Setting("Bn_compute_blocks", "last blocks always computed", minimum=0, maximum=64, advanced=True, tooltip=(
        "How many last blocks every step computes, cached steps too, to refine them. Raise it for a closer "
        "image at less speed.")),
    Setting("residual_diff_threshold", "threshold", minimum=0.0, maximum=2.0, step=0.01, tooltip=(
        "Cache a step when the first blocks changed less than this. Higher is faster, lower is closer to the "
        "uncached image; 0 turns it off. After a run the node suggests thresholds to try.")),
    Setting("max_warmup_steps", "warmup steps", minimum=0, maximum=1000, tooltip=(
        "Steps at the start that are always computed. Lower it (or use a step mask) for schedules of a few "
        "steps, which end inside the default warmup.")),
    Setting("warmup_interval", "warmup interval", minimum=1, maximum=100, advanced=True,
            tooltip="Compute only every n-th warmup step (1: all of them). Rarely changed."),
    Setting("max_cached_steps", "max cached steps", minimum=-1, maximum=1000, advanced=True,
            tooltip="Most steps cached in one run (-1: no limit). Set it to cap how many steps are cached."),
    Setting("max_continuous_cached_steps", "max cached steps in a row", minimum=-1, maximum=1000, advanced=True,
            tooltip=("Most cached steps in a row before one is computed again (-1: no limit). Lower it if "
                     "details drift; raise it for speed.")),
    Setting("calibrator", "calibrator", options=CALIBRATORS, tooltip=(
        "What a cached step serves: the last computed result (none, default) or a forecast of it "
        "(taylorseer, foca, dmd). Try taylorseer on long schedules; no forecast is measured on real Krea-2 "
        "weights.")),
    Setting("taylorseer_order", "taylorseer order", minimum=TAYLORSEER_ORDERS[0], maximum=TAYLORSEER_ORDERS[1],
            advanced=True, tooltip="Order of the taylorseer forecast (1 or 2 recommended). Read only with calibrator "
                                   "taylorseer."),
    Setting("dmd_history", "dmd history (steps)", minimum=DMD_HISTORY[0], maximum=DMD_HISTORY[1], advanced=True,
            tooltip="Computed steps the dmd forecast is fitted on (5-6 recommended). Read only with calibrator dmd."),
)


class _CacheDiTNode(io.ComfyNode):
    """What both cache nodes are; a subclass names itself and the families it accepts."""

    SCOPE: NodeScope
    NODE_ID: str
    DISPLAY_NAME: str
    DESCRIPTION: str
    MODEL_TOOLTIP: str
    DEPRECATED = False

    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=cls.NODE_ID,
            display_name=cls.DISPLAY_NAME,
            category=CATEGORY,
            description=cls.DESCRIPTION,
            inputs=[io.Model.Input("model", tooltip=cls.MODEL_TOOLTIP), *(setting.widget() for setting in SETTINGS)],
            outputs=[io.Model.Output(tooltip="The model with Cache-DiT; the input model is unchanged.")],
            hidden=[io.Hidden.unique_id],
            is_deprecated=cls.DEPRECATED,
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
    def execute(cls, model, **settings) -> io.NodeOutput:
        with plain_errors():
            settings = DBCacheSettings(**{setting.name: settings[setting.name] for setting in SETTINGS})
            return io.NodeOutput(patched_model(model, cls.SCOPE, DBCACHE, settings, str(cls.hidden.unique_id or "")))


class Krea2CacheDiT(_CacheDiTNode):
    """Deprecated for ``CacheDiTDBCache``, which takes the same inputs and Krea-2 too: kept so that saved
    workflows load and run, out of the node search (the editor hides deprecated nodes there)."""

    SCOPE = KREA2_SCOPE
    NODE_ID = "Krea2CacheDiT"
    DISPLAY_NAME = "Krea-2 Cache-DiT"
    DEPRECATED = True
    DESCRIPTION = ("Deprecated: use \"Cache-DiT DBCache (any supported DiT)\", which takes the same inputs and "
                   "Krea-2 models too. This node stays so that saved workflows still load and run. It speeds up "
                   "Krea-2 sampling with cache-dit: steps whose early blocks barely change reuse the last computed "
                   "result.")
    MODEL_TOOLTIP = "A Krea-2 model from Load Diffusion Model or Load Krea-2 (diffusers)."


class CacheDiTDBCache(_CacheDiTNode):
    """The same node for every family of the registry (``ANY_SCOPE``)."""

    SCOPE = ANY_SCOPE
    NODE_ID = "CacheDiTDBCache"
    DISPLAY_NAME = "Cache-DiT DBCache (any supported DiT)"
    _FAMILIES = ", ".join(dict.fromkeys(f.model for f in ANY_SCOPE.families))
    DESCRIPTION = (f"Speeds up sampling of {_FAMILIES} with cache-dit's DBCache: steps whose early blocks barely "
                   "change reuse the last computed result. Put it between the model loader and the sampler. The "
                   "defaults are sglang's settings, measured on real Krea-2 weights; the evidence for them and for "
                   "the other families is on this node's help page. After each run the node shows what was cached "
                   "and why.")
    MODEL_TOOLTIP = f"A {_FAMILIES} model from Load Diffusion Model (Krea-2 also from Load Krea-2 (diffusers))."
