"""When ComfyUI's model code changes under the pack: never a silently wrong image, never an error naming nothing.

``Krea2TestLoopDrift`` changes ComfyUI's own code for one sampling run as an upstream update might (the loop,
a block or the final layer of Krea-2, Flux, MiniMax H3 or ERNIE-Image), in the real server, before the cache node. Each
change through both nodes:

- a change the method does not rely on: the run is cached as before, its image bit-identical to the
  unchanged code's cached image (the changes keep the model's math);
- a change it relies on: the run steps aside, its record ``skipped`` with a warning naming the family, the
  class, what was expected and found, and the image bit-identical to the changed code's uncached image;
- either way the next prompt, on the unchanged code, is cached and bit-identical to before.

Tiny seeded-random checkpoints: mechanics, not image quality.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import pytest
import torch

from family_harness import with_separate_av
from devkit.family_prompts import family_prompt
from helpers import FAST, FAST_8_CACHED, insert_after_loader, outputs_and_record
from devkit.krea2_prompts import with_forecast

pytestmark = pytest.mark.comfyui

CACHED, ASIDE, CHANGED_MATH = "cached", "aside", "cached on changed math"
FORECAST_STEPS = [2, 4, 6]   # turbo_5_of_8
DRIFT_NODE = "20"


@dataclasses.dataclass(frozen=True)
class Family:
    key: str                       # Krea2TestLoopDrift's family
    server: str                    # the fixture of a server with its checkpoint
    name: str                      # the registry's name, which a warning starts with
    block: str                     # the changed block class, as a warning names it
    final: str                     # the final layer's class
    family_prompt: str             # ``family_prompt``'s key
    build: Callable[[dict], dict] = lambda graph: graph
    outputs: tuple[str, ...] = ("7",)

    def prompt(self, node: str | None, layout: str, change: str | None) -> dict:
        cache = None if node is None else (FAST if node == "dbcache" else {})
        graph = self.build(family_prompt(self.family_prompt, cache=cache, steps=8, seed=7, prefix=f"drift_{self.key}",
                                         cfg=1.0 if layout == "none" else 3.5))
        if node == "forecast":
            graph = with_forecast(graph)
        if change is not None:
            graph = insert_after_loader(graph, DRIFT_NODE, {"class_type": "Krea2TestLoopDrift",
                                                            "inputs": {"family": self.key, "change": change}})
        return graph


KREA2 = Family("krea2", "comfy_server", "Krea-2 (ComfyUI native)", "SingleStreamBlock", "LastLayer", "krea2")
FLUX = Family("flux", "family_server", "Flux.1 / Flux.2 (ComfyUI native)", "SingleStreamBlock", "LastLayer", "flux1")
FLUX_DOUBLE = dataclasses.replace(FLUX, key="flux_double", block="DoubleStreamBlock")
MINIMAX = Family("minimax_h3", "minimax_server", "MiniMax H3 (ComfyUI native)", "DiTBlock", "FinalLayer",
                 "minimax_h3", build=with_separate_av, outputs=("7", "15"))
# ERNIE-Image: its forward runs no DIFFUSION_MODEL wrappers, so the nodes route its calls themselves; the changed
# forward is what they route.
ERNIE_IMAGE = Family("ernie_image", "ernie_image_server", "ERNIE-Image (ComfyUI native)", "ErnieImageSharedAdaLNBlock",
                     "ErnieImageAdaLNContinuous", "ernie_image")

# (family, change, CFG layouts, what DBCache does, what the Forecast node does)
CASES = [
    (KREA2, "block_first_renamed", ("none",), CACHED, CACHED),
    (KREA2, "block_hidden_by_its_name", ("none",), CACHED, CACHED),
    (KREA2, "new_keyword_same_value", ("none",), CACHED, CACHED),
    (KREA2, "block_hidden_by_keyword", ("none",), ASIDE, CACHED),
    (KREA2, "own_value_per_block", ("none",), ASIDE, CHANGED_MATH),
    (KREA2, "block_returns_extra", ("none", "batched"), ASIDE, CACHED),
    (KREA2, "new_required_parameter", ("none",), ASIDE, CACHED),
    (KREA2, "final_layer_by_keyword", ("none",), CACHED, CACHED),
    (KREA2, "final_layer_reordered", ("none",), CACHED, CACHED),
    (KREA2, "final_layer_renamed", ("none",), CACHED, ASIDE),
    (KREA2, "final_layer_gets_a_copy", ("none",), CACHED, ASIDE),
    *[(family, change, ("none",), dbcache, forecast) for family in (FLUX, MINIMAX, ERNIE_IMAGE)
      for change, dbcache, forecast in (("block_hidden_by_keyword", ASIDE, CACHED),
                                        ("own_value_per_block", ASIDE, CHANGED_MATH),
                                        ("block_returns_extra", ASIDE, CACHED),
                                        ("final_layer_reordered", CACHED, CACHED),
                                        ("final_layer_gets_a_copy", CACHED, ASIDE))],
    # Flux's double-stream list (the hidden states by keyword, a pair returned), as Chroma's loop slices it.
    (FLUX_DOUBLE, "own_value_per_block", ("none",), ASIDE, CHANGED_MATH),
]
PARAMS = [pytest.param(family, change, layout, node, outcome, id=f"{family.key}-{change}-{layout}-{node}")
          for family, change, layouts, dbcache, forecast in CASES for layout in layouts
          for node, outcome in (("dbcache", dbcache), ("forecast", forecast))]

_references: dict = {}


def reference(server, family: Family, node: str | None, layout: str, change: str | None = None):
    """(outputs, record) of a prompt sampled once per server: the unchanged code's run with ``node``, or the changed
    code's uncached run."""
    key = (id(server), family.key, node, layout, change)
    if key not in _references:
        _references[key] = outputs_and_record(server, family.prompt(node, layout, change), family.outputs,
                                              "5" if node else None)
    return _references[key]


def equal(outputs, others) -> bool:
    return all(torch.equal(a, b) for a, b in zip(outputs, others, strict=True))


def check_cached(record: dict, node: str):
    assert record["status"] == "ok" and record["warnings"] == [], record["warnings"]
    if node == "dbcache":
        assert record["cached_steps"] == FAST_8_CACHED
    else:
        assert record["forecast_steps"] == FORECAST_STEPS


@pytest.mark.parametrize("family, change, layout, node, outcome", PARAMS)
def test_a_change_in_comfyuis_model_code_is_cached_right_or_stepped_aside_by_name(request, family, change, layout,
                                                                                   node, outcome):
    server = request.getfixturevalue(family.server)
    unchanged, unchanged_record = reference(server, family, node, layout)
    check_cached(unchanged_record, node)

    outputs, record = outputs_and_record(server, family.prompt(node, layout, change), family.outputs, "5")
    if outcome == ASIDE:
        uncached, _ = reference(server, family, None, layout, change)
        assert record["status"] == "skipped" and record["skipped_steps"] == []
        warning = record["warnings"][0]
        assert warning.startswith(family.name) and "this run was not cached" in warning, warning
        assert "Update the pack" in warning and "expected" in warning and "found" in warning, warning
        assert (family.block if node == "dbcache" else family.final) in warning, warning
        assert equal(outputs, uncached), "stepped aside: the changed code's uncached image"
    else:
        check_cached(record, node)
        if outcome == CACHED:
            assert equal(outputs, unchanged), "a change the method does not rely on: the same cached image"
        else:   # the blocks' math changed with the loop: the forecast runs on it, its computed steps as they are
            assert not equal(outputs, unchanged)

    # The next prompt runs the unchanged code: cached, and the same image as before.
    again, again_record = outputs_and_record(server, family.prompt(node, layout, None), family.outputs, "5")
    check_cached(again_record, node)
    assert equal(again, unchanged)
