"""cache-dit stays quiet during a run (its info and warnings on every enable, refresh and disable
would flood ComfyUI's console) and speaks again after it, with its loggers' levels untouched."""

from __future__ import annotations

import logging

from cache_runs import COND, FAST, Stream, run_single


def cache_dit_loggers() -> dict[str, int]:
    return {name: logging.getLogger(name).level for name in list(logging.Logger.manager.loggerDict)
            if name.startswith("cache_dit") or name == "CACHE_DIT"}


def test_cache_dit_is_quiet_during_a_run_and_speaks_after_it(transformer, capfd):
    run_single(transformer, FAST, Stream(COND, 1))   # cache-dit's modules and loggers exist now
    capfd.readouterr()
    levels = cache_dit_loggers()
    run_single(transformer, FAST, Stream(COND, 1))
    during = capfd.readouterr()
    assert "[Cache-DiT]" not in during.out + during.err, during
    assert cache_dit_loggers() == levels, "levels are left as cache-dit set them"
    logging.getLogger("CACHE_DIT").warning("cache-dit speaks again")
    assert "[Cache-DiT] cache-dit speaks again" in capfd.readouterr().out
