"""Settings and step masks, resolved per run."""

import math

import pytest

from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run

NODE = "Krea-2 Cache-DiT"


def test_defaults_are_the_reference_settings_and_run_exactly():
    """sglang's real-weight settings: threshold-driven F1B0, warmup 4, threshold 0.24, max 3 in a row."""
    defaults = DBCacheSettings()
    plan = plan_run(defaults, steps=8, num_blocks=28, node_name=NODE)
    assert plan.settings == defaults and plan.mask is None and plan.warnings == ()
    kwargs = plan.db_cache_kwargs(start_step=0, separate_cfg=False)
    assert (kwargs["Fn_compute_blocks"], kwargs["Bn_compute_blocks"], kwargs["max_warmup_steps"]) == (1, 0, 4)
    assert (kwargs["residual_diff_threshold"], kwargs["max_continuous_cached_steps"]) == (0.24, 3)
    assert "steps_computation_mask" not in kwargs and defaults.calibrator == "none"


@pytest.mark.parametrize("steps", [8, 52])
def test_the_run_never_replaces_a_setting(steps):
    settings = DBCacheSettings(steps_mask="none", residual_diff_threshold=0.0, max_warmup_steps=2)
    assert plan_run(settings, steps=steps, num_blocks=28, node_name=NODE).settings == settings


def test_a_mask_is_built_for_the_run_length_and_is_static():
    plan = plan_run(DBCacheSettings(steps_mask="medium"), steps=8, num_blocks=28, node_name=NODE)
    assert plan.mask == (1, 1, 1, 1, 0, 1, 0, 1)
    assert plan.db_cache_kwargs(start_step=0, separate_cfg=False)["steps_computation_policy"] == "static"


def test_mask_for_an_unsupported_step_count_falls_back_with_a_warning():
    plan = plan_run(DBCacheSettings(steps_mask="fast"), steps=5, num_blocks=28, node_name=NODE)
    assert plan.mask is None
    assert "needs 4, 6 or at least 8 sampling steps; this run has 5" in plan.warnings[0]


@pytest.mark.parametrize("steps", [4, 6, 8, 9, 12, 20, 28, 52, 100])
@pytest.mark.parametrize("policy", ["slow", "medium", "fast", "ultra"])
def test_masks_have_the_run_length_and_compute_first_and_last(steps, policy):
    mask = plan_run(DBCacheSettings(steps_mask=policy), steps=steps, num_blocks=28, node_name=NODE).mask
    assert len(mask) == steps and mask[0] == 1 and mask[-1] == 1


def test_a_fresh_context_mid_run_gets_the_rest_of_the_mask_and_computes_first():
    plan = plan_run(DBCacheSettings(steps_mask="fast"), steps=8, num_blocks=28, node_name=NODE)
    kwargs = plan.db_cache_kwargs(start_step=3, separate_cfg=True)
    assert kwargs["steps_computation_mask"] == [1, 1, 0, 0, 1]
    assert kwargs["num_inference_steps"] == 5 and kwargs["enable_separate_cfg"] is True


def test_too_many_compute_blocks_is_a_clear_error():
    with pytest.raises(ValueError, match="must be less than the model's 4 transformer blocks"):
        plan_run(DBCacheSettings(Fn_compute_blocks=3, Bn_compute_blocks=2), steps=8, num_blocks=4, node_name=NODE)


@pytest.mark.parametrize("bad, named", [
    (dict(steps_mask="auto"), r"steps_mask must be one of .*, got 'auto'"),
    (dict(steps_mask="turbo"), r"steps_mask must be one of .*, got 'turbo'"),
    (dict(Fn_compute_blocks=0), "Fn_compute_blocks must be at least 1"),
    (dict(Bn_compute_blocks=-1), "Bn_compute_blocks at least 0"),
    (dict(warmup_interval=0), "warmup_interval must be at least 1"),
    (dict(max_warmup_steps=-1), "max_warmup_steps and residual_diff_threshold must not be negative"),
    (dict(residual_diff_threshold=-1.0), "max_warmup_steps and residual_diff_threshold must not be negative")],
    ids=["mask_auto", "mask_turbo", "Fn_0", "Bn_negative", "warmup_interval_0", "warmup_negative",
         "threshold_negative"])
def test_bad_settings_are_rejected_naming_the_input(bad, named):
    with pytest.raises(ValueError, match=named):
        DBCacheSettings(**bad)


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -math.inf])
def test_a_non_finite_threshold_is_refused_naming_the_input(threshold):
    # Both nodes share these settings: the message names the input, not one node.
    with pytest.raises(ValueError, match="residual_diff_threshold must be a finite number.* on the Cache-DiT node"):
        DBCacheSettings(residual_diff_threshold=threshold)


def test_fn_plus_bn_must_leave_blocks_to_cache():
    with pytest.raises(ValueError, match=r"\(3\) \+ Bn_compute_blocks \(1\) must be less than the model's 4 "
                                         r"transformer blocks.*at most 3 together"):
        plan_run(DBCacheSettings(Fn_compute_blocks=3, Bn_compute_blocks=1), steps=8, num_blocks=4, node_name=NODE)
    assert plan_run(DBCacheSettings(Fn_compute_blocks=2, Bn_compute_blocks=1), steps=8, num_blocks=4, node_name=NODE).steps == 8
