"""The methods the nodes offer, behind one face: a check at the node, a plan for a run, then its run.

A node's holder names its method; the node checks its settings through ``Method.check``, and the
sampling wrappers ask the method for the run's plan and open its run (``Method.open_run``), on one
device or several, and never branch on which method it is. Adding a method is one more ``Method``
here, a plan that is a ``RunPlan`` and a ``SamplingRun`` subclass (``sampling/seam.py``, ``sampling_run``).

What a method's run takes beyond every run's arguments it names in ``run_needs``; the wrappers offer
what they can make (``open_run``'s ``offers``) and only a method that needs it is handed it.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

from .dbcache.cache_run import CacheRun
from .dbcache.settings import check_compute_blocks, plan_run
from .families.registry import ResolvedTransformer
from .forecast.forecast_run import ForecastRun
from .forecast.forecast_settings import plan_forecast_run
from .sampling.multi_device import DeviceModel, MultiDeviceRun
from .sampling.sampling_run import SamplingRun
from .sampling.seam import Run, RunPlan
from .sampling.step_clock import StepClock


@dataclasses.dataclass(frozen=True)
class Method:
    name: str
    # (settings, steps, target, node name, sigmas=the run's, guided=more than one conditioning per step) -> the
    # run's plan; raises a ValueError naming the input.
    plan: Callable[..., RunPlan]
    # (settings, target, node name) -> None: a refusal, at the node, of what can never run on this model.
    check: Callable[[object, ResolvedTransformer, str], None]
    run_type: type[SamplingRun]   # one device's run
    # The keyword arguments its run takes beyond every run's (``SamplingRun.__init__``), e.g. DBCache's
    # "tell_block_index": only these of what the caller offers are made and handed to its run.
    run_needs: frozenset[str] = frozenset()

    def open_run(self, plan: RunPlan, clock: StepClock, *, target: ResolvedTransformer, host, conds_per_step: int,
                 devices: list[DeviceModel] = (), node_name: str, text_reuse_off: str | None = None,
                 offers: Mapping[str, Callable[[], object]] | None = None) -> Run:
        """The run of one sampling: on ``host``, or a run per device copy (``devices``: multi-GPU sampling).

        ``offers``: what the caller can make for a run that needs it, by the run's argument name; only this
        method's ``run_needs`` are made (a need nobody offers keeps the run's default)."""
        needed = {name: make() for name, make in (offers or {}).items() if name in self.run_needs}
        if devices:
            return MultiDeviceRun(list(devices), plan, clock, run_type=self.run_type, node_name=node_name,
                                  text_reuse_off=text_reuse_off, run_options=needed)
        return self.run_type(target, plan, clock, conds_per_step=conds_per_step, host=host, node_name=node_name,
                             text_reuse_off=text_reuse_off, **needed)


def _check_final_layer(settings, target: ResolvedTransformer, node_name: str) -> None:
    family = target.family
    if not family.final_layer or not hasattr(target.module, family.final_layer):
        raise ValueError(f"{node_name}: {family.name} has no known final layer to forecast the feature of; "
                         f"use the Cache-DiT DBCache node for this model.")


DBCACHE = Method(
    name="dbcache",
    plan=lambda settings, steps, target, node_name, sigmas=None, guided=True: plan_run(
        settings, steps, target.cacheable_blocks, node_name),
    check=lambda settings, target, node_name: check_compute_blocks(settings, target.cacheable_blocks, node_name),
    run_type=CacheRun,
    run_needs=frozenset({"tell_block_index"}))

FORECAST = Method(
    name="forecast",
    plan=lambda settings, steps, target, node_name, sigmas=None, guided=True: plan_forecast_run(
        settings.for_family(target.family), steps, sigmas, guided),
    check=_check_final_layer,
    run_type=ForecastRun)
