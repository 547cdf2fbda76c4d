"""The methods the nodes offer, behind one face: a plan for a run, then a run on one device or several.

A node's holder names its method; the sampling wrappers ask the method for the run's plan and
its run, and never branch on which method it is. Adding a method is one more ``Method`` here
and a run class with ``CacheRun``'s face (``model_call``, ``uncached``, ``warn_once``, ``outcome``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .cache_run import CacheRun
from .forecast_run import ForecastRun
from .forecast_settings import plan_forecast_run
from .registry import ResolvedTransformer
from .settings import check_compute_blocks, plan_run


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    # (settings, steps, target, node name) -> the run's plan; raises a ValueError naming the input.
    plan: Callable
    # (settings, target, node name) -> None: a refusal, at the node, of what can never run on this model.
    check: Callable
    run_type: type                # one device's run
    shares_decisions: bool        # several devices: one decision per step for all (else each its own)


def _check_final_layer(settings, target: ResolvedTransformer, node_name: str) -> None:
    family = target.family
    if not family.final_layer or not hasattr(target.module, family.final_layer):
        raise ValueError(f"{node_name}: {family.name} has no known final layer to forecast the feature of; "
                         f"use the Cache-DiT DBCache node for this model.")


DBCACHE = Method(
    name="DBCache",
    plan=lambda settings, steps, target, node_name: plan_run(settings, steps, target.cacheable_blocks, node_name),
    check=lambda settings, target, node_name: check_compute_blocks(settings, target.cacheable_blocks, node_name),
    run_type=CacheRun, shares_decisions=True)

WHOLE_CALL_FORECAST = Method(
    name="whole-call forecast",
    plan=lambda settings, steps, target, node_name: plan_forecast_run(settings, steps),
    check=_check_final_layer,
    # The schedule decides each step alike on every device; a device's history is its own conds'.
    run_type=ForecastRun, shares_decisions=False)
