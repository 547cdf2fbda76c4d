"""docs/proxy.md's table of what the two methods see on each trained proxy is the results file's, not retyped."""

from __future__ import annotations

import json
from pathlib import Path

from proxy_step_changes import PROXIES, RESULTS, markdown_table

DOCS = Path(__file__).resolve().parents[2] / "docs" / "proxy.md"


def test_the_docs_table_is_the_results_files():
    assert markdown_table(json.loads(RESULTS.read_text())) in DOCS.read_text()


def test_the_results_cover_every_proxy_with_each_list_and_the_final_layer():
    runs = json.loads(RESULTS.read_text())["runs"]
    assert {run["proxy"] for run in runs} == set(PROXIES)
    for run in runs:
        lists = {"flux": {"double_blocks", "single_blocks"}}.get(run["proxy"], {"blocks"})
        assert set(run["summary"]) == lists | {"final layer input"}, run["proxy"]
        assert all(len(row["changes"][name]) == run["steps"] - 1 for row in run["rows"] for name in run["summary"])
