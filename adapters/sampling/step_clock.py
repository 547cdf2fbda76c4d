"""Which sampling step a model call belongs to.

A step is what the sampler integrates from ``sigma[i]`` to ``sigma[i+1]``, not a
call: heun evaluates the model again at ``sigma[i+1]`` (its corrector),
dpmpp_2s_ancestral at an intermediate sigma, heunpp2 even at ``sigma[i+2]``, and
guiders may call it for more than two conds. The clock attributes every call to
the step the sampler is integrating, from two sources:

- the sampler's own step index: ComfyUI's samplers call back with ``i`` right
  after the first evaluation of step ``i`` (``step_reported``). So every call
  before the first report is step 0, and after the report of step ``i`` a call
  is step ``i + 1`` only if it is that step's first evaluation, at
  ``sigma[i+1]``; anything else (intermediate sigmas, evaluations further on)
  is still step ``i``.
- the sampler's kind: a *corrector* sampler (heun and its kin) evaluates step
  ``i``'s corrector at ``sigma[i+1]`` before step ``i + 1`` evaluates there
  too. For those, the first call of each stream at ``sigma[i+1]`` is step
  ``i``'s, and a repeat is step ``i + 1``'s. The node names known correctors;
  an unknown one shows itself by such a repeat and is handled from then on.

A *single-evaluation* sampler (euler and its kin, named by the node) calls the
model once per stream and step, each step before its report: there the reports
alone say the step, and the call's sigma is never read. Reading it waits for the
device (``float`` of a CUDA tensor syncs), so other samplers read it once per call.

A sampler that never calls back shows itself by running two steps ahead of its
reports; then, as for a caller without a sampler (``sampler_reports=False``),
the call's sigma alone decides: the nearest schedule value within rounding
(robust to bf16/fp16), else the interval that holds it.

"Churn" (``s_churn > 0`` on euler, heun, dpm_2, heunpp2) moves each step's first
evaluation up from ``sigma[i]`` to ``sigma_hat[i] = sigma[i] * (1 + gamma)``; the
clock takes those starts (``start_sigmas``, see ``churned_start_sigmas``).

Where the clock had to guess (a sampler that never reported, a corrector sampler
learnt mid-run) ``warnings`` says so, for the run's record.
"""

from __future__ import annotations

import torch

# Without the sampler's reports, a sigma within this share of the gap to its neighbours is that
# schedule value: bf16 rounding moves Krea-2's 52-step "simple" sigmas by at most 12% of a gap.
SNAP_SHARE_OF_GAP = 0.3
# With them, the first evaluation of step i is at sigma[i] itself, up to the rounding of the dtype
# it went through (one bf16 ulp, 2**-8 relative); an intermediate sigma can lie much nearer to
# sigma[i] than a share of the gap (dpmpp_2s_ancestral's often do).
SAME_SIGMA_RELATIVE = 2.0 ** -8


class StepClock:
    def __init__(self, sigmas: torch.Tensor, sampler_reports: bool = False, corrector: bool = False,
                 start_sigmas: list[float] | None = None, single_evaluation: bool = False):
        values = [float(s) for s in torch.as_tensor(sigmas, dtype=torch.float32).flatten().cpu()]
        if len(values) < 2:
            raise ValueError("a sigma schedule needs at least two values (one step)")
        self.sigmas = values
        self.steps = len(values) - 1
        # Where each step's first evaluation is: sigma[i] itself, unless the sampler churns.
        self.starts = list(start_sigmas) if start_sigmas is not None else values[:-1]
        if len(self.starts) != self.steps:
            raise ValueError(f"start_sigmas needs one value per step ({self.steps}), got {len(self.starts)}")
        self.sampler_reports = sampler_reports  # until the sampler shows it does not
        self.corrector = corrector
        self.single_evaluation = single_evaluation and sampler_reports
        self.reported = 0                       # reports so far: step ``reported - 1`` is under way
        self._seen_at_next: set = set()         # streams already called at sigma[reported] since the report
        self._seen_since_report: set = set()    # single-evaluation samplers: streams called since the report
        self._expected_reports = sampler_reports
        self.fell_back_at: int | None = None       # the step where it stopped waiting for reports
        self.corrector_learnt_at: int | None = None

    def step_reported(self, step: int) -> None:
        """The sampler's callback: step ``step`` had its first evaluation."""
        if step + 1 > self.reported:
            self.reported = step + 1
            self._seen_at_next = set()
            self._seen_since_report = set()

    def step_of(self, sigma, stream=None) -> int:
        """The step a model call at ``sigma`` (of stream ``stream``, e.g. its cond/uncond key) belongs to.

        ``sigma`` may be a device tensor: it is read only where the reports do not decide.
        """
        if self.single_evaluation:
            if stream not in self._seen_since_report:
                self._seen_since_report.add(stream)
                return min(self.reported, self.steps - 1)  # after the report of step i, calls are step i + 1
            # A stream called twice between reports: this sampler does not report every step (or
            # evaluates more than once), so the reports alone cannot tell its steps apart.
            self.single_evaluation = False
        sigma = sigma_value(sigma)  # one device read for the checks below
        by_sigma = self.step_by_sigma(sigma)
        if self.sampler_reports and by_sigma >= self.reported + 2:
            self.sampler_reports = False  # two steps ahead of the reports: this sampler never calls back
            self.fell_back_at = by_sigma
        if not self.sampler_reports:
            return by_sigma
        if self.reported == 0:
            return 0
        current, upcoming = self.reported - 1, min(self.reported, self.steps - 1)
        if upcoming == current or not self._is_sigma_of(sigma, self.reported):
            return current  # an intermediate or look-ahead evaluation of the step under way
        if self.starts[upcoming] != self.sigmas[upcoming]:
            return upcoming  # a churned start: no corrector evaluates there
        if stream in self._seen_at_next:
            # A repeat at sigma[i+1]: the first one was step i's corrector; learnt for later steps.
            if not self.corrector:
                self.corrector, self.corrector_learnt_at = True, current
            return upcoming
        self._seen_at_next.add(stream)
        return current if self.corrector else upcoming

    def step_by_sigma(self, sigma) -> int:
        """The step whose start is ``sigma`` (within rounding), else the one whose interval holds it."""
        s = sigma_value(sigma)
        nearest = min(range(len(self.sigmas)), key=lambda k: abs(self.sigmas[k] - s))
        if self._is_schedule_value(s, nearest):
            return min(nearest, self.steps - 1)
        started = sum(1 for value in self.sigmas[:-1] if value > s)
        return min(max(started - 1, 0), self.steps - 1)

    def warnings(self) -> list[str]:
        """What the clock had to guess in this run, in words for the run's record."""
        notes = []
        if self._expected_reports and self.fell_back_at is not None:
            notes.append(
                f"The sampler never reported its steps: from step {self.fell_back_at} on, steps were matched by "
                f"the sigma of each call, and the calls before may be counted to the step before theirs "
                f"(computed in full). Step masks and step numbers of this run may be off by one.")
        if self.corrector_learnt_at is not None:
            notes.append(
                f"The sampler evaluates a corrector at the next step's sigma (like heun) but is not a known "
                f"corrector sampler: learnt at step {self.corrector_learnt_at}, whose corrector call was counted "
                f"to step {self.corrector_learnt_at + 1}; later steps are attributed correctly.")
        return notes

    def _is_sigma_of(self, sigma, k: int) -> bool:
        """Whether ``sigma`` is step ``k``'s first evaluation (``k == steps``: the end of the schedule)."""
        value = self.starts[k] if k < self.steps else self.sigmas[k]
        return abs(value - sigma_value(sigma)) <= SAME_SIGMA_RELATIVE * abs(value) + 1e-12

    def _is_schedule_value(self, sigma, k: int) -> bool:
        return abs(self.sigmas[k] - sigma_value(sigma)) <= SNAP_SHARE_OF_GAP * self._gap_at(k)

    def _gap_at(self, k: int) -> float:
        gaps = [abs(self.sigmas[k] - self.sigmas[j]) for j in (k - 1, k + 1) if 0 <= j < len(self.sigmas)]
        gaps = [g for g in gaps if g > 0]
        return min(gaps) if gaps else 0.0


def churned_start_sigmas(sigmas, s_churn: float, s_tmin: float = 0.0, s_tmax: float = float("inf")) -> list[float]:
    """Each step's first-evaluation sigma under k-diffusion's churn (euler, heun, dpm_2, heunpp2)."""
    values = [float(s) for s in torch.as_tensor(sigmas, dtype=torch.float32).flatten().cpu()]
    gamma = min(s_churn / (len(values) - 1), 2 ** 0.5 - 1) if s_churn > 0 else 0.0
    return [s * (gamma + 1) if s_tmin <= s <= s_tmax else s for s in values[:-1]]


def sigma_value(sigma) -> float:
    """A call's sigma as a float (read from the device once per call: each read waits for it)."""
    if isinstance(sigma, (int, float)):
        return float(sigma)
    # A batched call carries one sigma per sample; they are equal within a step.
    return float(torch.as_tensor(sigma).detach().flatten().float().max())
