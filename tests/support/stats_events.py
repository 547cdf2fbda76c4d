"""The pack's stats event as editors receive it: two websocket clients, one of them queuing a prompt."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import json
import sys
import uuid
from pathlib import Path

import aiohttp

from devkit.comfy_harness import load_pack


def _routes_module():
    """The pack's ``nodes/routes.py`` (which sends the stats event), imported as ComfyUI imports it, under the
    pack's ``nodes`` package, but without running ``nodes/__init__.py``: that imports ComfyUI's ``comfy_api``,
    which only the server's process has. The stand-in package is gone from ``sys.modules`` afterwards."""
    package = f"{load_pack().__name__}.nodes"
    if package in sys.modules:   # the real package, where this process has ComfyUI
        return importlib.import_module(f"{package}.routes")
    folder = Path(load_pack().__file__).parent / "nodes"
    spec = importlib.util.spec_from_file_location(package, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    sys.modules[package] = importlib.util.module_from_spec(spec)
    try:
        return importlib.import_module(f"{package}.routes")
    finally:
        for name in (package, f"{package}.routes"):
            sys.modules.pop(name, None)


STATS_EVENT = _routes_module().STATS_EVENT


async def connect(session: aiohttp.ClientSession, server_url: str, client_id: str):
    ws = await session.ws_connect(f"{server_url.replace('http', 'ws', 1)}/ws?clientId={client_id}")
    # The server registers the socket under our id before it sends the first status (with that sid).
    first = json.loads((await ws.receive(timeout=30)).data)
    assert first["type"] == "status" and first["data"]["sid"] == client_id, first
    return ws


async def events_until(ws, done, timeout: float) -> list[dict]:
    """JSON events on ``ws`` until ``done(event)`` or ``timeout`` seconds without one."""
    events = []
    while True:
        try:
            message = await ws.receive(timeout=timeout)
        except asyncio.TimeoutError:
            return events
        if message.type != aiohttp.WSMsgType.TEXT:
            if message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                return events
            continue  # previews and other binary messages
        events.append(json.loads(message.data))
        if done(events[-1]):
            return events


async def queue_and_listen(server_url: str, body: dict) -> tuple[str, list[dict], list[dict]]:
    """Queue ``body`` with two editors connected (A and B); the events each one received."""
    id_a, id_b = uuid.uuid4().hex, uuid.uuid4().hex
    async with aiohttp.ClientSession() as session:
        ws_a, ws_b = await connect(session, server_url, id_a), await connect(session, server_url, id_b)
        body = json.loads(json.dumps(body).replace("$CLIENT_A", id_a))
        async with session.post(f"{server_url}/prompt", json=body) as response:
            answer = await response.json()
        assert "prompt_id" in answer, answer
        prompt_id = answer["prompt_id"]

        def ended(event):
            return (event["type"] in ("execution_success", "execution_error")
                    and event["data"].get("prompt_id") == prompt_id)
        # "execution_*" go to the queuing client only; without one, wait until the queue is empty.
        def idle(event):
            return event["type"] == "status" and event["data"]["status"]["exec_info"]["queue_remaining"] == 0
        events_a = await events_until(ws_a, ended if "client_id" in body else idle, timeout=300)
        # The stats event is sent before the prompt ends; give B's socket a moment all the same.
        events_b = await events_until(ws_b, lambda event: False, timeout=1.0)
        await ws_a.close()
        await ws_b.close()
    return prompt_id, events_a, events_b


def stats_events(events: list[dict]) -> list[dict]:
    return [event["data"] for event in events if event["type"] == STATS_EVENT]
