"""The Fn blocks' residual of each stream, traced as cache-dit compares it.

cache-dit decides per stream and step whether to serve the step from its cache: past the warmup,
mask and limits (``decision_rules``), the step is cached when the relative change of the Fn
blocks' residual, ``mean|r_k - r_t| / mean|r_k|``, is below the threshold, where ``k`` is the
last *computed* step of that stream (cache-dit keeps no residual of a cached step). cache-dit
measures that change only when the threshold can decide, and keeps it to itself. The pack
measures it for every step, the same way (the same formula in the residual's own dtype, so the
very value cache-dit compares), from the residual its block hooks see (``StreamTrace``).

The threshold advisor (``threshold_advisor``) needs the change between other pairs of steps too,
since a different threshold computes different steps: each step's residual is kept as a fixed
subsample of at most ``SAMPLE_SIZE`` values (at most 64 KiB per step and stream), which
estimates the mean absolute values of a full-size residual to about half a percent; the pairs
cache-dit compared keep their exact value.
"""

from __future__ import annotations

import torch

SAMPLE_SIZE = 1 << 14


# cache-dit's change (``CachedContextManager.similarity``) is ``mean|ref - cur| / mean|ref|`` in the
# residual's own dtype (bf16 on a bf16 model): the same operations in the same order here, taken apart
# so that ``mean|ref|`` is computed once per reference and the quotient once per run.
def change_numerator(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    return (reference - current).abs().mean()


def change_scale(reference: torch.Tensor) -> torch.Tensor:
    return reference.abs().mean()


def sample_index(numel: int, device=None) -> torch.Tensor | None:
    """``SAMPLE_SIZE`` evenly spread positions in ``range(numel)`` (None: take every element).

    Integer arithmetic: a float32 ``linspace`` rounds above 2**24 elements (one 1024x1024 Krea-2
    image's Fn residual is 26M) and its last index would be ``numel``, out of bounds.
    """
    if numel <= SAMPLE_SIZE:
        return None
    return torch.arange(SAMPLE_SIZE, dtype=torch.int64, device=device) * (numel - 1) // (SAMPLE_SIZE - 1)


class StreamTrace:
    """One stream cache-dit keeps a residual for (cond, uncond, or one call per step) in one context.

    It holds one full-size Fn residual, the last computed step's (cache-dit's reference): the
    current call's residual replaces it as soon as the call is known to compute (``computing``),
    before the middle blocks allocate their activations.
    """

    def __init__(self, branches: tuple[int, ...], context: int, start_step: int, blocks: str | None = None):
        self.branches = branches
        self.blocks = blocks   # the block list whose Fn residual this is, when the model has several
        self.context = context
        self.start_step = start_step
        # step -> (reference step, mean|ref - cur|, mean|ref|) as 0-d tensors, None where there was no
        # reference. Divided once, after the run: the same quotient, one device op less per call.
        self.diffs: dict[int, tuple[int, torch.Tensor, torch.Tensor] | None] = {}
        self.samples: dict[int, torch.Tensor] = {}   # in the residual's dtype; made float after the run
        self.cached: dict[int, bool] = {}
        self._reference: tuple[int, torch.Tensor] | None = None   # (step, Fn residual) of the last computed step
        # mean|ref| of the reference, computed when first compared: every step cached against the same
        # reference shares it.
        self._reference_scale: torch.Tensor | None = None
        self._pending: tuple[int, torch.Tensor] | None = None
        self._index: torch.Tensor | None = None
        self._index_for: tuple[int, torch.device] | None = None   # (numel, device) ``_index`` was made for

    @torch.no_grad()
    def observe(self, step: int, residual: torch.Tensor) -> None:
        """The Fn residual of this stream's call at ``step`` (before cache-dit decides)."""
        residual = residual.detach()
        reference = self._reference
        if reference is not None and reference[1].shape == residual.shape:
            if self._reference_scale is None:
                self._reference_scale = change_scale(reference[1])
            self.diffs[step] = (reference[0], change_numerator(reference[1], residual), self._reference_scale)
        else:
            self.diffs[step] = None
        flat = residual.reshape(-1)
        if self._index_for != (flat.numel(), flat.device):
            self._index, self._index_for = sample_index(flat.numel(), flat.device), (flat.numel(), flat.device)
        # A small residual is its own sample (a view: it is no larger than a sample). ``index_select``:
        # the same values as ``flat[index]``, without advanced indexing's setup (about 50 us a call on a CPU).
        self.samples[step] = flat if self._index is None else flat.index_select(0, self._index)
        self._pending = (step, residual)

    def computing(self, step: int) -> None:
        """The call at ``step`` computes in full: its residual becomes the reference now."""
        if self._pending is not None and self._pending[0] == step:
            self._reference, self._pending = self._pending, None
            self._reference_scale = None

    def finish(self, step: int, cached: bool) -> None:
        """What the call at ``step`` turned out to be; a computed step becomes the next reference."""
        self.cached[step] = cached
        if not cached:
            self.computing(step)
        self._pending = None

    def release(self) -> None:
        self._reference, self._reference_scale, self._pending = None, None, None

    def measured_diffs(self) -> dict[int, float | None]:
        """Each step's change against its reference, as cache-dit computed it (one device read for all)."""
        steps = [s for s, d in self.diffs.items() if d is not None]
        values = []
        if steps:
            numerators, scales = (torch.stack([self.diffs[s][i] for s in steps]) for i in (1, 2))
            values = (numerators / scales).float().tolist()   # elementwise: each the quotient cache-dit forms
        measured = dict(zip(steps, values))
        return {step: measured.get(step) for step in self.diffs}


class TraceBook:
    """A run's traces: one per (cache context, stream, block list), each list being its own cache context."""

    def __init__(self, list_names: list[str]):
        self._names = list_names if len(list_names) > 1 else [None]
        self._traces: dict[tuple, StreamTrace] = {}

    def traces_for(self, context: int, start_step: int, key) -> list[StreamTrace]:
        """The stream ``key``'s trace in context ``context`` (counted from 1), one per block list."""
        traces = []
        for position, name in enumerate(self._names):
            trace_key = (context, key, position)
            if trace_key not in self._traces:
                self._traces[trace_key] = StreamTrace(key.branches, context - 1, start_step, blocks=name)
            traces.append(self._traces[trace_key])
        return traces

    def all(self) -> list[StreamTrace]:
        return list(self._traces.values())

    def release(self) -> None:
        """Drop the full-size residuals the traces still hold (the run is over)."""
        for trace in self._traces.values():
            trace.release()
