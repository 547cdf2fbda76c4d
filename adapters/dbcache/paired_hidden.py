"""Blocks whose hidden state is a pair of two widths (LTX-2's video and audio tokens), as one tensor for cache-dit.

cache-dit's wrapper takes one hidden-state tensor: it keeps it, subtracts it from the Fn blocks' output
for the residual it decides on, adds the cached residual to it, and hands it from block to block.
LTX-2's loop calls each block with the pair ``(video, audio)`` first (two widths, so no one tensor),
the blocks update both in place and return them. So, while a run is open:

- around cache-dit's wrapper of such a list, the pair becomes one tensor of shape (1, video values +
  audio values), each part contiguous (the video tokens of every batch row, then the audio ones), and
  the wrapper's result becomes the pair again: views of that tensor, in the loop's shapes;
- around each block the wrapper calls, the tensor is handed in as the same two views, so the block's
  in-place updates land in it, and the pair it returns becomes the tensor again.

The residual cache-dit decides on, keeps and adds is then the video and the audio tokens together: a
cached call serves both from one residual, and each CFG stream has its own (its own context or slot).
Calls computed around the cache run the blocks on the loop's own pair: the hooks leave those alone.
"""

from __future__ import annotations

import torch

from ..families.registry import BlockList


class PairedHidden:
    """The pair <-> tensor hooks on the wrappers and blocks of every ``hidden_pair`` list, for one run."""

    def __init__(self, lists: tuple[BlockList, ...], blocks: list[torch.nn.ModuleList]):
        self._paired = [(position, list_) for position, (entry, list_) in enumerate(zip(lists, blocks))
                        if entry.hidden_pair]
        self._shapes: tuple[torch.Size, torch.Size] | None = None   # the loop's (video, audio) shapes this call
        self._given = None   # (tensor, its two views) handed to the block that is running
        self._hooks: list = []

    @classmethod
    def needed(cls, lists: tuple[BlockList, ...]) -> bool:
        return any(entry.hidden_pair for entry in lists)

    def install(self, wrappers: list[torch.nn.Module]) -> None:
        """After ``BlockProbe.install``: the block pre-hooks then run after the probe's (which copies the tensor
        where cache-dit keeps it), and the block forward hooks before the probe's (which reads the tensor)."""
        for position, blocks in self._paired:
            wrapper = wrappers[position]
            self._hooks.append(wrapper.register_forward_pre_hook(self._pack_pair, with_kwargs=True))
            self._hooks.append(wrapper.register_forward_hook(self._unpack_result))
            for block in blocks:
                self._hooks.append(block.register_forward_pre_hook(self._hand_views, with_kwargs=True))
                self._hooks.append(block.register_forward_hook(self._take_back, prepend=True))

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._shapes, self._given = [], None, None

    # --- around the wrapper -------------------------------------------------------------
    @torch.compiler.disable
    def _pack_pair(self, module, args, kwargs):
        if not args or not is_pair(args[0]):
            return None
        video, audio = args[0]
        self._shapes = (video.shape, audio.shape)
        packed = torch.cat([video.reshape(-1), audio.reshape(-1).to(video.dtype)]).unsqueeze(0)
        return (packed, *args[1:]), kwargs

    @torch.compiler.disable
    def _unpack_result(self, module, args, output):
        if not torch.is_tensor(output) or self._shapes is None:
            return None
        return self._views(output.contiguous())

    # --- around each block --------------------------------------------------------------
    @torch.compiler.disable
    def _hand_views(self, module, args, kwargs):
        if not args or not torch.is_tensor(args[0]) or self._shapes is None:
            return None   # a call computed around the cache: the loop's own pair
        packed = args[0].contiguous()   # views of a contiguous tensor alias it: the block's updates land there
        views = self._views(packed)
        self._given = (packed, views)
        return (views, *args[1:]), kwargs

    @torch.compiler.disable
    def _take_back(self, module, args, output):
        given, self._given = self._given, None
        if given is None or not is_pair(output):
            return None
        packed, views = given
        if output[0] is views[0] and output[1] is views[1]:
            return packed   # updated in place, as LTX-2's blocks do
        return torch.cat([output[0].reshape(-1), output[1].reshape(-1).to(output[0].dtype)]).unsqueeze(0)

    def _views(self, packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        video_shape, audio_shape = self._shapes
        flat = packed.view(-1)
        split = video_shape.numel()
        return flat[:split].view(video_shape), flat[split:].view(audio_shape)


def is_pair(value) -> bool:
    """Whether ``value`` is a (video, audio) pair of tensors, as LTX-2's loop hands and takes back."""
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(torch.is_tensor(v) for v in value)
