"""What a ComfyUI guider really evaluates per step: its guidance scales and how many conds.

``cfg`` alone is not the answer: ``CFGGuider.__init__`` sets it to 1.0, and
guiders with other scales (dual CFG's ``cfg1``/``cfg2``, perp-neg's
``neg_scale``) never change it. Each stock guider skips a cond when its scale
makes it useless (ComfyUI's "CFG 1 optimization"), exactly as its own
``predict_noise`` does; the count decides whether one call per step is a
single stream or the first of several.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Guidance:
    guider: str              # the guider's class name
    cfg: float               # the scale on the main cond (cfg, or dual CFG's cfg1)
    scales: dict             # every scale the guider uses, for the stats
    conds_per_step: int      # conds it evaluates per step (1: no uncond pass)

    def as_dict(self) -> dict:
        return {"guider": self.guider, **self.scales, "conds_per_step": self.conds_per_step}


def _class_names(guider) -> set[str]:
    return {cls.__name__ for cls in type(guider).__mro__}


def _present(guider, name: str) -> bool:
    conds = getattr(guider, "original_conds", {}) or {}
    return bool(conds.get(name))


def _scale(guider, name: str, default: float = 1.0) -> float:
    value = getattr(guider, name, default)
    return float(value) if isinstance(value, (int, float)) else default


def read_guidance(guider) -> Guidance:
    names = _class_names(guider)
    keep_all = bool(getattr(guider, "model_options", {}).get("disable_cfg1_optimization", False))
    name = type(guider).__name__
    if "Guider_DualCFG" in names:
        cfg1, cfg2 = _scale(guider, "cfg1"), _scale(guider, "cfg2")
        nested = bool(getattr(guider, "nested", False))
        negative = _present(guider, "negative") and (nested or keep_all or not math.isclose(cfg2, 1.0))
        middle = _present(guider, "middle") and (nested or keep_all or not (math.isclose(cfg2, 1.0)
                                                                           and math.isclose(cfg1, 1.0)))
        count = sum((_present(guider, "positive"), middle, negative))
        return Guidance(name, cfg1, {"cfg1": cfg1, "cfg2": cfg2, "style": "nested" if nested else "regular"}, count)
    if "Guider_PerpNeg" in names:
        cfg, neg_scale = _scale(guider, "cfg"), _scale(guider, "neg_scale", 0.0)
        negative = _present(guider, "negative") and (keep_all or not math.isclose(neg_scale, 0.0))
        empty = _present(guider, "empty_negative_prompt") and (
            keep_all or not (math.isclose(neg_scale, 0.0) and math.isclose(cfg, 1.0)))
        count = sum((_present(guider, "positive"), negative, empty))
        return Guidance(name, cfg, {"cfg": cfg, "neg_scale": neg_scale}, count)
    if "Guider_Basic" in names:
        return Guidance(name, 1.0, {}, 1)
    # CFGGuider and guiders built like it: positive and negative, the negative skipped at CFG 1.
    cfg = _scale(guider, "cfg")
    negative = _present(guider, "negative") and (keep_all or not math.isclose(cfg, 1.0))
    present = [k for k, v in (getattr(guider, "original_conds", {}) or {}).items() if v]
    others = len([k for k in present if k not in ("positive", "negative")])
    return Guidance(name, cfg, {"cfg": cfg}, max(1, int(_present(guider, "positive")) + int(negative) + others))
