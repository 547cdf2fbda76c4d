"""Everything the pack publishes is strict JSON: non-finite numbers become null, with a warning."""

from __future__ import annotations

import json
import math

import pytest

from devkit.comfy_harness import strict_loads
from krea2_cachedit.adapters.record.run_record import RunMeta, skipped_record
from krea2_cachedit.adapters.record.strict_json import dumps, finite_or_null


def test_non_finite_floats_become_null_and_say_where():
    data = {"a": 1.0, "b": [0.5, math.nan, {"c": -math.inf}], "d": (math.inf,), "e": "nan", "f": 3}
    clean, replaced = finite_or_null(data)
    assert clean == {"a": 1.0, "b": [0.5, None, {"c": None}], "d": [None], "e": "nan", "f": 3}
    assert replaced == ["b[1]", "b[2].c", "d[0]"]
    assert strict_loads(dumps(clean)) == clean
    with pytest.raises(ValueError):
        dumps(data)


def test_a_record_with_nan_is_published_as_strict_json_with_a_warning():
    record = skipped_record(4, RunMeta(node_name="Krea-2 Cache-DiT", node_id="5", prompt_id="p", cfg=math.nan, guidance={"cfg": math.nan}), "why")
    record.residual_diffs = [None, math.inf, 0.1, None]
    data = record.as_dict()
    assert (data["cfg"], data["guidance"]["cfg"], data["residual_diffs"]) == (None, None, [None, None, 0.1, None])
    assert data["warnings"][0] == "why"
    assert data["warnings"][1].startswith("Non-finite numbers (NaN or infinity) were replaced by null in: "
                                          "cfg, guidance.cfg, residual_diffs[1].")
    assert strict_loads(json.dumps(data)) == data
    assert record.warnings == ["why"], "the record itself is left as it was"
