"""Hooks on a transformer's blocks for one run: what ran, each block's true place, the Fn residual.

While cache-dit runs, the model's own loop sees one wrapper per block list, not the blocks in it.
The probe's hooks on the blocks themselves (and, where needed, on cache-dit's wrappers) do what
the run needs per call:
- count the blocks that really ran (a cached call runs only the Fn and Bn blocks);
- tell each block its true index, list size and type (attention patches read them);
- hand each block its own slice of the call's modulation table where the loop slices it by block
  index (Chroma: the wrapper is called with the first block's slice only);
- hand blocks that add into their input in place a copy of it where cache-dit keeps that input
  (to subtract as a residual), on calls the cache serves;
- give the stream's trace the Fn blocks' residual, and tell it early when a call computes in full.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from ..families.registry import BlockList, BlockModulation
from .residual_trace import StreamTrace

# Told each block's true place before it runs: (index, blocks in its list, the block's keyword
# arguments, the list's block type or None). Under cache-dit the model's loop sees one wrapper per list.
BlockIndexTeller = Callable[[int, int, dict, "str | None"], None]


class BlockProbe:
    """Block hooks for one run on ``blocks`` (one ModuleList per ``lists`` entry, in loop order)."""

    def __init__(self, lists: tuple[BlockList, ...], blocks: list[torch.nn.ModuleList], fn_blocks: int,
                 bn_blocks: int, tell_block_index: BlockIndexTeller | None = None,
                 modulation: "ModulationSlices | None" = None):
        self._lists = lists
        self._modulation = modulation
        self._blocks = blocks
        self._fn_blocks = fn_blocks
        self.sizes = [len(list_) for list_ in blocks]
        self._tell_block_index = tell_block_index
        # Per list, the first block only a computed call runs (a cached one skips to the Bn blocks), if any.
        self._first_middle_block = [fn_blocks if fn_blocks < size - bn_blocks else None for size in self.sizes]
        # Per list, the blocks whose input cache-dit keeps (the Fn, Mn and Bn blocks' first).
        self._copy_input_at = [{0, fn_blocks, size - bn_blocks} if entry.adds_in_place else set()
                               for entry, size in zip(lists, self.sizes)]
        self._hooks: list = []
        # The current call's state (``begin`` to ``end``).
        self.counted = [0] * len(lists)
        self._serving = False
        self._traces: list[StreamTrace] | None = None
        self._step = 0
        self._fn_input: list[torch.Tensor | None] = [None] * len(lists)

    @property
    def num_blocks(self) -> int:
        return sum(self.sizes)

    # --- lifetime -----------------------------------------------------------------
    def install(self, wrappers: list[torch.nn.Module]) -> None:
        """On every block and each list's last Fn block; on cache-dit's ``wrappers`` of lists called by keyword."""
        for position, blocks in enumerate(self._blocks):
            for index, block in enumerate(blocks):
                self._hooks.append(block.register_forward_pre_hook(
                    functools.partial(self._before_block, position, index), with_kwargs=True))
            last_fn = blocks[self._fn_blocks - 1]
            self._hooks.append(last_fn.register_forward_hook(functools.partial(self._after_fn_blocks, position)))
        # cache-dit's wrapper takes the hidden states positionally; a loop that passes them by keyword
        # (Flux: ``block(img=..., txt=..., ...)``) gets them moved into place, without touching the model.
        for entry, wrapper in zip(self._lists, wrappers):
            if entry.hidden_kwargs:
                self._hooks.append(wrapper.register_forward_pre_hook(
                    functools.partial(_hidden_states_first, entry.hidden_kwargs), with_kwargs=True))
        if self._modulation is not None:
            self._hooks.append(self._modulation.install())

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    @property
    def installed(self) -> bool:
        return bool(self._hooks)

    # --- per call -----------------------------------------------------------------
    def begin(self, serving: bool, traces: list[StreamTrace] | None, step: int) -> None:
        """A call starts: ``serving`` when the cache serves it; ``traces`` (one per list) get its residuals."""
        self.counted = [0] * len(self._lists)
        self._serving, self._traces, self._step = serving, traces or None, step
        self._fn_input = [None] * len(self._lists)

    def end(self) -> list[int]:
        """The call ended: the blocks that ran in each list."""
        if self._modulation is not None:
            self._modulation.release()
        self._serving, self._traces = False, None
        self._fn_input = [None] * len(self._lists)
        return self.counted

    @torch.compiler.disable
    def _before_block(self, position, index, module, args, kwargs):
        self.counted[position] += 1  # what really ran
        if self._tell_block_index is not None:
            self._tell_block_index(index, self.sizes[position], kwargs, self._lists[position].block_type)
        if self._modulation is not None:
            kwargs = self._modulation.give(position, index, kwargs)
        if self._traces is not None:
            if index == 0:  # every forward pattern takes the hidden (image) stream first
                self._fn_input[position] = args[0] if args else kwargs.get("hidden_states")
            elif index == self._first_middle_block[position]:
                # Known to compute: the trace drops its old reference before the middle blocks allocate.
                self._traces[position].computing(self._step)
        if self._serving and index in self._copy_input_at[position]:
            count = self._lists[position].hidden_args
            return (*(a.clone() if torch.is_tensor(a) else a for a in args[:count]), *args[count:]), kwargs
        return (args, kwargs) if self._modulation is not None else None

    @torch.compiler.disable
    def _after_fn_blocks(self, position, module, args, output):
        fn_input = self._fn_input[position]
        if self._traces is None or fn_input is None:
            return None
        hidden = output if torch.is_tensor(output) else output[self._lists[position].hidden_output_index]
        self._traces[position].observe(self._step, hidden - fn_input)
        self._fn_input[position] = None
        return None


class ModulationSlices:
    """Each block's own slice of the call's modulation table (see ``registry.BlockModulation``).

    A forward hook on the module that computes the table keeps the call's table; before each block
    runs, its keyword argument is replaced by the slice the model's own loop hands the block at its
    true index (the same view of the same table, so a call the loop runs itself is unchanged).
    """

    def __init__(self, module: torch.nn.Module, spec: BlockModulation, lists: tuple[BlockList, ...]):
        self._source = getattr(module, spec.table)
        self._slicer = getattr(module, spec.slicer)
        self._kwarg = spec.kwarg
        self._kinds = [entry.modulation_kinds for entry in lists]
        self._table = None

    def install(self):
        """The hook that keeps each call's table (its handle, to remove)."""
        return self._source.register_forward_hook(self._keep)

    @torch.compiler.disable
    def _keep(self, module, args, output):
        self._table = output
        return None

    def release(self) -> None:
        self._table = None

    def give(self, position: int, index: int, kwargs: dict) -> dict:
        """``kwargs`` with the block's own slice, for block ``index`` of list ``position``."""
        kinds = self._kinds[position]
        if self._table is None or not kinds or self._kwarg not in kwargs:
            return kwargs
        slices = tuple(self._slicer(self._table, kind, idx=index) for kind in kinds)
        return {**kwargs, self._kwarg: slices[0] if len(slices) == 1 else slices}


@torch.compiler.disable
def _hidden_states_first(names: tuple[str, ...], module, args, kwargs):
    """Forward pre-hook: the keyword arguments ``names`` become the leading positional arguments."""
    if not all(name in kwargs for name in names):
        return None
    kwargs = dict(kwargs)
    return (*(kwargs.pop(name) for name in names), *args), kwargs
