"""A small model with Flux's loop and its registry entry, for the engine's tests on two block lists against real
cache-dit (no ComfyUI).

Double blocks called with keywords (``block(img=..., txt=...)``), returning (img, txt) (cache-dit's Pattern_0), then
single blocks on cat(txt, img) (Pattern_3), each told its index, the list's size and type through
``transformer_options``. Its blocks add into their inputs in place, as Flux's do, or (``in_place=False``) out of place:
the same numbers, the reference for what a cached step must give.
"""

from __future__ import annotations

import torch

from krea2_cachedit.adapters.families.registry import BlockList, TransformerFamily

STEPS, WIDTH = 8, 16
SIGMAS = torch.linspace(1.0, 0.0, STEPS + 1)
DOUBLE, SINGLE = 3, 4


class DoubleBlock(torch.nn.Module):
    def __init__(self, in_place: bool):
        super().__init__()
        self.in_place = in_place
        self.img, self.txt = torch.nn.Linear(WIDTH, WIDTH), torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, img, txt, vec, transformer_options={}):
        transformer_options["seen"].append(
            (transformer_options["block_type"], transformer_options["block_index"], transformer_options["total_blocks"]))
        joint = torch.tanh(torch.cat((txt, img), 1) + vec)
        img_add, txt_add = self.img(joint[:, txt.shape[1]:]), self.txt(joint[:, :txt.shape[1]])
        if self.in_place:
            img += img_add
            txt += txt_add
            return img, txt
        return img + img_add, txt + txt_add


class SingleBlock(torch.nn.Module):
    def __init__(self, in_place: bool):
        super().__init__()
        self.in_place = in_place
        self.lin = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x, vec, transformer_options={}):
        transformer_options["seen"].append(
            (transformer_options["block_type"], transformer_options["block_index"], transformer_options["total_blocks"]))
        add = self.lin(torch.tanh(x + vec))
        if self.in_place:
            x += add
            return x
        return x + add


class TwoLists(torch.nn.Module):
    def __init__(self, in_place: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.double_blocks = torch.nn.ModuleList(DoubleBlock(in_place) for _ in range(DOUBLE))
        self.single_blocks = torch.nn.ModuleList(SingleBlock(in_place) for _ in range(SINGLE))
        self.seen: list = []

    def forward(self, img, txt, sigma):
        options = {"seen": self.seen}
        vec = sigma * torch.ones(WIDTH)
        img, txt = img.clone(), txt.clone()
        options.update(total_blocks=len(self.double_blocks), block_type="double")
        for i, block in enumerate(self.double_blocks):
            options["block_index"] = i
            img, txt = block(img=img, txt=txt, vec=vec, transformer_options=options)
        x = torch.cat((txt, img), 1)
        options.update(total_blocks=len(self.single_blocks), block_type="single")
        for i, block in enumerate(self.single_blocks):
            options["block_index"] = i
            x = block(x, vec=vec, transformer_options=options)
        return x[:, txt.shape[1]:]


def family(in_place: bool = True) -> TransformerFamily:
    return TransformerFamily(
        name="two lists", model="two lists", class_path=f"{__name__}.TwoLists", check_forward_pattern=False,
        block_lists=(BlockList("double_blocks", "Pattern_0", "double", ("img", "txt"), adds_in_place=in_place,
                               arguments=("vec",)),
                     BlockList("single_blocks", "Pattern_3", "single", adds_in_place=in_place, arguments=("vec",))),
        block_options_kwarg="transformer_options")
