"""benchmarks/revisions.py's report: the two checkouts' per-repeat ratios, and each one's over no node."""

from __future__ import annotations

import pytest

revisions = pytest.importorskip("benchmarks.revisions")


def test_the_report_pairs_each_repeat_and_each_checkout_with_its_own_plain_graph():
    names = [case[0] for case in revisions.CASES]
    before = {name: [1.0 + 0.01 * r for r in range(8)] for name in names}
    after = {name: [t * (1.1 if name == "caching off" else 1.0) for t in before[name]] for name in names}
    after["no node"] = [t * 1.1 for t in before["no node"]]   # the same machine slower for "after" alone
    lines = revisions.report({"before": before, "after": after})
    rows = {line.split(" | ")[0].strip("| "): line for line in lines[2:]}
    assert set(rows) == set(names)
    assert rows["caching off"].startswith("| caching off | 1.100 (1.100 to 1.100) | 1.000 | 1.000 |")
    assert rows["steps_mask fast"].startswith("| steps_mask fast | 1.000 (1.000 to 1.000) | 1.000 | 0.909 |")
    assert rows["raw caching off"].endswith("| 1.000 | 1.000 |"), "raw rows are over the raw plain graph"
