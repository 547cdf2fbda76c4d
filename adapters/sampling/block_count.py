"""How many blocks of each list really ran in one call: a forward pre-hook on every block.

For a method that only needs the count (whole-call forecasting: a forecast call runs none); DBCache's
``BlockProbe`` counts in its own hooks, beside what else it does per block.
"""

from __future__ import annotations

import functools

import torch


class BlockCounter:
    """Counts the blocks of ``blocks`` (one ModuleList per list, in loop order) that run between ``begin`` and
    ``end``."""

    def __init__(self, blocks: list[torch.nn.ModuleList]):
        self._blocks = blocks
        self.sizes = [len(list_) for list_ in blocks]
        self.counted = [0] * len(blocks)
        self._hooks: list = []

    @property
    def num_blocks(self) -> int:
        return sum(self.sizes)

    def install(self) -> None:
        self._hooks = [block.register_forward_pre_hook(functools.partial(self._count, position))
                       for position, blocks in enumerate(self._blocks) for block in blocks]

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def begin(self) -> None:
        self.counted = [0] * len(self._blocks)

    def end(self) -> list[int]:
        return self.counted

    @torch.compiler.disable
    def _count(self, position, module, args):
        self.counted[position] += 1
