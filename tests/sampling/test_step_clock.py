"""Which step a model call belongs to, call by call, as ComfyUI's samplers make them."""

from __future__ import annotations

import pytest
import torch

from krea2_cachedit.adapters.sampling.step_clock import StepClock, churned_start_sigmas

COND, UNCOND = "cond", "uncond"


def krea2_simple_sigmas(steps: int, shift: float = 1.15) -> torch.Tensor:
    """ComfyUI's "simple" schedule on Krea-2's flow model (shift 1.15), as float32 like the samplers use."""
    timesteps = torch.arange(1, 1001, dtype=torch.float64) / 1000
    table = shift * timesteps / (1 + (shift - 1) * timesteps)
    stride = len(table) / steps
    return torch.tensor([float(table[-(1 + int(x * stride))]) for x in range(steps)] + [0.0], dtype=torch.float32)


@pytest.mark.parametrize("steps", [8, 52])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rounded_sigmas_map_to_their_own_step(steps, dtype):
    sigmas = krea2_simple_sigmas(steps)
    rounded = sigmas.to(dtype).float()
    assert not torch.equal(rounded, sigmas), "the test needs sigmas that rounding moves"
    clock = StepClock(sigmas)
    assert [clock.step_by_sigma(s) for s in rounded[:-1]] == list(range(steps))
    # The same with the sampler's reports, as in a ComfyUI run of a sampler that rounds.
    reporting = StepClock(sigmas, sampler_reports=True)
    seen = []
    for i, sigma in enumerate(rounded[:-1]):
        seen.append(reporting.step_of(sigma, COND))
        reporting.step_reported(i)
    assert seen == list(range(steps))


def test_sigmas_between_schedule_values_belong_to_the_interval():
    clock = StepClock(torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    assert clock.steps == 4
    assert [clock.step_by_sigma(s) for s in (1.0, 0.9, 0.75, 0.6, 0.5, 0.25, 0.1, 0.0)] == [0, 0, 1, 1, 2, 3, 3, 3]


def test_a_call_gets_the_step_of_its_sigma():
    clock = StepClock(torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    assert clock.steps == 4
    assert [clock.step_of(s) for s in (1.0, 0.9, 0.75, 0.6, 0.5, 0.25, 0.1)] == [0, 0, 1, 1, 2, 3, 3]
    assert clock.step_of(torch.tensor([0.75, 0.75]).half().float()) == 1


def run_sampler(clock: StepClock, pattern: list[list[float]], streams=(COND,)) -> list[int]:
    """Steps the clock gives a sampler whose step i evaluates at ``pattern[i]`` (the first one
    at sigma[i], then its further evaluations) and calls back after the first evaluation."""
    steps = []
    for i, sigmas in enumerate(pattern):
        for n, sigma in enumerate(sigmas):
            for stream in streams:
                steps.append(clock.step_of(sigma, stream))
            if n == 0:
                clock.step_reported(i)
    return steps


SIGMAS = krea2_simple_sigmas(8)


def heun_pattern(sigmas):
    s = [float(v) for v in sigmas]
    return [[s[i]] + ([s[i + 1]] if s[i + 1] > 0 else []) for i in range(len(s) - 1)]


def expected(pattern, streams=1):
    return [i for i, sigmas in enumerate(pattern) for _ in sigmas for _ in range(streams)]


@pytest.mark.parametrize("streams", [(COND,), (COND, UNCOND)], ids=["one_stream", "split"])
def test_heun_corrector_belongs_to_the_step_it_corrects(streams):
    pattern = heun_pattern(SIGMAS)
    clock = StepClock(SIGMAS, sampler_reports=True, corrector=True)
    assert run_sampler(clock, pattern, streams) == expected(pattern, len(streams))


def test_an_unknown_corrector_sampler_is_learnt_after_its_first_step():
    pattern = heun_pattern(SIGMAS)
    clock = StepClock(SIGMAS, sampler_reports=True, corrector=False)
    steps = run_sampler(clock, pattern)
    assert clock.corrector
    # Only the first corrector is taken for the next step's call, before the repeat shows what it was.
    assert steps[:3] == [0, 1, 1] and steps[3:] == expected(pattern)[3:]


def test_intermediate_sigmas_close_to_the_next_step_stay_in_their_step():
    """dpmpp_2s_ancestral evaluates between sigma[i] and sigma[i+1], sometimes very near sigma[i+1]."""
    s = [float(v) for v in SIGMAS]
    pattern = [[s[i], s[i + 1] + 0.25 * (s[i] - s[i + 1])] for i in range(7)] + [[s[7]]]
    clock = StepClock(SIGMAS, sampler_reports=True)
    assert run_sampler(clock, pattern, (COND, UNCOND)) == expected(pattern, 2)


def test_heunpp2_look_ahead_evaluations_stay_in_their_step():
    s = [float(v) for v in SIGMAS]
    pattern = [[s[i], s[i + 1], s[i + 2]] for i in range(6)] + [[s[6], s[7]], [s[7]]]
    clock = StepClock(SIGMAS, sampler_reports=True, corrector=True)
    assert run_sampler(clock, pattern) == expected(pattern)


def test_a_sampler_that_never_reports_is_clocked_by_sigma():
    clock = StepClock(SIGMAS, sampler_reports=True)
    steps = [clock.step_of(float(s), COND) for s in SIGMAS[:-1]]
    assert not clock.sampler_reports
    # Step 1 has to wait for the evidence (step 2 arriving without a report); from then on it is exact.
    assert steps[0] == 0 and steps[2:] == list(range(2, 8))


def test_one_sigma_is_not_a_schedule():
    with pytest.raises(ValueError, match="at least two values"):
        StepClock(torch.tensor([0.5]))


def churned_pattern(starts, sigmas, corrector=False):
    """Step i evaluates first at its churned start, then (heun) its corrector at sigma[i+1]."""
    s = [float(v) for v in sigmas]
    return [[starts[i]] + ([s[i + 1]] if corrector and s[i + 1] > 0 else []) for i in range(len(s) - 1)]


@pytest.mark.parametrize("corrector", [False, True], ids=["euler", "heun"])
def test_churn_moves_each_first_evaluation_and_stays_in_its_step(corrector):
    # s_churn 4 over 8 steps: gamma = 0.5 -> min(0.5, sqrt(2) - 1): every start is 41% above sigma[i].
    starts = churned_start_sigmas(SIGMAS, s_churn=4.0)
    assert starts[3] == pytest.approx(float(SIGMAS[3]) * 2 ** 0.5)
    pattern = churned_pattern(starts, SIGMAS, corrector)
    clock = StepClock(SIGMAS, sampler_reports=True, corrector=corrector, start_sigmas=starts)
    assert run_sampler(clock, pattern, (COND, UNCOND)) == expected(pattern, 2)
    assert clock.warnings() == []


def test_churn_only_within_s_tmin_s_tmax():
    starts = churned_start_sigmas(SIGMAS, s_churn=1.0, s_tmin=0.2, s_tmax=0.8)
    for start, sigma in zip(starts, SIGMAS[:-1].tolist()):
        assert start == (pytest.approx(sigma * 1.125) if 0.2 <= sigma <= 0.8 else sigma)
    clock = StepClock(SIGMAS, sampler_reports=True, start_sigmas=starts)
    pattern = churned_pattern(starts, SIGMAS)
    assert run_sampler(clock, pattern) == expected(pattern)


def test_guesses_are_warned_about():
    silent = StepClock(SIGMAS, sampler_reports=True)
    for sigma in SIGMAS[:-1]:
        silent.step_of(float(sigma), COND)
    [warning] = silent.warnings()
    assert warning.startswith("The sampler never reported its steps: from step 2 on, steps were matched by the sigma")

    learnt = StepClock(SIGMAS, sampler_reports=True)
    run_sampler(learnt, heun_pattern(SIGMAS))
    [warning] = learnt.warnings()
    assert "is not a known corrector sampler: learnt at step 0, whose corrector call was counted to step 1" in warning

    # Neither a known corrector nor a caller without a sampler is a guess.
    known = StepClock(SIGMAS, sampler_reports=True, corrector=True)
    run_sampler(known, heun_pattern(SIGMAS))
    no_sampler = StepClock(SIGMAS)
    for sigma in SIGMAS[:-1]:
        no_sampler.step_of(float(sigma), COND)
    assert known.warnings() == [] and no_sampler.warnings() == []


@pytest.mark.parametrize("streams", [[COND], [COND, UNCOND]])
def test_a_single_evaluation_sampler_that_never_reports_falls_back_to_sigma(streams):
    # euler and its kin are clocked by their reports alone (no sigma read per call); one that never
    # reports shows itself by calling a stream twice between reports, and is then clocked by sigma.
    sigmas = krea2_simple_sigmas(8)
    clock = StepClock(sigmas, sampler_reports=True, single_evaluation=True)
    seen = [clock.step_of(sigma, stream) for sigma in sigmas[:-1] for stream in streams]
    assert seen[-len(streams):] == [7] * len(streams), seen
    assert seen == sorted(seen) and len(set(seen)) >= 6, seen
    assert any("never reported its steps" in note for note in clock.warnings()), clock.warnings()


def test_a_single_evaluation_sampler_that_reports_is_clocked_by_its_reports_alone():
    sigmas = krea2_simple_sigmas(8)
    clock = StepClock(sigmas, sampler_reports=True, single_evaluation=True)
    seen = []
    for step in range(8):
        seen += [clock.step_of(torch.tensor(float("nan")), stream) for stream in (COND, UNCOND)]
        clock.step_reported(step)
    assert seen == [step for step in range(8) for _ in range(2)]
    assert clock.warnings() == []
