"""Where run stats go: the log, ``GET /krea2_cachedit/stats`` and a websocket event."""

from __future__ import annotations

import collections
import logging
import threading

from ..adapters.record import strict_json
from ..adapters.record.run_record import RunRecord

STATS_ROUTE = "/krea2_cachedit/stats"
STATS_EVENT = "krea2_cachedit.stats"
logger = logging.getLogger(__name__)
_registered = False


class RecentRuns:
    """The last runs' records as published (strict JSON data), newest last; shared between the
    sampler and the web server threads."""

    def __init__(self, limit: int = 50):
        self._records: collections.deque[dict] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()

    def add(self, data: dict) -> None:
        with self._lock:
            self._records.append(data)

    def all(self) -> list[dict]:
        with self._lock:
            return list(self._records)


RECENT_RUNS = RecentRuns()


def register():
    """Add the stats route to ComfyUI's web server (once)."""
    global _registered
    if _registered:
        return
    from aiohttp import web
    from server import PromptServer

    @PromptServer.instance.routes.get(STATS_ROUTE)
    async def krea2_cachedit_stats(request):
        # Records are strict JSON data already (RunRecord.as_dict); strict dumps keeps it so.
        return web.json_response({"runs": RECENT_RUNS.all()}, dumps=strict_json.dumps)

    _registered = True


def publish(record: RunRecord, node_name: str):
    """One log line, the record in the recent-runs list, and a websocket event for the editor that queued it.

    Called on the thread that runs the prompt, while it runs: that is when ComfyUI knows who queued it.
    """
    logger.info(record.log_line(node_name))
    try:
        from server import PromptServer

        server = PromptServer.instance
    except Exception:  # no ComfyUI server (the pack's adapters used on their own)
        server = None
    # Who asked for the run: the client (websocket id) that queued the prompt and the id of the
    # editor workflow it came from; None when unknown.
    origin = prompt_origin(server, record.prompt_id) if server is not None else {"client_id": None,
                                                                                 "workflow_id": None}
    data = {**record.as_dict(), **origin}
    RECENT_RUNS.add(data)
    # Only the client that queued the prompt: another editor (tab, user) may show a node with the same id.
    # A prompt queued without a client id (an API script) has no editor to show it; the route still has it.
    if server is None or not origin["client_id"]:
        return
    try:
        server.send_sync(STATS_EVENT, data, sid=origin["client_id"])
    except Exception as error:  # the stats must never fail a finished image
        logger.debug("%s [node %s]: could not send the stats event: %s", node_name, record.node_id, error)


def prompt_origin(server, prompt_id: str) -> dict:
    """The client that queued the running prompt, and the id of the editor workflow it was queued from."""
    extra_data = _running_extra_data(server, prompt_id)
    # ComfyUI sets server.client_id from the running prompt's extra_data when it starts it; the
    # prompt's own extra_data comes first, the attribute covers a queue whose layout changed.
    client_id = extra_data.get("client_id", getattr(server, "client_id", None))
    pnginfo = extra_data.get("extra_pnginfo")
    workflow = pnginfo.get("workflow") if isinstance(pnginfo, dict) else None
    workflow_id = workflow.get("id") if isinstance(workflow, dict) else None
    return {"client_id": client_id if isinstance(client_id, str) and client_id else None,
            "workflow_id": workflow_id if isinstance(workflow_id, str) and workflow_id else None}


def _running_extra_data(server, prompt_id: str) -> dict:
    """The ``extra_data`` of the running prompt ``prompt_id`` ({} when not found)."""
    queue = getattr(server, "prompt_queue", None)
    current = getattr(queue, "get_current_queue_volatile", None) or getattr(queue, "get_current_queue", None)
    if not prompt_id or current is None:
        return {}
    try:
        running, _queued = current()
    except Exception as error:
        logger.debug("Cache-DiT stats: could not read the running prompt %s: %s", prompt_id, error)
        return {}
    # Queue items are (number, prompt_id, prompt, extra_data, outputs_to_execute, ...).
    for item in running:
        if isinstance(item, (tuple, list)) and len(item) > 3 and item[1] == prompt_id and isinstance(item[3], dict):
            return item[3]
    return {}
