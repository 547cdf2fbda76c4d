"""Presets, step masks and the sigma -> step mapping, resolved per run."""

import pytest
import torch

from krea2_cachedit.adapters.settings import CacheSettings, PRESETS, plan_run
from krea2_cachedit.adapters.step_clock import StepClock


def test_auto_preset_follows_the_step_count():
    assert plan_run(CacheSettings(), steps=8, num_blocks=28).preset == "turbo"
    assert plan_run(CacheSettings(), steps=52, num_blocks=28).preset == "raw"


def test_turbo_caches_with_a_static_mask_at_8_steps():
    plan = plan_run(CacheSettings(preset="turbo"), steps=8, num_blocks=28)
    assert plan.mask == (1, 1, 1, 1, 0, 1, 0, 1)
    kwargs = plan.db_cache_kwargs(start_step=0, separate_cfg=False)
    assert kwargs["steps_computation_policy"] == "static"
    assert (kwargs["Fn_compute_blocks"], kwargs["Bn_compute_blocks"]) == (1, 0)


def test_raw_preset_is_the_reference_dbcache_with_taylorseer():
    plan = plan_run(CacheSettings(preset="raw"), steps=52, num_blocks=28)
    s = plan.settings
    assert (s.Fn_compute_blocks, s.Bn_compute_blocks, s.max_warmup_steps) == (1, 0, 4)
    assert (s.residual_diff_threshold, s.max_continuous_cached_steps) == (0.24, 3)
    assert s.enable_taylorseer and plan.mask is None


def test_a_preset_keeps_what_the_user_changed():
    settings = CacheSettings(preset="turbo", steps_mask="fast", residual_diff_threshold=0.3)
    plan = plan_run(settings, steps=8, num_blocks=28)
    assert plan.settings.steps_mask == "fast" and plan.settings.residual_diff_threshold == 0.3
    assert plan.settings.max_warmup_steps == PRESETS["turbo"].max_warmup_steps
    assert settings.changed_from_defaults() == ["residual_diff_threshold", "steps_mask"]


def test_custom_uses_the_inputs_exactly():
    settings = CacheSettings(preset="custom", steps_mask="none")
    assert plan_run(settings, steps=8, num_blocks=28).settings == settings


def test_mask_for_an_unsupported_step_count_falls_back_with_a_warning():
    plan = plan_run(CacheSettings(preset="custom", steps_mask="fast"), steps=5, num_blocks=28)
    assert plan.mask is None
    assert "needs 4, 6 or at least 8 sampling steps; this run has 5" in plan.warnings[0]


@pytest.mark.parametrize("steps", [4, 6, 8, 9, 12, 20, 28, 52, 100])
@pytest.mark.parametrize("policy", ["slow", "medium", "fast", "ultra"])
def test_masks_have_the_run_length_and_compute_first_and_last(steps, policy):
    mask = plan_run(CacheSettings(preset="custom", steps_mask=policy), steps=steps, num_blocks=28).mask
    assert len(mask) == steps and mask[0] == 1 and mask[-1] == 1


def test_a_fresh_context_mid_run_gets_the_rest_of_the_mask_and_computes_first():
    plan = plan_run(CacheSettings(preset="custom", steps_mask="fast"), steps=8, num_blocks=28)
    kwargs = plan.db_cache_kwargs(start_step=3, separate_cfg=True)
    assert kwargs["steps_computation_mask"] == [1, 1, 0, 0, 1]
    assert kwargs["num_inference_steps"] == 5 and kwargs["enable_separate_cfg"] is True


def test_too_many_compute_blocks_is_a_clear_error():
    with pytest.raises(ValueError, match="must not exceed the model's 4 transformer blocks"):
        plan_run(CacheSettings(preset="custom", Fn_compute_blocks=3, Bn_compute_blocks=2), steps=8, num_blocks=4)


@pytest.mark.parametrize("bad", [dict(preset="fastest"), dict(steps_mask="turbo"), dict(Fn_compute_blocks=0),
                                 dict(warmup_interval=0), dict(residual_diff_threshold=-1.0)])
def test_bad_settings_are_rejected(bad):
    with pytest.raises(ValueError):
        CacheSettings(**bad)


def test_step_clock_maps_sigmas_to_steps():
    clock = StepClock(torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    assert clock.steps == 4
    assert [clock.step_of(s) for s in (1.0, 0.9, 0.75, 0.6, 0.5, 0.25, 0.1)] == [0, 0, 1, 1, 2, 3, 3]
    assert clock.step_of(torch.tensor([0.75, 0.75]).half().float()) == 1
