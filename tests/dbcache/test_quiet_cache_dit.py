"""cache-dit stays quiet during a run (its info and warnings on every enable, refresh and disable
would flood ComfyUI's console) and speaks again after it, with its loggers' levels untouched."""

from __future__ import annotations

import logging

from cache_runs import COND, FAST, Stream, run_single


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def cache_dit_loggers() -> list[logging.Logger]:
    return [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)
            if name.startswith("cache_dit") or name == "CACHE_DIT"]


def test_cache_dit_is_quiet_during_a_run_and_speaks_after_it(transformer):
    run_single(transformer, FAST, Stream(COND, 1))   # cache-dit's modules and loggers exist now
    loggers = cache_dit_loggers()
    levels = [lg.level for lg in loggers]
    collect = Collect()
    for lg in loggers:
        lg.addHandler(collect)
    try:
        run_single(transformer, FAST, Stream(COND, 1))
        during = list(collect.messages)
        logging.getLogger("CACHE_DIT").warning("cache-dit speaks again")
    finally:
        for lg in loggers:
            lg.removeHandler(collect)
    assert during == [], during
    assert collect.messages == ["cache-dit speaks again"]
    assert [lg.level for lg in loggers] == levels, "levels are left as cache-dit set them"
