"""The per-call clock under ComfyUI's TorchCompileModel.

The pack's per-call wrapper runs inside the diffusion model's forward, which TorchCompileModel compiles.
On a GPU the clock records CUDA events: traced by dynamo, they would become graph ops and the events the
record reads later would never be recorded ("Both events must be recorded", which failed every compiled
prompt on an H200). The clock's methods are kept out of compilation; this machine has no CUDA, so the
event path itself is checked by the GPU check (docs/gpu-check.md).
"""

from __future__ import annotations

import time

import torch

from krea2_cachedit.adapters.sampling.observation import CallTimer


def test_the_clock_is_kept_out_of_compiled_code():
    for method in (CallTimer.__init__, CallTimer.stop):
        assert getattr(method, "_torchdynamo_disable", False), (
            f"CallTimer.{method.__name__} would be traced by torch.compile: its CUDA events would never be recorded")


def test_a_clock_started_inside_compiled_code_times_the_call():
    timers = []

    def call(x):
        timer = CallTimer(None)
        time.sleep(0.05)
        y = torch.sin(x) * 2
        timer.stop()
        timers.append(timer)
        return y

    compiled = torch.compile(call, backend="eager")
    for _ in range(2):
        compiled(torch.ones(4))
    assert len(timers) == 2
    assert all(0.05 <= timer.seconds() < 5.0 for timer in timers), [timer.seconds() for timer in timers]
