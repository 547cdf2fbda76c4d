"""DBCache's check of a family's block loop (``block_contract``) on a small loop whose code changes as ComfyUI's might.

The real server runs the same changes on ComfyUI's own Krea-2, Flux and MiniMax H3 code
(tests/families/test_loop_drift_comfyui.py); here each check's verdict and wording, and that the probe leaves
the model as it found it.
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
    """A model whose loop calls its blocks as ``style`` says."""

    def __init__(self, block_type=Block, style="positional"):
        super().__init__()
        self.blocks = torch.nn.ModuleList([block_type() for _ in range(3)])
        self.style = style

    def forward(self, x):
        vec, freqs = torch.ones(4), torch.zeros(4)
        for index, block in enumerate(self.blocks):
            if self.style == "positional":
                x = block(x, vec, freqs)
            elif self.style == "keyword_x":
                x = block(x=x, vec=vec, freqs=freqs)
            elif self.style == "cache_dit_name":
                x = block(hidden_states=x, vec=vec, freqs=freqs)
            elif self.style == "own_value":
                x = block(x, vec * (index + 1), freqs)
            elif self.style == "unpacks":
                x, _ = block(x, vec, freqs)
        return x


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


class PairBlock(Block):
    def forward(self, x, vec, freqs, mask=None):
        return super().forward(x, vec, freqs, mask), None


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


@pytest.mark.parametrize("style", ["positional", "cache_dit_name"])
def test_a_loop_as_the_registry_says_passes_the_probe_and_is_left_as_it_was(style):
    model = Loop(RenamedBlock if style == "cache_dit_name" else Block, style)
    blocks = model.blocks
    x = torch.randn(2, 4)
    assert contract(model).probe(lambda: model(x)) is None
    assert model.blocks is blocks, "the model's own blocks are back in place"
    assert [block.calls for block in blocks] == [1, 0, 0], "only the first block ran for real"


@pytest.mark.parametrize("model, found", [
    (Loop(style="keyword_x"), "Block 0 of 'blocks' as the loop calls it is not what this pack knows (expected its "
                              "hidden state(s) first, by position or as 'hidden_states'; found 0 positional "
                              "argument(s) and the keywords 'x', 'vec', 'freqs')"),
    (Loop(style="own_value"), "Block 1 of 'blocks' as the loop calls it is not what this pack knows (expected every "
                              "'blocks' block handed the same other arguments; found block 1 handed its own "
                              "positional argument 1 after the hidden state(s))"),
    (Loop(PairBlock, "unpacks"), "what PairBlock.forward returns is not what this pack knows (expected a tensor; "
                                 "found a tuple of 2 (a tensor (2, 4), a NoneType))")])
def test_a_loop_that_calls_its_blocks_otherwise_is_named_by_the_probe(model, found):
    blocks = model.blocks
    warning = contract(model).probe(lambda: model(torch.randn(2, 4)))
    assert warning == (f"Loop (test): {found}. ComfyUI's model code changed under the pack, so this run was not "
                       f"cached: the image is the uncached one. Update the pack (its model registry was checked with "
                       f"ComfyUI 0.33.0).")
    assert model.blocks is blocks


def test_a_loop_that_fails_with_the_blocks_run_as_one_is_named_with_its_error():
    class Failing(Loop):
        def forward(self, x):
            super().forward(x)
            raise KeyError("block_index")

    model = Failing()
    warning = contract(model).probe(lambda: model(torch.randn(2, 4)))
    assert "the model's loop is not what this pack knows (expected it to run with each block list as one; found " \
           "KeyError: 'block_index')" in warning
    assert isinstance(model.blocks[0], Block)
