"""The peer benchmark's projection onto Krea-2's cost structure (benchmarks/projection.py), with numbers."""

from __future__ import annotations


import pytest

from benchmarks.krea2_costs import CallCosts
from benchmarks.projection import OFF_FULL_TEXT, UNCACHED, add_projection, projected_seconds

# A Krea-2 call: 28 blocks of 1 s, text path 6 s, the rest 2 s: 36 s.
COSTS = CallCosts(block=1.0, text=6.0, rest=2.0)


def row(method, seconds=1.0, calls=8, cached=0, text=8, always=1, skipped=0, cfg=1.0, case=None):
    return {"case": case or method, "regime": "turbo", "method": method, "cfg": cfg, "seconds": seconds,
            "calls": calls, "cached_calls": cached, "text_computed": text, "always_blocks": always,
            "skipped": [skipped]}


def test_a_call_costs_its_blocks_text_and_rest():
    assert COSTS.call == 36.0
    assert COSTS.shares() == pytest.approx({"blocks": 28 / 36, "text": 6 / 36, "rest": 2 / 36})


def test_each_method_is_priced_by_what_it_ran():
    # The node's own time per call: (1.08 - 1.00) s over 8 calls = 10 ms.
    rows = [row(UNCACHED, 1.0), row(OFF_FULL_TEXT, 1.08),
            row("Cache-DiT threshold", 0.7, cached=3, text=1, case="node"),
            row("EasyCache", 0.6, skipped=3, text=5, case="peer")]
    used = add_projection(rows, COSTS, call_s=None)
    assert used["node_call_s"] == {"turbo": pytest.approx(0.01)}
    by_case = {r["case"]: r["projected"] for r in rows}
    assert by_case[UNCACHED] == 1.0
    # Full text path on every call: 8 calls of 36 s plus 8 x 10 ms.
    assert by_case[OFF_FULL_TEXT] == pytest.approx(288 / (288 + 0.08))
    # 5 computed calls of 28 blocks, 3 cached of 1 block, the text path once, the rest 8 times, 8 x 10 ms.
    assert by_case["node"] == pytest.approx(288 / (5 * 28 + 3 + 6 + 16 + 0.08))
    # A skipped call runs nothing: 8 calls' worth against 5.
    assert by_case["peer"] == pytest.approx(8 / 5)


def test_batched_calls_cost_twice_in_compute_but_not_in_the_nodes_own_time():
    node = row("Cache-DiT caching off", calls=52, text=1, cfg=3.5)
    single = projected_seconds(node, COSTS, node_call_s=0.01, batch=1)
    batched = projected_seconds(node, COSTS, node_call_s=0.01, batch=2)
    assert batched - 52 * 0.01 == pytest.approx(2 * (single - 52 * 0.01))


def test_the_nodes_own_time_comes_from_the_interleaved_pairs_where_the_run_has_them():
    # The rows' repeats read 80 ms a call (one slow repeat); the 5 pairs' medians 1.00 and 1.04 s: 5 ms.
    rows = [row(UNCACHED, 1.0), row(OFF_FULL_TEXT, 1.64)]
    pairs = {"turbo": {"times": {UNCACHED: [0.98, 1.0, 1.0, 1.02, 1.5], OFF_FULL_TEXT: [1.02, 1.04, 1.04, 1.9, 1.0],
                                 "Cache-DiT caching off": [1.0] * 5}}}
    used = add_projection(rows, COSTS, call_s=None, own_cost=pairs)
    assert used["node_call_s"] == {"turbo": pytest.approx(0.005)}
    assert used["node_call_s_from"] == {"turbo": "own-cost pairs"}
    without = add_projection(rows, COSTS, call_s=None)
    assert without["node_call_s"] == {"turbo": pytest.approx(0.08)} and without["node_call_s_from"] == {"turbo": "rows"}
    # Pairs of another regime only: this one's time is read from its rows, and says so.
    other = add_projection(rows, COSTS, call_s=None, own_cost={"raw": pairs["turbo"]})
    assert other["node_call_s"] == {"turbo": pytest.approx(0.08)} and other["node_call_s_from"] == {"turbo": "rows"}


def test_the_nodes_own_time_is_never_negative():
    rows = [row(UNCACHED, 1.0), row(OFF_FULL_TEXT, 0.95)]  # noise: faster than no node
    assert add_projection(rows, COSTS, call_s=None)["node_call_s"] == {"turbo": 0.0}


def test_a_projection_keeps_the_measured_shares_at_a_gpus_call_time():
    """Measured on a CPU (minutes per call), priced at a GPU's call time: the node's 10 ms per call
    weighs against 30 ms calls, not 36 s ones."""
    rows = [row(UNCACHED, 1.0), row(OFF_FULL_TEXT, 1.08)]
    used = add_projection(rows, COSTS, call_s=0.030)
    assert used["call_s"] == pytest.approx(0.030)
    assert used["shares"] == pytest.approx(COSTS.shares())
    assert rows[1]["projected"] == pytest.approx(0.240 / (0.240 + 0.08))
