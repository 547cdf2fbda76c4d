"""The peer benchmark's cases projected onto Krea-2's cost structure: a projection, not a measurement.

On the proxy every case's wall clock is measured, but the proxy's costs are not Krea-2's (see
krea2_costs.py). Here each case's own counts, measured on the proxy, are priced with Krea-2's
component costs measured at its real size:

- every model call runs the rest of the model (``rest``);
- a computed call runs all 28 blocks, a call the node's cache served only its always-computed
  blocks (Fn + Bn), a call a peer skipped nothing at all;
- the text path runs as often as the case computed it (the node: once per batch of conds and run;
  without the node: on every call it did not skip);
- the node adds its own per-call time: its Python and cache-dit's, measured on the proxy as the
  node with caching off and the text path on every call against no node, divided by its calls.
  It is host time, paid in full here; on a GPU much of it overlaps with the device's work.

Calls of cond and uncond batched (Raw, CFG 3.5) cost twice a single call in compute; the node's
per-call time does not grow with the batch.
"""

from __future__ import annotations

import statistics

from krea2_costs import CallCosts

UNCACHED, OFF_FULL_TEXT = "uncached", "Cache-DiT caching off, text path every call"


def node_call_seconds(rows: list[dict]) -> float:
    """The node's own time per model call (see the module doc), from this regime's rows; never below 0."""
    (uncached,) = [r for r in rows if r["method"] == UNCACHED]
    (full_text,) = [r for r in rows if r["method"] == OFF_FULL_TEXT]
    return max((full_text["seconds"] - uncached["seconds"]) / full_text["calls"], 0.0)


def projected_seconds(row: dict, costs: CallCosts, node_call_s: float, batch: int) -> float:
    calls = row["calls"]
    if row["method"].startswith("Cache-DiT"):
        cached = row["cached_calls"]
        blocks = (calls - cached) * costs.blocks + cached * row["always_blocks"]
        compute = blocks * costs.block + row["text_computed"] * costs.text + calls * costs.rest
        return batch * compute + calls * node_call_s
    computed = calls - statistics.mean(row["skipped"])   # uncached or a peer: a skipped call runs nothing
    return batch * computed * costs.call


def project(rows: list[dict], costs: CallCosts) -> dict[str, dict]:
    """Per regime, the node's per-call time used; per row (by case) its projected seconds and speedup."""
    result = {"node_call_s": {}, "rows": {}}
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        node_call_s = node_call_seconds(of_regime)
        result["node_call_s"][regime] = node_call_s
        batch = 2 if of_regime[0]["cfg"] > 1 else 1
        (uncached,) = [r for r in of_regime if r["method"] == UNCACHED]
        baseline = projected_seconds(uncached, costs, node_call_s, batch)
        for row in of_regime:
            seconds = projected_seconds(row, costs, node_call_s, batch)
            result["rows"][row["case"]] = {"seconds": seconds, "speedup": baseline / seconds}
    return result


def add_projection(rows: list[dict], costs: CallCosts) -> dict:
    """Each row gets ``projected`` (its projected speedup on Krea-2); returns what was used."""
    projection = project(rows, costs)
    for row in rows:
        row["projected"] = projection["rows"][row["case"]]["speedup"]
    return {"costs": {"block": costs.block, "text": costs.text, "rest": costs.rest, "blocks": costs.blocks},
            "shares": costs.shares(), "node_call_s": projection["node_call_s"]}
