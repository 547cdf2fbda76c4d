"""The proxy builds the benchmarks' results sampled: every result names the build ids it sampled, a new run
also each build's weights hash; and the committed peer figures, sampled again on the pinned builds, land
where ``peers.json`` says once that file comes from a run on them."""

from __future__ import annotations

import json

import pytest
from devkit import proxy_build
from devkit.comfy_harness import REPO_ROOT, prompt_error
from devkit.krea2_prompts import proxy_prompt

from krea2_cachedit.adapters.image_compare import mae_255_and_mse

pytestmark = pytest.mark.tier("proxy")

RESULTS = REPO_ROOT / "benchmarks" / "results"
# Sampled again, a figure lands this close (other weights of the same recipe land tenths of a unit away).
SAME_WEIGHTS = 0.005


def pinned() -> dict[str, str]:
    """{build folder name: weights_sha256} of the pinned builds."""
    return {f"{kind}-{pin['build_id']}": pin["weights_sha256"] for kind, pin in proxy_build.PINS.items()}


def test_a_peer_run_records_each_build_it_samples_with_its_weights(comfy_root, proxy, turbo_proxy):
    from benchmarks.peers.report import conditions

    record = conditions(comfy_root, proxy, [(0, 0)], 1, "1", turbo_proxy)
    assert set(record["builds"]) == set(record["proxies"].values())
    for built in (proxy, turbo_proxy):
        assert record["builds"][built.checkpoint.parent.name]["weights_sha256"] == \
            proxy_build.weights_sha256(built.checkpoint) == pinned()[built.checkpoint.parent.name]


def test_the_committed_results_name_pinned_build_ids():
    peers = json.loads((RESULTS / "peers.json").read_text())["conditions"]
    forecast_error = json.loads((RESULTS / "forecast_error.json").read_text())
    named = {peers["proxy"], *peers["proxies"].values(), forecast_error["proxy"],
             *(regime["proxy"] for regime in forecast_error["regimes"].values())}
    assert named <= set(pinned()), named
    # The peer run the pack quotes sampled the pinned weights themselves, not another build of their recipe.
    assert set(peers["builds"]) == set(peers["proxies"].values())
    assert {name: build["weights_sha256"] for name, build in peers["builds"].items()} == \
        {name: pinned()[name] for name in peers["builds"]}


@pytest.mark.parametrize("results,entries", [("auto_targets.json", "cells"), ("auto_ramps.json", "regimes"),
                                              ("forecast_calibration.json", "regimes")])
def test_each_regime_record_names_a_pinned_krea2_build_and_its_weights(results, entries):
    """What ``forecast_error.regime_record`` wrote; the Flux test model has no pinned build yet."""
    from devkit.krea2_prompts import FLUX_PROXY_MODEL

    records = json.loads((RESULTS / results).read_text())[entries]
    krea2 = {label: (record["proxy"], record["weights_sha256"]) for label, record in records.items()
             if record["model"] != FLUX_PROXY_MODEL}
    assert krea2 and all(pinned().get(proxy) == weights for proxy, weights in krea2.values()), krea2


@pytest.mark.parametrize("regime,case", [("turbo", "turbo fewer steps, euler 4"), ("raw", "raw fewer steps, euler 13")])
def test_a_peer_figure_sampled_again_lands_where_peers_json_says(proxy_server, proxy, regime, case):
    results = json.loads((RESULTS / "peers.json").read_text())
    row = next(r for r in results["rows"] if r["case"] == case)
    reference = next(r for r in results["rows"] if r["regime"] == regime and r["method"] == "uncached")
    (label, seed), committed = row["images"][0], row["mae_255_per_image"][0]

    def decoded(steps):
        entry = proxy_server.run(proxy_prompt(label=label, seed=seed, steps=steps, cfg=row["cfg"], model=row["model"],
                                              prefix=f"pinned_{regime}_{steps}"))
        assert prompt_error(entry) is None, proxy_server.log_tail()
        return proxy.decode(proxy_server.saved_latent(entry, "7"))

    mae = mae_255_and_mse(decoded(row["steps"]), decoded(reference["steps"]))[0]
    assert abs(mae - committed) < SAME_WEIGHTS, (mae, committed)
