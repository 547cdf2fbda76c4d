"""The soak benchmark in short (``benchmarks/soak.py``, its own code): 60 mixed prompts on one real
ComfyUI server (Krea-2, Wan, Flux.1, ERNIE-Image; CFG 1, batched, split; masks, thresholds, calibrators, caching
off, Spectrum; interrupts, bad inputs, model switches, ``/free``), with the long soak's checks.

The memory margins are below what a model kept alive costs: the tiny Krea-2's text path alone is
about 9 MB of tensors per load, and the plan loads Krea-2 again more than ten times after the warm-up.
"""

from __future__ import annotations


import pytest


from benchmarks import soak

PROMPTS = 60


@pytest.fixture(scope="module")
def result(comfy_root, tmp_path_factory):
    return soak.soak(comfy_root, tmp_path_factory.mktemp("soak"), prompts=PROMPTS, budget=900, rest_every=6,
                     warmup=12, reruns=4, rss_margin_mb=40.0, tensor_margin_mb=2.0)


def test_the_plan_is_seeded_and_mixes_everything():
    plan = soak.make_plan(PROMPTS, seed=0)
    assert [item.label() for item in plan] == [item.label() for item in soak.make_plan(PROMPTS, seed=0)]
    runs = [item for item in plan if item.kind == "run"]
    assert {item.family for item in runs} == set(soak.SOAK_FAMILIES)
    assert {item.cfg_mode for item in runs} == {"cfg1", "batched", "split"}
    assert {item.node for item in runs} == {"none", "dbcache", "off", "forecast"}
    settings = [item.settings for item in runs if item.node == "dbcache"]
    assert {s["steps_mask"] for s in settings} > {"none"} and {s["calibrator"] for s in settings} > {"none"}
    assert len({s["residual_diff_threshold"] for s in settings}) > 1
    assert sum(item.kind == "interrupt" for item in plan) >= 2 and sum(item.kind == "bad" for item in plan) >= 3
    krea2_loads = sum(1 for a, b in zip(runs, runs[1:]) if b.family == "krea2" and a.family != "krea2")
    assert krea2_loads >= 10


def test_every_prompt_ends_as_expected(result):
    assert result["prompts_run"] == PROMPTS, result["stopped_at"]
    assert result["verdicts"]["statuses"], result["unexpected"]
    assert result["statuses"].get("interrupt: interrupted", 0) >= 1, result["statuses"]
    assert result["statuses"]["bad: refused"] >= 3


def test_memory_is_flat_after_the_warm_up(result):
    print(soak.verdict_line(result))
    assert result["verdicts"]["tensors_flat"], (result["tensor_mb"], result["rest"])
    assert result["verdicts"]["rss_flat"], (result["rss_mb"], result["rest"])


def test_the_stats_store_is_bounded(result):
    assert result["verdicts"]["store_bounded"], result["store"]
    assert 0 < result["store"]["end_records"] <= soak.STORE_LIMIT


def test_prompts_run_again_alone_are_bit_identical(result):
    assert len(result["reruns"]) == 4
    assert result["verdicts"]["reruns_equal"], result["reruns"]
    assert any("cached_steps" in rerun and rerun["cached_steps"] for rerun in result["reruns"]), result["reruns"]


def test_bad_inputs_are_refused_naming_the_input(result):
    assert result["verdicts"]["errors_name_input"], result["error_answers"]
    text = soak.markdown(result)
    assert all(f"`{answer['input']}`" in text for answer in result["error_answers"])
    assert result["passed"], soak.verdict_line(result)
