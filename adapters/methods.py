"""The methods the nodes offer, behind one face: a check at the node, a plan for a run, then its run.

A node's holder names its method; the node checks its settings through ``Method.check``, and the
sampling wrappers ask the method for the run's plan and open its run (``Method.open_run``), on one
device or several, and never branch on which method it is. Adding a method is one more ``Method``
here and a ``SamplingRun`` subclass (``sampling_run``) for its run.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from .dbcache.cache_run import CacheRun
from .dbcache.settings import check_compute_blocks, plan_run
from .families.registry import ResolvedTransformer
from .forecast.forecast_run import ForecastRun
from .forecast.forecast_settings import plan_forecast_run
from .sampling.multi_device import DeviceModel, MultiDeviceRun
from .sampling.sampling_run import BlockIndexTeller, SamplingRun


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    # (settings, steps, target, node name) -> the run's plan; raises a ValueError naming the input.
    plan: Callable
    # (settings, target, node name) -> None: a refusal, at the node, of what can never run on this model.
    check: Callable
    run_type: type[SamplingRun]   # one device's run

    def open_run(self, plan, clock, *, target: ResolvedTransformer, host, conds_per_step: int,
                 devices: list[DeviceModel] = (), node_name: str, tell_block_index: BlockIndexTeller | None = None,
                 text_reuse_off: str | None = None) -> SamplingRun | MultiDeviceRun:
        """The run of one sampling: on ``host``, or a run per device copy (``devices``: multi-GPU sampling)."""
        options = dict(node_name=node_name, tell_block_index=tell_block_index, text_reuse_off=text_reuse_off)
        if devices:
            return MultiDeviceRun(list(devices), plan, clock, run_type=self.run_type, **options)
        return self.run_type(target, plan, clock, conds_per_step=conds_per_step, host=host, **options)


def _check_final_layer(settings, target: ResolvedTransformer, node_name: str) -> None:
    family = target.family
    if not family.final_layer or not hasattr(target.module, family.final_layer):
        raise ValueError(f"{node_name}: {family.name} has no known final layer to forecast the feature of; "
                         f"use the Cache-DiT DBCache node for this model.")


DBCACHE = Method(
    name="dbcache",
    plan=lambda settings, steps, target, node_name: plan_run(settings, steps, target.cacheable_blocks, node_name),
    check=lambda settings, target, node_name: check_compute_blocks(settings, target.cacheable_blocks, node_name),
    run_type=CacheRun)

FORECAST = Method(
    name="forecast",
    plan=lambda settings, steps, target, node_name: plan_forecast_run(settings, steps),
    check=_check_final_layer,
    run_type=ForecastRun)
