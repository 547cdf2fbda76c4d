"""Where run stats go: the log, ``GET /krea2_cachedit/stats`` and a websocket event."""

from __future__ import annotations

import logging

from ..adapters.stats import RECENT_RUNS, RunRecord

STATS_ROUTE = "/krea2_cachedit/stats"
STATS_EVENT = "krea2_cachedit.stats"
logger = logging.getLogger(__name__)
_registered = False


def register():
    """Add the stats route to ComfyUI's web server (once)."""
    global _registered
    if _registered:
        return
    from aiohttp import web
    from server import PromptServer

    @PromptServer.instance.routes.get(STATS_ROUTE)
    async def krea2_cachedit_stats(request):
        return web.json_response({"runs": RECENT_RUNS.all()})

    _registered = True


def publish(record: RunRecord):
    """One log line, the record in the recent-runs list, and a websocket event for the web extension."""
    logger.info(record.log_line())
    data = RECENT_RUNS.add(record)
    try:
        from server import PromptServer

        PromptServer.instance.send_sync(STATS_EVENT, data)
    except Exception as error:  # the stats must never fail a finished image
        logger.debug("Krea-2 Cache-DiT: could not send the stats event: %s", error)
