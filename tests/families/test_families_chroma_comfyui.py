"""Chroma through CacheDiTDBCache in the real server: what is Chroma's own.

Chroma runs the family scenario set (tests/families/test_family_scenarios_comfyui.py, its harness in
tests/support/family_harness.py) on its 128-wide stand-in in ``family_server``.

What its loop makes its own is here: calls while a skip list (``skip_mmdit``) names a block, computed in full,
as without the node.
"""

from __future__ import annotations

import pytest
import torch

from family_harness import CHROMA
from helpers import FAST, insert_after_loader

pytestmark = pytest.mark.comfyui

SKIP = {"class_type": "Krea2TestSkipBlocks", "inputs": {"skip_list": "skip_mmdit", "block": 1}}


def test_calls_while_a_skip_list_names_a_block_are_computed_in_full(family_server):
    """Chroma's loop skips the blocks its skip lists name, which the cache's wrapper of the list would run:
    such calls run in full, exactly as without the node, and the stats say so."""
    (plain,), _ = CHROMA.run(family_server, insert_after_loader(CHROMA.prompt(prefix="skip_plain"), "20", SKIP),
                             node_id=None)
    (latent,), record = CHROMA.run(family_server, insert_after_loader(CHROMA.prompt(cache=FAST, prefix="skip"),
                                                                      "20", SKIP))
    assert torch.equal(latent, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any("skip_mmdit" in w and "computed in full" in w for w in record["warnings"]), record["warnings"]
