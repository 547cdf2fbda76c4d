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
  node with caching off and the text path on every call against no node, divided by its calls:
  the medians of the run's interleaved own-cost pairs where it has them (``own_cost``: 30 pairs
  seconds apart), else the two rows' own repeats (a handful, minutes apart, which on a loaded
  machine move by more than the difference read). It is host time, paid in full here; on a GPU
  much of it overlaps with the device's work.

Calls of cond and uncond batched (Raw, CFG 3.5) cost twice a single call in compute; the node's
per-call time does not grow with the batch.

The component costs are measured on this machine's CPU, where a Krea-2 call takes minutes and any
per-call host time would vanish beside it. Krea-2 runs on a GPU, so the projection keeps the
measured *shares* of a call (blocks, text path, rest: set by FLOPs, much the same on any device) and
prices a whole call at ``GPU_CALL_S``, the fast end of a Turbo step at 1024x1024 on a current GPU
(30-150 ms): the case that weighs the node's own per-call time most.
"""

from __future__ import annotations

import statistics

from benchmarks.krea2_costs import CallCosts

# The peer benchmark's case names (its methods) that the projection reads.
UNCACHED = "uncached"
# The node with caching off and the text path on every call (a pass-through model_function_wrapper
# turns its reuse off): the node's own per-call cost, without what the reuse saves.
OFF_FULL_TEXT = "Cache-DiT caching off, text path every call"
GPU_CALL_S = 0.030   # an assumption, stated with every projection: see the module doc


def node_call_seconds(rows: list[dict], paired: dict | None = None) -> float:
    """The node's own time per model call (see the module doc), from this regime's own-cost pairs (``paired``:
    seconds per method) where given, else its rows; never below 0."""
    (uncached,) = [r for r in rows if r["method"] == UNCACHED]
    (full_text,) = [r for r in rows if r["method"] == OFF_FULL_TEXT]
    if paired:
        without, with_node = (statistics.median(paired[method]) for method in (UNCACHED, OFF_FULL_TEXT))
    else:
        without, with_node = uncached["seconds"], full_text["seconds"]
    return max((with_node - without) / full_text["calls"], 0.0)


def projected_seconds(row: dict, costs: CallCosts, node_call_s: float, batch: int) -> float:
    calls = row["calls"]
    if row["method"].startswith("Cache-DiT"):
        cached = row["cached_calls"]
        blocks = (calls - cached) * costs.blocks + cached * row["always_blocks"]
        compute = blocks * costs.block + row["text_computed"] * costs.text + calls * costs.rest
        return batch * compute + calls * node_call_s
    computed = calls - statistics.mean(row["skipped"])   # uncached or a peer: a skipped call runs nothing
    return batch * computed * costs.call


def project(rows: list[dict], costs: CallCosts, own_cost: dict | None = None) -> dict[str, dict]:
    """Per regime, the node's per-call time used; per row (by case) its projected seconds and speedup.
    ``own_cost``: the run's interleaved own-cost pairs per regime (``{"times": {method: seconds}}``), if any."""
    result = {"node_call_s": {}, "node_call_s_from": {}, "rows": {}}
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        paired = ((own_cost or {}).get(regime) or {}).get("times")
        node_call_s = node_call_seconds(of_regime, paired)
        result["node_call_s"][regime] = node_call_s
        result["node_call_s_from"][regime] = "own-cost pairs" if paired else "rows"
        batch = 2 if of_regime[0]["cfg"] > 1 else 1
        (uncached,) = [r for r in of_regime if r["method"] == UNCACHED]
        baseline = projected_seconds(uncached, costs, node_call_s, batch)
        for row in of_regime:
            seconds = projected_seconds(row, costs, node_call_s, batch)
            result["rows"][row["case"]] = {"seconds": seconds, "speedup": baseline / seconds}
    return result


def add_projection(rows: list[dict], measured: CallCosts, call_s: float | None = GPU_CALL_S,
                   own_cost: dict | None = None) -> dict:
    """Each row gets ``projected`` (its projected speedup on Krea-2); returns what was used.

    ``call_s``: what a whole call costs (the measured shares kept); None prices it as measured. ``own_cost``:
    the run's own-cost pairs (``project``)."""
    costs = measured.scaled_to(call_s) if call_s else measured
    projection = project(rows, costs, own_cost)
    for row in rows:
        row["projected"] = projection["rows"][row["case"]]["speedup"]
    return {"call_s": costs.call, "costs": {"block": costs.block, "text": costs.text, "rest": costs.rest,
                                            "blocks": costs.blocks},
            "shares": costs.shares(), "node_call_s": projection["node_call_s"],
            "node_call_s_from": projection["node_call_s_from"]}
