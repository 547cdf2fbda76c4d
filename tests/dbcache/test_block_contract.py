"""DBCache's check of a family's block signatures (``block_contract``) on small blocks whose code changes as
ComfyUI's might: each verdict and its wording.

The check of the loop's first call (what the loop hands each block, what a block returns) runs on ComfyUI's own
Krea-2, Flux, MiniMax H3 and ERNIE-Image code changed in the real server (tests/families/test_loop_drift_comfyui.py;
ERNIE-Image's forward runs outside the model wrappers, so there the check watches the lists cache-dit swaps in).
"""

from __future__ import annotations

import pytest
import torch

from krea2_cachedit.adapters.dbcache.block_contract import BlockContract
from krea2_cachedit.adapters.families.registry import BlockList, ResolvedTransformer, TransformerFamily


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x, vec, freqs, mask=None):
        self.calls += 1
        return x + self.linear(x) * vec


class Loop(torch.nn.Module):
    def __init__(self, block_type=Block):
        super().__init__()
        self.blocks = torch.nn.ModuleList([block_type() for _ in range(3)])


FAMILY = TransformerFamily(name="Loop (test)", model="Loop", class_path=f"{__name__}.Loop",
                           block_lists=(BlockList("blocks", "Pattern_3", arguments=("vec", "freqs")),),
                           check_forward_pattern=False)


def contract(model: Loop) -> BlockContract:
    return BlockContract(ResolvedTransformer(FAMILY, model))


class RenamedBlock(Block):
    def forward(self, hidden_states, vec, freqs, mask=None):
        return super().forward(hidden_states, vec, freqs, mask)


class OptionalExtraBlock(Block):
    def forward(self, x, vec, freqs, mask=None, note=None):
        return super().forward(x, vec, freqs, mask)


class RequiredExtraBlock(Block):
    def forward(self, x, vec, freqs, rope, mask=None):
        return super().forward(x, vec, freqs, mask)


class KeywordOnlyBlock(Block):
    def forward(self, *, x, vec, freqs, mask=None):
        return super().forward(x, vec, freqs, mask)


@pytest.mark.parametrize("block_type", [Block, RenamedBlock, OptionalExtraBlock])
def test_a_block_that_takes_what_the_registry_says_opens(block_type):
    assert contract(Loop(block_type)).signature_mismatch() is None


@pytest.mark.parametrize("block_type, found", [
    (RequiredExtraBlock, "forward(x, vec, freqs, rope, mask=None)"),
    (KeywordOnlyBlock, "forward(*, x, vec, freqs, mask=None)")])
def test_a_block_that_requires_more_or_takes_its_hidden_state_by_keyword_only_is_named(block_type, found):
    warning = contract(Loop(block_type)).signature_mismatch()
    assert warning.startswith(f"Loop (test): {block_type.__name__}.forward (the 'blocks' blocks) is not what this "
                              f"pack knows"), warning
    assert "no required parameters but these: vec, freqs" in warning and found in warning, warning
    assert "this run was not cached" in warning and "Update the pack" in warning
