"""Which sampling step a model call belongs to.

A step is a change of sigma, not a call: heun evaluates the model twice per
step, dpmpp_2s_ancestral at an intermediate sigma, and guiders may call it
for more than two conds. Every call is mapped onto the step interval of the
sampler's own sigma schedule that contains its sigma.
"""

from __future__ import annotations

import torch


class StepClock:
    def __init__(self, sigmas: torch.Tensor):
        values = [float(s) for s in torch.as_tensor(sigmas).flatten().cpu()]
        if len(values) < 2:
            raise ValueError("a sigma schedule needs at least two values (one step)")
        self.sigmas = values
        self.steps = len(values) - 1

    def step_of(self, sigma) -> int:
        """Index i of the step whose interval [sigma[i+1], sigma[i]] holds ``sigma``."""
        s = float(torch.as_tensor(sigma).flatten().max()) if not isinstance(sigma, (int, float)) else float(sigma)
        # Sigmas arrive cast to the model dtype and back: compare with a relative tolerance.
        tolerance = 1e-4 * max(abs(s), 1e-6)
        started = sum(1 for value in self.sigmas[:-1] if value >= s - tolerance)
        return min(max(started - 1, 0), self.steps - 1)
