"""Who gets a run's stats: the record names the client and workflow that queued the prompt, and the
websocket event goes to that client only (another editor may show a node with the same id)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from devkit.krea2_prompts import krea2_prompt
from stats_events import queue_and_listen, stats_events

pytestmark = pytest.mark.comfyui


def _record(server, prompt_id: str) -> dict:
    [record] = server.stats_for(prompt_id, "5")
    return record


def test_stats_event_goes_to_the_queuing_client_only(comfy_server):
    workflow_id = str(uuid.uuid4())
    body = {"prompt": krea2_prompt(cache={}, seed=11, prefix="event_a"), "client_id": "$CLIENT_A",
            "extra_data": {"extra_pnginfo": {"workflow": {"id": workflow_id, "nodes": [], "links": []}}}}
    prompt_id, events_a, events_b = asyncio.run(queue_and_listen(comfy_server.url, body))

    record = _record(comfy_server, prompt_id)
    assert record["workflow_id"] == workflow_id
    client_a = record["client_id"]
    assert client_a and [e["type"] for e in events_a][-1] == "execution_success", events_a
    assert stats_events(events_a) == [record], "A queued the prompt: A gets its record, once"
    assert stats_events(events_b) == [], "B did not queue it: B gets no record"


def test_prompt_without_client_sends_no_event(comfy_server):
    body = {"prompt": krea2_prompt(cache={}, seed=12, prefix="event_none")}
    prompt_id, events_a, events_b = asyncio.run(queue_and_listen(comfy_server.url, body))

    record = _record(comfy_server, prompt_id)
    assert (record["client_id"], record["workflow_id"]) == (None, None)
    assert stats_events(events_a) == [] and stats_events(events_b) == []
