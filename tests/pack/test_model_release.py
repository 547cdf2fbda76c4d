"""A transformer that ran through a cache run is freed once its owner drops it (core: diffusers Krea-2).

Every module the run patched or hooked (the transformer, its text path, its blocks) must die with
the model: nothing of the pack's (its module-level registries included) may hold one past the run,
and cache-dit must leave each module's own attributes as they were (``disable_cache`` leaves a bound
``forward`` on the instance, a cycle that only a full garbage collection frees).
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from cache_runs import COND, FAST, OFF, SIGMAS, STEPS, UNCOND, Stream, forward, open_run, seeded_transformer

from krea2_cachedit.adapters.sampling import text_path


class Interrupted(Exception):
    """Stands for ComfyUI's InterruptProcessingException (matched by name: "Interrupt")."""


def _sample(transformer, settings, reuse_text: bool, interrupt_at: int | None = None):
    streams = {COND: Stream(COND, 1, tokens=5), UNCOND: Stream(UNCOND, 2, tokens=7)}
    with open_run(transformer, settings, conds_per_step=2) as run:
        for i in range(STEPS):
            if i == interrupt_at:
                raise Interrupted("stop")
            for branch, stream in streams.items():
                text = ((branch,), stream.context) if reuse_text else None
                with run.model_call(SIGMAS[i], [branch], [stream.x.shape, stream.context.shape], text=text):
                    out = forward(transformer, stream.x, stream.context, SIGMAS[i])
                stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    return run


def _own_attributes(module: torch.nn.Module) -> dict[str, set[str]]:
    return {name: set(sub.__dict__) for name, sub in module.named_modules()}


CASES = {
    "cached, text reused": (FAST, True, None),
    "cached, text every call": (FAST, False, None),
    "caching off": (OFF, True, None),
    "interrupted": (FAST, True, 3),
}


@pytest.mark.parametrize("case", CASES)
def test_a_model_that_ran_is_freed_and_left_as_it_was(case):
    settings, reuse_text, interrupt_at = CASES[case]
    transformer = seeded_transformer()
    before = _own_attributes(transformer)
    watched = {"transformer": transformer, "text_fusion": transformer.text_fusion, "txt_in": transformer.txt_in,
               "first block": transformer.transformer_blocks[0], "last block": transformer.transformer_blocks[-1]}
    refs = {name: weakref.ref(module) for name, module in watched.items()}
    try:
        run = _sample(transformer, settings, reuse_text, interrupt_at)
        assert run.observation.text_path.reused == (2 * STEPS - 2 if reuse_text else 0)
    except Interrupted:
        assert interrupt_at is not None
    assert _own_attributes(transformer) == before, "the run left attributes on a module"
    assert not text_path._ACTIVE, "a finished run is still registered for its text path"
    del watched, transformer
    run = None
    gc.collect()
    alive = [name for name, ref in refs.items() if ref() is not None]
    assert not alive, f"still alive after the run and its owner dropped them: {alive}"
