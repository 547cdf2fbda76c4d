"""Who gets a run's stats: the record names the client and workflow that queued the prompt, and the
websocket event goes to that client only (another editor may show a node with the same id)."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
import pytest

from krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

STATS_EVENT = "krea2_cachedit.stats"


async def _connect(session: aiohttp.ClientSession, server_url: str, client_id: str):
    ws = await session.ws_connect(f"{server_url.replace('http', 'ws', 1)}/ws?clientId={client_id}")
    # The server registers the socket under our id before it sends the first status (with that sid).
    first = json.loads((await ws.receive(timeout=30)).data)
    assert first["type"] == "status" and first["data"]["sid"] == client_id, first
    return ws


async def _events_until(ws, done, timeout: float) -> list[dict]:
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


async def _queue_and_listen(server_url: str, body: dict) -> tuple[str, list[dict], list[dict]]:
    """Queue ``body`` with two editors connected (A and B); the events each one received."""
    id_a, id_b = uuid.uuid4().hex, uuid.uuid4().hex
    async with aiohttp.ClientSession() as session:
        ws_a, ws_b = await _connect(session, server_url, id_a), await _connect(session, server_url, id_b)
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
        events_a = await _events_until(ws_a, ended if "client_id" in body else idle, timeout=300)
        # The stats event is sent before the prompt ends; give B's socket a moment all the same.
        events_b = await _events_until(ws_b, lambda event: False, timeout=1.0)
        await ws_a.close()
        await ws_b.close()
    return prompt_id, events_a, events_b


def _record(server, prompt_id: str) -> dict:
    [record] = server.stats_for(prompt_id, "5")
    return record


def _stats_events(events: list[dict]) -> list[dict]:
    return [event["data"] for event in events if event["type"] == STATS_EVENT]


def test_stats_event_goes_to_the_queuing_client_only(comfy_server):
    workflow_id = str(uuid.uuid4())
    body = {"prompt": krea2_prompt(cache={}, seed=11, prefix="event_a"), "client_id": "$CLIENT_A",
            "extra_data": {"extra_pnginfo": {"workflow": {"id": workflow_id, "nodes": [], "links": []}}}}
    prompt_id, events_a, events_b = asyncio.run(_queue_and_listen(comfy_server.url, body))

    record = _record(comfy_server, prompt_id)
    assert record["workflow_id"] == workflow_id
    client_a = record["client_id"]
    assert client_a and [e["type"] for e in events_a][-1] == "execution_success", events_a
    assert _stats_events(events_a) == [record], "A queued the prompt: A gets its record, once"
    assert _stats_events(events_b) == [], "B did not queue it: B gets no record"


def test_prompt_without_client_sends_no_event(comfy_server):
    body = {"prompt": krea2_prompt(cache={}, seed=12, prefix="event_none")}
    prompt_id, events_a, events_b = asyncio.run(_queue_and_listen(comfy_server.url, body))

    record = _record(comfy_server, prompt_id)
    assert (record["client_id"], record["workflow_id"]) == (None, None)
    assert _stats_events(events_a) == [] and _stats_events(events_b) == []
