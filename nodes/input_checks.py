"""Queue-time checks of a V3 node's widget values against its own schema.

A node that defines ``validate_inputs(cls, **kwargs)`` takes over ComfyUI's own
checks of every input (min/max, combo choices), so ``schema_problem`` makes
them again, and also refuses what ComfyUI lets through: a NaN, which compares
as neither below min nor above max. A refused value never runs: POST /prompt
answers 400 with the message in its ``node_errors``, instead of an execution
error that echoes the value back as a bare ``NaN`` that strict JSON parsers
reject.
"""

from __future__ import annotations

import math

from comfy_api.latest import io


def schema_problem(inputs: list, values: dict) -> str | None:
    """What is wrong with the first bad widget value, or None when all are fine.

    ``values`` are the values ComfyUI validates (already converted to int or
    float); a linked input has none yet (None) and is left to the node.
    """
    for spec in inputs:
        value = values.get(spec.id)
        if value is None:
            continue
        if isinstance(spec, io.Combo.Input):
            if value not in spec.options:
                choices = ", ".join(repr(option) for option in spec.options)
                return f"{spec.id} is {value!r}, not one of {choices}: pick one of those."
        elif isinstance(spec, (io.Int.Input, io.Float.Input)):
            problem = _number_problem(spec, value)
            if problem:
                return problem
    return None


def _number_problem(spec, value) -> str | None:
    low, high = spec.min, spec.max
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{spec.id} is {value!r}, not a number: set it to a number{_range_text(low, high)}."
    finite = math.isfinite(value)
    if finite and (low is None or value >= low) and (high is None or value <= high):
        return None
    what = "not a finite number" if not finite else "out of range"
    default = f" (default {spec.default:g})" if spec.default is not None else ""
    return f"{spec.id} is {value:g}, {what}: set it to a number{_range_text(low, high)}{default}."


def _range_text(low, high) -> str:
    if low is not None and high is not None:
        return f" from {low:g} to {high:g}"
    if low is None and high is None:
        return ""
    return f" at least {low:g}" if low is not None else f" at most {high:g}"
