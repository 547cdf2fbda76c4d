"""Strict JSON out: non-finite numbers become ``null``.

Python's ``json`` writes NaN and Infinity as bare ``NaN`` / ``Infinity``, which
is not JSON: the editor's ``JSON.parse`` rejects the whole message. Everything
the pack publishes (the stats route, its websocket event, node outputs in the
history) goes through ``finite_or_null`` first, which also says where it
replaced something, so the record can carry a warning.
"""

from __future__ import annotations

import json
import math


def finite_or_null(data, path: str = "") -> tuple[object, list[str]]:
    """A copy of ``data`` (dicts, lists, tuples, scalars) with NaN/inf floats as None, and their paths."""
    if isinstance(data, float):
        return (data, []) if math.isfinite(data) else (None, [path or "value"])
    if isinstance(data, dict):
        clean, replaced = {}, []
        for key, value in data.items():
            clean[key], where = finite_or_null(value, f"{path}.{key}" if path else str(key))
            replaced += where
        return clean, replaced
    if isinstance(data, (list, tuple)):
        clean, replaced = [], []
        for index, value in enumerate(data):
            item, where = finite_or_null(value, f"{path}[{index}]")
            clean.append(item)
            replaced += where
        return clean, replaced
    return data, []


def replaced_warning(paths: list[str], limit: int = 5) -> str:
    """One line naming where non-finite numbers were replaced."""
    shown = ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
    return (f"Non-finite numbers (NaN or infinity) were replaced by null in: {shown}. A NaN or overflowing "
            f"value in the model or the settings produced them; check the inputs of this run.")


def dumps(data, indent: int | None = None) -> str:
    """JSON text that fails loudly rather than writing NaN or Infinity."""
    return json.dumps(data, indent=indent, allow_nan=False)
