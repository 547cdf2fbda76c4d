"""What DBCache relies on in a family's block loop, checked for each run (see ``sampling.loop_drift``).

cache-dit runs each block list as one wrapper: the loop calls it once, with what it would hand the list's
first block, and the wrapper hands every block the same arguments and reads each block's output by its
forward pattern. That is right only where the loop calls its blocks as the registry says:

- the hidden state(s) first, by position, or by the registry's keywords, or by cache-dit's own names;
- the same other arguments for every block (but the slices the registry makes itself, Chroma's);
- each block returning what the pattern says (a tensor, a pair, or the pattern's tuple);
- and the block requiring no parameter the registry does not know.

The signatures are checked when the run opens (``signature_mismatch``); what the loop really passes and
what a block really returns, on the run's first call the cache decides (``first_call``): the loop then sees
its list as cache-dit's wrapper followed by a stand-in for each further block, which records what the loop
hands it and hands the hidden state on unchanged (the wrapper ran every block already). So the call is the
cache's own, at no cost; on a mismatch it stops with ``LoopDrift`` and is computed again without the cache.
"""

from __future__ import annotations

import contextlib
import inspect

import torch

from ..families.registry import BlockList, ResolvedTransformer
from ..sampling.loop_drift import LoopDrift, describe, drift_warning, parameters_of, same_argument, takes_any
from .paired_hidden import is_pair

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class BlockContract:
    """DBCache's part of the registry for ``target``: checked at run open and on the first decided call.

    Made before cache-dit wraps the lists: ``blocks`` are the model's own (during a call cache-dit's wrappers
    stand in the module's attributes)."""

    def __init__(self, target: ResolvedTransformer):
        self.target = target
        self.blocks = target.block_modules

    def signature_mismatch(self) -> str | None:
        """The warning for a block whose forward no longer takes what the registry says (None: all do)."""
        for entry, blocks in zip(self.target.block_lists, self.blocks):
            for block in {type(block): block for block in blocks}.values():
                found = _signature_problem(entry, block)
                if found is not None:
                    return drift_warning(self.target.family.name, f"{type(block).__name__}.forward (the "
                                         f"'{entry.attr}' blocks)", _expected_signature(entry), found)
        return None

    @contextlib.contextmanager
    def first_call(self, swapped_lists: list[torch.nn.ModuleList] = ()):
        """Around the run's first call the cache serves: raises ``LoopDrift`` when the loop does not call the blocks
        as the registry says (the call's result is then not to be used).

        ``swapped_lists``: the lists cache-dit's forward swaps in for a call (each its wrapper alone). Where the pack's
        call runs around that forward (a family whose forward runs no wrappers: ``forward_runs_wrappers``), the
        module still holds its own lists here, and the stand-ins join the swapped ones, in place, for the call."""
        module, lists = self.target.module, self.target.block_lists
        wrapped = [getattr(module, entry.attr) for entry in lists]   # cache-dit's wrappers, for this call
        in_place = False
        if (not self.target.family.forward_runs_wrappers and len(swapped_lists) == len(lists)
                and all(len(wrappers) == 1 for wrappers in swapped_lists)):
            wrapped, in_place = list(swapped_lists), True
        if any(len(wrappers) != 1 for wrappers in wrapped):
            yield   # not cache-dit's single wrapper (the call runs around the cache): nothing to watch
            return
        recorders = [ListRecorder(entry, blocks, self.target.family) for entry, blocks in zip(lists, self.blocks)]
        hooks = []
        try:
            for entry, wrappers, recorder in zip(lists, wrapped, recorders):
                # First, before the pack's own hooks rewrite the call for cache-dit: the loop's call as it made it.
                hooks.append(wrappers[0].register_forward_pre_hook(recorder.list_called, with_kwargs=True,
                                                                   prepend=True))
                hooks.append(recorder.blocks[0].register_forward_hook(recorder.first_block_returned, prepend=True))
                if in_place:
                    wrappers.extend(recorder.stand_ins)
                else:
                    setattr(module, entry.attr, torch.nn.ModuleList([*wrappers, *recorder.stand_ins]))
            yield
            for recorder in recorders:
                recorder.check_all_called()
        finally:
            for hook in hooks:
                hook.remove()
            for entry, wrappers in zip(lists, wrapped):
                if in_place:
                    del wrappers[1:]
                else:
                    setattr(module, entry.attr, wrappers)


class ListRecorder:
    """One block list's watch: what the loop hands cache-dit's wrapper (the first block's call), what the first
    block returns, and, through a stand-in for each further block, what the loop hands that block."""

    def __init__(self, entry: BlockList, blocks: torch.nn.ModuleList, family):
        self.entry, self.blocks, self.family = entry, blocks, family.name
        pattern = entry._pattern()
        self.inputs, self.outputs = pattern.In, pattern.Out
        sliced = family.modulation.kwarg if family.modulation is not None and entry.modulation_kinds else None
        self.sliced = {sliced} if sliced else set()
        self.stand_ins = [_StandIn(self, index) for index in range(1, len(blocks))]
        self.order: list[int] = []
        self._first_rest: tuple[tuple, dict] | None = None

    @torch.compiler.disable
    def list_called(self, module, args, kwargs):
        self.order.append(0)
        self._first_rest = self._rest(0, args, kwargs)[1]
        return None

    @torch.compiler.disable
    def first_block_returned(self, module, args, output):
        if not self._output_fits(output):
            self._drift(f"what {type(module).__name__}.forward returns", self._expected_output(), _shape_of(output))
        return None

    def stand_in_called(self, index: int, args: tuple, kwargs: dict):
        self.order.append(index)
        hidden, rest = self._rest(index, args, kwargs)
        differing = _differing(self._first_rest, rest, self.sliced)
        if differing:
            self._drift(self._where(index), f"every '{self.entry.attr}' block handed the same other arguments",
                        f"block {index} handed its own {differing}")
        values = [hidden[name] for name in self.outputs]
        return values[0] if len(values) == 1 else tuple(values)

    def check_all_called(self) -> None:
        if self.order != list(range(len(self.blocks))):
            self._drift(f"the loop over '{self.entry.attr}'", "each block called once, in order",
                        f"the calls {self.order}")

    def _rest(self, index: int, args: tuple, kwargs: dict):
        """({input name: value}, (other positional, other keyword arguments)) of a block's call."""
        hidden, kwargs = {}, dict(kwargs)
        for position, name in enumerate(self.inputs):
            keyword = self.entry.hidden_kwargs[position] if self.entry.hidden_kwargs else name
            if position < len(args):
                hidden[name] = args[position]
            elif keyword in kwargs or name in kwargs:
                hidden[name] = kwargs.pop(keyword if keyword in kwargs else name)
            else:
                named = ", ".join(repr(k) for k in kwargs) or "none"
                self._drift(self._where(index), self._expected_hidden(),
                            f"{len(args)} positional argument(s) and the keywords {named}")
            if not self._hidden_fits(hidden[name]):
                self._drift(self._where(index), self._expected_hidden(), f"{_shape_of(hidden[name])} as its {name}")
        return hidden, (args[len(self.inputs):], kwargs)

    def _where(self, index: int) -> str:
        return f"{type(self.blocks[index]).__name__} {index} of '{self.entry.attr}' as the loop calls it"

    def _hidden_fits(self, value) -> bool:
        return is_pair(value) if self.entry.hidden_pair else torch.is_tensor(value)

    def _output_fits(self, output) -> bool:
        # Every pattern with several outputs has two (Pattern_0's, Pattern_1's): a pair of tensors, as LTX-2's.
        return is_pair(output) if self.entry.hidden_pair or len(self.outputs) > 1 else torch.is_tensor(output)

    def _expected_hidden(self) -> str:
        names = self.entry.hidden_kwargs or self.inputs
        return f"its hidden state(s) first, by position or as {', '.join(repr(n) for n in names)}"

    def _expected_output(self) -> str:
        if self.entry.hidden_pair:
            return "the (video, audio) pair"
        return "a tensor" if len(self.outputs) == 1 else f"a tuple ({', '.join(self.outputs)})"

    def _drift(self, where: str, expected: str, found: str):
        raise LoopDrift(drift_warning(self.family, where, expected, found))


class _StandIn(torch.nn.Module):
    """In the place of one further block for the first call: tells its recorder what it got, hands the hidden
    state on."""

    def __init__(self, recorder: ListRecorder, index: int):
        super().__init__()
        self.index = index
        object.__setattr__(self, "_recorder", recorder)   # not a child module: the recorder holds the real blocks

    @torch.compiler.disable
    def forward(self, *args, **kwargs):
        return self._recorder.stand_in_called(self.index, args, kwargs)


def _differing(first: tuple[tuple, dict] | None, rest: tuple[tuple, dict], sliced: set[str]) -> str | None:
    """Which of a block's other arguments differ from the first block's (None: none)."""
    if first is None:
        return None
    (first_args, first_kwargs), (args, kwargs) = first, rest
    if len(args) != len(first_args):
        return f"{len(args)} positional arguments (the first block {len(first_args)})"
    for position, (a, b) in enumerate(zip(first_args, args)):
        if not same_argument(a, b):
            return f"positional argument {position + 1} after the hidden state(s)"
    keys = (set(first_kwargs) | set(kwargs)) - sliced
    for key in sorted(keys):
        if key not in first_kwargs or key not in kwargs or not same_argument(first_kwargs[key], kwargs[key]):
            return repr(key)
    return None


def _shape_of(value) -> str:
    if torch.is_tensor(value):
        return f"a tensor {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(_shape_of(v) for v in value)})"
    return f"a {type(value).__name__}"


def _expected_signature(entry: BlockList) -> str:
    hidden = (f"its hidden state(s) as {', '.join(entry.hidden_kwargs)}" if entry.hidden_kwargs
              else f"its first {entry.hidden_args} parameter(s) positional (the hidden state(s))")
    known = ", ".join(entry.arguments) or "none"
    return f"{hidden}, and no required parameters but these: {known}"


def _signature_problem(entry: BlockList, block: torch.nn.Module) -> str | None:
    """What in ``block``'s forward differs from ``entry`` (None: it fits, or it takes anything)."""
    parameters = parameters_of(block)
    if parameters is None or takes_any(parameters):
        return None
    names = [p.name for p in parameters]
    variadic = {p.kind for p in parameters} & set(_VARIADIC)
    if entry.hidden_kwargs:
        hidden = set(entry.hidden_kwargs)
        if not hidden <= set(names) and inspect.Parameter.VAR_KEYWORD not in variadic:
            return describe(parameters)
    else:
        leading = [p for p in parameters[:entry.hidden_args] if p.kind in _POSITIONAL]
        if len(leading) < entry.hidden_args and inspect.Parameter.VAR_POSITIONAL not in variadic:
            return describe(parameters)
        hidden = {p.name for p in leading}
    unknown = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.kind not in _VARIADIC
               and p.name not in hidden and p.name not in entry.arguments]
    return describe(parameters) if unknown else None
