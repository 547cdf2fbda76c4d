"""cache-dit's console, quiet while a run uses it.

cache-dit logs at info level on every enable, context refresh and disable, which a run does
at least three times: ComfyUI's console would fill with it. During a run its records below
ERROR are dropped; before and after, cache-dit speaks as it likes.
"""

from __future__ import annotations

import contextlib
import logging
import threading


class _BelowErrorWhileQuiet(logging.Filter):
    """Drops cache-dit's records below ERROR while a run wants it quiet.

    A filter, not ``setLevel``: every ``setLevel`` makes logging clear the level cache of every
    logger in the process (hundreds in ComfyUI), which cost several percent of a short run.
    """

    def __init__(self):
        super().__init__("krea2_cachedit.quiet")
        self.depth = 0
        self.lock = threading.Lock()
        self._loggers_seen = 0   # how many loggers the process had when the filter was last handed out

    def filter(self, record: logging.LogRecord) -> bool:
        return self.depth == 0 or record.levelno >= logging.ERROR

    def attach(self) -> None:
        """Onto every cache-dit logger; only when loggers were added since (cache-dit makes them on import)."""
        names = logging.Logger.manager.loggerDict
        if len(names) == self._loggers_seen:
            return
        for name in list(names):
            if name.startswith("cache_dit") or name == "CACHE_DIT":
                logger_ = logging.getLogger(name)
                if self not in logger_.filters:
                    logger_.addFilter(self)
        self._loggers_seen = len(names)


_QUIET = _BelowErrorWhileQuiet()


@contextlib.contextmanager
def quiet_cache_dit():
    """Silence cache-dit's per-call info and warnings (e.g. on every disable_cache); nests, and
    holds across threads (a multi-device run's devices refresh their contexts on their own)."""
    with _QUIET.lock:
        _QUIET.depth += 1
        _QUIET.attach()
    try:
        yield
    finally:
        with _QUIET.lock:
            _QUIET.depth -= 1
