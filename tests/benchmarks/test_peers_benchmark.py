"""The peer benchmark (python -m benchmarks.peers) in short: this pack's node against ComfyUI's EasyCache and
LazyCache on the proxies (the quick cases are Turbo-like: the Turbo proxy), through the benchmark's own code.

A handful of Turbo-like cases (uncached, the node's defaults, one calibrator, EasyCache and LazyCache
at their default and at a high ``reuse_threshold``, EasyCache without its own input copy, euler and
one multistep sampler at fewer steps), one image, two alternating repeats: every method
must produce finite images and consistent figures, every setting that skips work is set against
fewer steps, and the benchmark must write its table and plot.
The figures themselves are the benchmark's to report (docs/benchmarks.md, "Against EasyCache and LazyCache").
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from devkit.comfy_harness import REPO_ROOT, strict_loads

from benchmarks.peers import cases as peers_cases
from benchmarks.peers import checks as peers_checks
from benchmarks.peers import compare as peers_compare
from benchmarks.peers import report as peers_report
from benchmarks.peers import runner as peers_runner
from benchmarks.peers import sample as peers_sample
from benchmarks import spread
from benchmarks.speedup import planned_calls

from krea2_cachedit.adapters.image_compare import mae_255_and_mse

proxy_tier = pytest.mark.tier("proxy")
HIGH = 1.2  # a reuse_threshold at which both peers skip steps on the proxy


def test_the_entry_runs_as_a_module():
    # The documented command: python -m from the repository root.
    result = subprocess.run([sys.executable, "-m", "benchmarks.peers", "--help"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--quick" in result.stdout and "--replot" in result.stdout


def test_a_peer_summary_is_read_only_from_its_own_prompt():
    line = "\x1b[32m[INFO]\x1b[0m EasyCache - skipped 3/8 steps (1.60x speedup).\n"
    assert peers_sample.peer_skipped("got prompt\n" + line, "EasyCache") == (3, 8)
    for log in ("got prompt\n", line + line, line.replace("EasyCache", "LazyCache")):
        with pytest.raises(RuntimeError, match="expected one EasyCache summary line"):
            peers_sample.peer_skipped(log, "EasyCache")


def row(case, wall, mae, method="Cache-DiT threshold"):
    return {"case": case, "regime": "turbo", "method": method, "wall": wall, "mae_255": mae}


def test_the_node_is_compared_at_equal_or_higher_speed():
    node = [row("slow good", 1.2, 1.0), row("fast", 1.6, 5.0)]
    verdicts = peers_compare.compare([row("peer a", 1.25, 3.0, "EasyCache"), row("peer b", 1.7, 4.0, "EasyCache"),
                                      row("peer c", 2.0, 9.0, "EasyCache")], node)
    # 1.2x is within 5% of 1.25x; 1.6x is not within 5% of 1.7x; nothing is near 2.0x.
    assert [(v["best"], v["winner"]) for v in verdicts] == [("slow good", "best"), (None, "unmatched"),
                                                             (None, "unmatched")]
    faster_and_better = peers_compare.compare([row("peer d", 1.5, 2.0, "EasyCache")], node)
    assert [(v["best"], v["winner"]) for v in faster_and_better] == [("fast", "challenger")]


@pytest.fixture(scope="module")
def quick(proxy_server, proxy):
    cases = peers_cases.quick_cases()
    rows = peers_runner.measure(proxy_server, cases, peers_cases.IMAGES[:1], repeats=2, decode=proxy.decode,
                                progress=lambda _: None)
    return cases, {r["case"]: r for r in rows}


@proxy_tier
def test_every_method_produces_finite_images_and_figures(quick):
    cases, rows = quick
    assert set(rows) == {c.name for c in cases}
    assert {c.method for c in cases} >= {peers_cases.UNCACHED, peers_cases.THRESHOLD, peers_cases.EASYCACHE,
                                         peers_cases.LAZYCACHE}
    for name, r in rows.items():
        assert r["finite"], name
        assert r["runs"] == 2 and all(0 <= s <= r["steps"] for s in r["skipped"]), r
        assert all(math.isfinite(r[k]) and r[k] > 0 for k in ("seconds", "wall", "ideal")), r
        assert math.isfinite(r["mae_255"]) and r["mae_255"] >= 0, r
        # Nothing skipped at the full steps: the uncached image, bit for bit; something skipped, or fewer
        # steps (measured against the full-step uncached image): a finite cost.
        if peers_cases.is_fewer_steps(r):
            assert r["skipped"] == [0] and r["calls"] == r["steps"] < 8, r
            assert r["ideal"] == r["step_ideal"] == pytest.approx(8 / r["steps"]), r
            assert r["mae_255"] > 0 and math.isfinite(r["psnr_db"]), r
        elif max(r["skipped"]) == 0:
            assert r["ideal"] == 1.0 and r["mae_255"] == 0 and r["psnr_db"] is None, r
        else:
            assert r["ideal"] > 1.0 and r["mae_255"] > 0 and math.isfinite(r["psnr_db"]), r
    reference = rows["turbo uncached"]
    assert reference["wall"] == 1.0 and reference["skipped"] == [0]
    assert reference["wall_spread"] == (1.0, 1.0, 1.0)
    assert all(r["wall_spread"][1] <= r["wall_spread"][0] <= r["wall_spread"][2] for r in rows.values()), rows


@proxy_tier
def test_the_peers_skip_whole_model_calls_at_a_high_threshold(quick):
    _, rows = quick
    for peer in peers_cases.PEERS:
        r = rows[f"turbo {peer} {HIGH:g}"]
        (skipped,) = r["skipped"]
        assert skipped > 0 and r["mae_255"] > 0, r
        assert r["ideal"] == pytest.approx(r["steps"] / (r["steps"] - skipped)), r
    # The node's defaults and its calibrator cache on the Turbo proxy (step 4 of the quick image); the ideal
    # counts its blocks.
    for name in ("turbo Cache-DiT threshold 0.24", "turbo Cache-DiT + taylorseer 0.24"):
        assert rows[name]["skipped"][0] > 0 and rows[name]["ideal"] > 1.0, rows[name]
    # The forecasting node forecasts steps 2, 4 and 6 and runs no block on them.
    forecast = rows[f"turbo {peers_cases.FORECAST_PRESETS} turbo_5_of_8"]
    assert forecast["skipped"] == [3] and forecast["cached_calls"] == 3 and forecast["always_blocks"] == 0, forecast
    assert forecast["step_ideal"] == pytest.approx(8 / 5) and forecast["ideal"] == pytest.approx(8 / 5), forecast


@proxy_tier
def test_easycache_writes_into_a_float32_model_input(quick):
    """EasyCache's skipped step adds its difference into the model's input in place; on float32 compute
    that input is the latent ComfyUI computes the denoised one from. With the model given its own copy
    (as a cast to bf16 gives it on a GPU) the same threshold costs far less (measured on the Turbo proxy,
    the quick image: 2.13 against 38.9/255 at 0.2; the trained proxy over the benchmark's images: 3.7
    against 21.4)."""
    _, rows = quick
    own, in_place = rows["turbo EasyCache 0.2"], rows[f"turbo {peers_cases.EASYCACHE_IN_PLACE} 0.2"]
    assert own["skipped"][0] > 0 and in_place["skipped"][0] > 0, (own, in_place)
    assert in_place["mae_255"] > 2 * own["mae_255"], (own, in_place)


@proxy_tier
def test_the_benchmark_writes_its_table_and_plot(quick, tmp_path, proxy, turbo_proxy, comfy_root):
    cases, rows = quick
    rows = list(rows.values())
    comparisons = peers_compare.head_to_head(rows)
    peer_rows = [r for r in rows if r["method"] in peers_cases.PEERS and max(r["skipped"]) > 0]
    assert [v["challenger"] for v in comparisons["peers_vs_node"]] == [r["case"] for r in peer_rows]
    # Two thresholds per peer, and caching off and the defaults for the node, with different skipped
    # counts: a line each.
    assert [c["method"] for c in comparisons["step_costs"]] == ["Cache-DiT", *peers_cases.PEERS]
    assert all(math.isfinite(c["saved_per_step_s"]) for c in comparisons["step_costs"]), comparisons["step_costs"]
    info = peers_report.conditions(comfy_root, proxy, peers_cases.IMAGES[:1], 2, "1", turbo_proxy)
    json_path, png_path, drawn = peers_report.write_results(rows, comparisons, info, tmp_path)
    written = strict_loads(json_path.read_text())
    assert written["rows"] == json.loads(json.dumps(rows)) and written["conditions"]["date"] == info["date"]
    # Which build each regime sampled, and whose codec decoded them.
    assert written["conditions"]["proxies"] == {"turbo": turbo_proxy.checkpoint.parent.name,
                                                "raw": proxy.checkpoint.parent.name}
    assert written["conditions"]["proxy"] == proxy.checkpoint.parent.name
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 10_000
    assert drawn == {"turbo": list(dict.fromkeys(c.method for c in cases))}
    assert "| 8, 1 | EasyCache | 1.2 |" in peers_report.markdown_table(rows)
    assert "| 5, 1 | fewer steps, dpmpp_2m | 5 |" in peers_report.markdown_table(rows)
    assert written["comparisons"]["vs_fewer_steps"]["summary"]["turbo"]["node_settings"] > 0


@proxy_tier
def test_the_projection_and_the_target_checks_come_from_the_measured_rows(quick, tmp_path, proxy, turbo_proxy,
                                                                          comfy_root):
    _, rows = quick
    rows = [dict(r) for r in rows.values()]
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"costs": {"block": 1.0, "text": 6.0, "rest": 2.0, "blocks": 28}}))
    info = peers_report.conditions(comfy_root, proxy, peers_cases.IMAGES[:1], 2, "1", turbo_proxy)
    _, comparisons = peers_report.report(rows, info, tmp_path, stem="projected", costs_path=costs)
    by_case = {r["case"]: r for r in rows}
    assert by_case["turbo uncached"]["projected"] == 1.0
    for peer in peers_cases.PEERS:  # a skipped call runs nothing: model calls without / with
        r = by_case[f"turbo {peer} {HIGH:g}"]
        assert r["projected"] == pytest.approx(r["step_ideal"]), r
    for r in by_case.values():  # fewer steps: the uncached run's calls over its own
        if peers_cases.is_fewer_steps(r):
            assert r["projected"] == pytest.approx(8 / r["steps"]), r
    assert comparisons["projected"]["vs_fewer_steps"]["rows"], comparisons["projected"]
    # The node computed the text path once per run, and its defaults cache: faster than caching off.
    assert by_case["turbo Cache-DiT caching off 0"]["text_computed"] == 1
    assert by_case["turbo Cache-DiT threshold 0.24"]["projected"] > by_case["turbo Cache-DiT caching off 0"]["projected"]
    assert comparisons["projected"]["basis"] == "projected"
    written = strict_loads((tmp_path / "projected.json").read_text())
    assert written["conditions"]["projection"]["shares"]["text"] == pytest.approx(6 / 36)
    checks = peers_checks.target_checks(rows, [comparisons, comparisons["projected"]])
    assert any(line.startswith("check: turbo: the node's own cost") for line in checks), checks
    # A caching row's share of its ideal: over caching off, repeat by repeat (as the demo judges its rows).
    cached, off = by_case["turbo Cache-DiT threshold 0.24"], by_case["turbo Cache-DiT caching off 0"]
    assert cached["ideal"] > 1.0 and len(cached["times"]) == len(off["times"]) == cached["runs"]
    share = spread.caching_efficiency(cached["times"], off["times"], cached["ideal"]).median
    assert any(line.startswith(f"check: {cached['case']}: {share:.0%} of its ideal over caching off")
               for line in checks), checks
    assert any("(projected): a faster node setting" in line for line in checks), checks
    # The forecasting targets, on both bases; a forecast call still runs the text path's reuse and the rest.
    forecast = by_case[f"turbo {peers_cases.FORECAST_PRESETS} turbo_5_of_8"]
    off_projected = by_case["turbo Cache-DiT caching off 0"]["projected"]
    assert off_projected < forecast["projected"] < off_projected * 8 / 5, (forecast, off_projected)
    for basis in ("projected", "measured"):
        assert any(line.startswith(f"check: turbo ({basis}): turbo_5_of_8 MAE") for line in checks), checks


@proxy_tier
def test_the_own_cost_is_read_from_interleaved_repeats_of_its_three_cases(quick, proxy_server):
    cases, rows = quick
    measured = peers_runner.measure_own_cost(proxy_server, cases, peers_cases.IMAGES[:2], pairs=6,
                                             progress=lambda _: None)
    assert list(measured) == ["turbo"]
    times = measured["turbo"]["times"]
    assert set(times) == {peers_cases.UNCACHED, peers_cases.CACHING_OFF, peers_cases.CACHING_OFF_FULL_TEXT}
    assert all(len(t) == 6 and all(s > 0 for s in t) for t in times.values()), times
    full = peers_checks.own_cost_interval(times, peers_cases.CACHING_OFF_FULL_TEXT)
    ratios = sorted(u / f for u, f in zip(times[peers_cases.UNCACHED], times[peers_cases.CACHING_OFF_FULL_TEXT]))
    assert (full.low, full.high) == (ratios[0], ratios[-1])   # 6 pairs: the extremes bound the median
    all_rows = list(rows.values())
    checks = peers_checks.target_checks(all_rows, [peers_compare.head_to_head(all_rows)], measured)
    own = [line for line in checks if "the node's own cost" in line]
    # One own-cost line, from the pairs (not from the table's repeats), with its interval and count.
    assert len(own) == 1 and "95% interval" in own[0] and "6 interleaved repeats" in own[0], own
    assert any(line.startswith("turbo: caching off with the text path reused") for line in checks), checks


def test_a_caching_row_is_judged_by_the_confidence_interval_of_its_median_share():
    off = {"times": [1.0] * 15}
    row_at = lambda share, spread_: {"case": "raw x", "ideal": 2.0,  # noqa: E731
                                     "times": [1.0 / (2.0 * (share + spread_ * ((4 * i) % 15 - 7) / 7)) for i in range(15)]}
    # +-25% between single repeats, wider than the 10% margin, yet 15 pairs put the median's interval
    # (the 4th smallest to the 4th largest) on one side of 90%.
    assert peers_checks.efficiency_check(row_at(1.10, 0.25), off).endswith("interval 96% to 124%; at least 90%: ok)")
    assert peers_checks.efficiency_check(row_at(0.70, 0.25), off).endswith("interval 56% to 84%; at least 90%: BELOW)")
    assert peers_checks.efficiency_check(row_at(0.90, 0.10), off).endswith("at least 90%: undecided)")
    few = {"case": "turbo x", "ideal": 2.0, "times": [0.5, 0.5]}
    assert peers_checks.efficiency_check(few, {"times": [1.0, 1.0]}) == \
        "check: turbo x: 100% of its ideal over caching off (at least 90%: undecided (2 repeats))"


def test_fewer_steps_run_at_every_call_count_the_node_fixes_and_across_the_thresholds():
    cases = peers_cases.full_cases(tuple(peers_cases.REGIMES))
    for regime, of in peers_cases.REGIMES.items():
        of_regime = [c for c in cases if c.regime == regime]
        euler = [c.steps for c in of_regime if c.method == peers_cases.FEWER_STEPS]
        assert euler == sorted(euler, reverse=True) and all(1 < n < of.steps for n in euler), euler
        # Every count a step mask or a forecast schedule fixes below the full steps has its euler row.
        fixed = {planned_calls(c) for c in of_regime if peers_cases.is_node({"method": c.method})} - {None, of.steps}
        assert fixed and fixed <= set(euler), (fixed, euler)
        assert set(peers_cases.FEWER_STEPS_SPAN[regime]) <= set(euler)
        multistep = [c for c in of_regime if peers_cases.is_multistep({"method": c.method})]
        assert {c.sampler for c in multistep} == set(peers_cases.MULTISTEP_SAMPLERS)
        assert {c.steps for c in multistep} <= set(euler)   # each beside an euler row at as many calls
        for c in of_regime:
            if peers_cases.is_fewer_steps({"method": c.method}):
                assert (c.cfg, c.model, c.cache, c.peer) == (of.cfg, of.model, None, None), c
    # What the presets say of themselves (adapters/forecast/forecast_settings.py) and cache-dit's masks
    # compute, read from the pack's plans; Raw's masks compute more calls than the span names.
    cases = [c for c in cases if c.regime in peers_cases.regimes_of(peers_cases.KREA2)]
    named = {c.setting: planned_calls(c) for c in cases if c.method == peers_cases.FORECAST_PRESETS}
    assert named == {"turbo_5_of_8": 5, "turbo_4_of_8": 4, "raw_1_in_4": 13, "raw_1_in_5": 11,
                     "raw_8_of_52": 8}
    masks = {(c.regime, c.setting): planned_calls(c) for c in cases if c.method == peers_cases.MASKS}
    assert masks == {("turbo", "slow"): 7, ("turbo", "medium"): 6, ("turbo", "fast"): 5, ("turbo", "ultra"): 4,
                     ("raw", "slow"): 38, ("raw", "medium"): 30, ("raw", "fast"): 25, ("raw", "ultra"): 17}
    assert {38, 30, 25} <= {c.steps for c in cases if c.regime == "raw" and c.method == peers_cases.FEWER_STEPS}


def peers_entry():
    """The benchmark's entry, ``benchmarks/peers/__main__.py``, imported (not run)."""
    from benchmarks.peers import __main__ as entry

    return entry


def test_each_regime_names_the_model_it_samples(tmp_path):
    from devkit.krea2_prompts import FLUX_PROXY_MODEL, PROXY_MODEL, TURBO_PROXY_MODEL

    assert {name: regime.model for name, regime in peers_cases.REGIMES.items()} == \
        {"turbo": TURBO_PROXY_MODEL, "raw": PROXY_MODEL, "flux20": FLUX_PROXY_MODEL, "flux28": FLUX_PROXY_MODEL}
    for made in (peers_cases.case("turbo", peers_cases.UNCACHED), peers_cases.fewer_steps_case("turbo", 4, "deis"),
                 peers_cases.peer_case("turbo", peers_cases.EASYCACHE, 0.2)):
        prompt = peers_sample.case_prompt(made, label=0, seed=0)
        assert prompt["1"]["inputs"]["unet_name"] == TURBO_PROXY_MODEL, prompt
        assert prompt["6"]["inputs"]["sampler_name"] == made.sampler and prompt["6"]["inputs"]["steps"] == made.steps
    assert peers_sample.case_prompt(peers_cases.case("raw", peers_cases.UNCACHED), 0, 0)["1"]["inputs"]["unet_name"] \
        == PROXY_MODEL
    # The entry links each model a case samples to its checkpoint, and refuses one it has none for.
    entry = peers_entry()
    (tmp_path / "models" / "diffusion_models").mkdir(parents=True)
    checkpoint = tmp_path / "proxy.safetensors"
    checkpoint.write_bytes(b"weights")
    entry.link_models(tmp_path, [peers_cases.case("raw", peers_cases.UNCACHED)], {PROXY_MODEL: checkpoint})
    assert (tmp_path / "models" / "diffusion_models" / PROXY_MODEL).resolve() == checkpoint
    with pytest.raises(SystemExit, match=TURBO_PROXY_MODEL):
        entry.link_models(tmp_path, [peers_cases.case("turbo", peers_cases.UNCACHED)], {PROXY_MODEL: checkpoint})


@proxy_tier
def test_each_regime_samples_its_own_build(comfy_root, proxy, turbo_proxy):
    """Turbo-like cases sample the Turbo proxy's checkpoint, Raw-like ones the trained proxy's; a Krea-2 run
    takes no Flux build."""
    from devkit.krea2_prompts import PROXY_MODEL

    entry = peers_entry()
    checkpoints = entry.model_checkpoints(entry.ensure_builds(comfy_root, {PROXY_MODEL}))
    assert set(checkpoints) == {peers_cases.REGIMES[name].model for name in peers_cases.regimes_of(peers_cases.KREA2)}
    assert {name: checkpoints[peers_cases.REGIMES[name].model] for name in peers_cases.regimes_of(peers_cases.KREA2)} \
        == {"turbo": turbo_proxy.checkpoint, "raw": proxy.checkpoint}


def fewer_row(case, method, wall, mae, steps, skipped=0, ideal=None, calls=None):
    return {"case": case, "regime": "turbo", "method": method, "setting": "", "wall": wall, "mae_255": mae,
            "steps": steps, "skipped": [skipped], "ideal": ideal or 8 / steps, "calls": calls or steps,
            "cached_calls": skipped if method.startswith("Cache-DiT") else 0}


def test_a_setting_meets_euler_between_its_step_counts_linear_in_speedup():
    euler = peers_cases.FEWER_STEPS
    rows = [fewer_row("uncached", peers_cases.UNCACHED, 1.0, 0.0, 8, ideal=1.0),
            fewer_row("euler 6", euler, 4 / 3, 1.5, 6), fewer_row("euler 4", euler, 2.0, 4.5, 4),
            fewer_row("dpmpp_2m 5", peers_cases.multistep_method("dpmpp_2m"), 1.6, 2.0, 5),
            fewer_row("dpmpp_2m 4", peers_cases.multistep_method("dpmpp_2m"), 2.0, 1.0, 4),
            fewer_row("node 1.5x", peers_cases.MASKS, 1.5, 2.0, 8, skipped=3, ideal=1.5),
            fewer_row("node 2.5x", peers_cases.MASKS, 2.5, 9.0, 8, skipped=5, ideal=2.5),
            fewer_row("node slowed", peers_cases.THRESHOLD, 0.9, 0.1, 8, skipped=1, ideal=1.1),
            fewer_row("node off", peers_cases.CACHING_OFF, 1.1, 0.0, 8, ideal=1.0),
            fewer_row("peer 1.9x", peers_cases.EASYCACHE, 1.9, 3.0, 8, skipped=4, ideal=2.0),
            fewer_row("peer idle", peers_cases.LAZYCACHE, 1.0, 0.0, 8, ideal=1.0)]
    found = peers_compare.vs_fewer_steps(rows)
    by_case = {e["case"]: e for e in found["rows"]}
    # Only the settings that skip work; not caching off, a peer that skipped nothing or fewer steps themselves.
    assert list(by_case) == ["node 1.5x", "node 2.5x", "node slowed", "peer 1.9x"]
    # 1.5x lies a quarter of the way in speedup from euler 6 (4/3x, MAE 1.5) to euler 4 (2x, MAE 4.5): 2.25.
    e = by_case["node 1.5x"]
    assert e["euler_mae_255"] == pytest.approx(2.25) and e["euler_between"] == ["euler 6", "euler 4"]
    assert e["beats_euler"] is True and e["calls"] == 5
    # The multistep sampler at the most steps among those as fast: dpmpp_2m 5, not the lower MAE at 4.
    assert (e["multistep"], e["multistep_mae_255"], e["beats_multistep"]) == ("dpmpp_2m 5", 2.0, False)
    # Faster than every fewer-steps row: no verdict; slower than uncached: the full steps are as fast.
    assert by_case["node 2.5x"]["euler_mae_255"] is None and by_case["node 2.5x"]["beats_euler"] is None
    assert by_case["node 2.5x"]["multistep"] is None
    assert by_case["node slowed"]["euler_mae_255"] == 0.0 and by_case["node slowed"]["beats_euler"] is False
    assert by_case["peer 1.9x"]["euler_mae_255"] == pytest.approx(1.5 + 3.0 * (1.9 - 4 / 3) / (2 / 3))
    assert by_case["peer 1.9x"]["beats_euler"] is True and by_case["peer 1.9x"]["multistep"] == "dpmpp_2m 4"
    assert found["summary"] == {"turbo": {
        "node_settings": 3, "node_beat_euler": 1, "node_faster_than_euler": 1, "node_beat_multistep": 1,
        "node_with_multistep": 2, "peer_settings": 1, "peer_beat_euler": 1, "peer_faster_than_euler": 0,
        "peer_beat_multistep": 0, "peer_with_multistep": 1}}
    # A table from before the fewer-steps rows (a --replot of an older run): nothing to set against.
    assert peers_compare.vs_fewer_steps([r for r in rows if not peers_cases.is_fewer_steps(r)]) == \
        {"rows": [], "summary": {}}


@proxy_tier
def test_each_multistep_sampler_makes_one_model_call_per_step(proxy_server):
    """What the fewer-steps rows are priced by: a step of each sampler is one model call (cond and uncond
    batched at CFG above 1), counted by the node caching nothing; heun, two calls a step, shows the count."""
    listed = proxy_server.get("/object_info/KSampler")["KSampler"]["input"]["required"]["sampler_name"][0]
    assert set(peers_cases.MULTISTEP_SAMPLERS) <= set(listed), listed
    # The server has the Krea-2 proxies: CFG 1 and batched CFG, what sets a sampler's calls, are both here.
    for regime in (peers_cases.REGIMES[name] for name in peers_cases.regimes_of(peers_cases.KREA2)):
        for sampler in ("euler", *peers_cases.MULTISTEP_SAMPLERS, "heun"):
            made = peers_cases.PeerCase("calls", 5, regime.cfg, {"residual_diff_threshold": 0.0}, sampler=sampler,
                                        model=regime.model)
            stats = peers_sample.run_prompt(proxy_server, peers_sample.case_prompt(made, label=0, seed=0)).stats
            assert stats["status"] == "ok" and stats["steps"] == 5, stats
            assert stats["calls"] == (9 if sampler == "heun" else 5), (sampler, regime, stats["calls"])
            assert stats["cfg_mode"] == ("batched" if regime.cfg > 1 else "none"), (sampler, stats["cfg_mode"])


@proxy_tier
def test_fewer_steps_are_measured_against_the_full_step_uncached_image(quick, proxy_server, proxy):
    cases, rows = quick
    by_name = {c.name: c for c in cases}
    image = peers_cases.IMAGES[0]
    uncached = peers_sample.run_case(proxy_server, by_name["turbo uncached"], image)
    euler = peers_sample.run_case(proxy_server, by_name["turbo fewer steps, euler 5"], image)
    mae, _ = mae_255_and_mse(proxy.decode(euler.latent), proxy.decode(uncached.latent))
    assert rows["turbo fewer steps, euler 5"]["mae_255"] == pytest.approx(mae, rel=1e-6) and mae > 0
    # Fewer steps move away from the full-step image, the fewest not furthest: the Turbo proxy knows only the
    # 8-step sigmas and samples others between them (measured on the quick image: euler 6 2.90, euler 5 4.20,
    # euler 4 3.00/255); the count nearest the full steps lands nearest. Another sampler at the same steps
    # lands elsewhere.
    fewer = {n: rows[f"turbo fewer steps, euler {n}"]["mae_255"] for n in (6, 5, 4)}
    assert 0 < fewer[6] < min(fewer[5], fewer[4]), fewer
    assert rows["turbo fewer steps, dpmpp_2m 5"]["mae_255"] != rows["turbo fewer steps, euler 5"]["mae_255"]


@proxy_tier
def test_every_setting_that_skips_work_is_set_against_fewer_steps(quick):
    _, rows = quick
    all_rows = list(rows.values())
    found = peers_compare.head_to_head(all_rows)["vs_fewer_steps"]
    skipping = [r["case"] for r in all_rows if (peers_cases.is_node(r) and r["ideal"] > 1.0)
                or (r["method"] in peers_cases.PEERS and max(r["skipped"]) > 0)]
    assert [e["case"] for e in found["rows"]] == skipping and skipping
    node = [e for e in found["rows"] if e["side"] == "node"]
    assert found["summary"]["turbo"]["node_settings"] == len(node)
    # Measured speedups on a busy CPU: a setting may outrun every fewer-steps row (no verdict then).
    matched = [e for e in node if e["euler_mae_255"] is not None]
    assert found["summary"]["turbo"]["node_faster_than_euler"] == len(node) - len(matched)
    assert found["summary"]["turbo"]["node_beat_euler"] == sum(e["mae_255"] < e["euler_mae_255"] for e in matched)
    # At equal calls (report only): the preset meets euler at its own 5 steps; the defaults' calls fall
    # between the uncached run (8 calls, MAE 0) and euler 6, linear in model calls without / with.
    checks = peers_checks.fewer_steps_checks(all_rows)
    preset = next(line for line in checks if "turbo_5_of_8" in line)
    euler5 = rows["turbo fewer steps, euler 5"]["mae_255"]
    assert "5 of 8 calls computed" in preset and f"against euler at as many calls {euler5:.2f}/255" in preset, preset
    assert "best multistep at the nearest count with as few calls: dpmpp_2m 5" in preset, preset
    defaults = rows["turbo Cache-DiT threshold 0.24"]
    expected = rows["turbo fewer steps, euler 6"]["mae_255"] * (defaults["step_ideal"] - 1) / (8 / 6 - 1)
    (line,) = [line for line in checks if "(defaults)" in line]
    assert line.startswith("check: turbo (equal calls): Cache-DiT threshold 0.24 (defaults): ")
    assert f"against euler at as many calls {expected:.2f}/255" in line, (line, expected)
    assert line.endswith("(report only: the node lower)" if defaults["mae_255"] < expected else
                         "(report only: fewer steps as low or lower)"), line
    table = peers_compare.fewer_steps_lines(peers_compare.head_to_head(all_rows))
    assert any(line.startswith("| turbo Cache-DiT threshold 0.24 (defaults) | ") for line in table), table
    assert any(line.startswith("turbo (measured): ") and "node settings that skip work" in line for line in table)
