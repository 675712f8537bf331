"""Structured output end to end for all three formats, over 127.0.0.1 on asyncio and trio.

The embedded server streams schema-shaped JSON for a Chat ``response_format``, a Responses
``text.format`` and an Anthropic tool forced by ``tool_choice``; the client streams it and
:class:`~fluxstream.structured.StructuredTracker` turns the events into typed partial objects.
For each format: the partial objects only ever grow (a value once there never changes, strings
and lists only extend), the final object equals the parse of the non-streamed answer
(``stream`` false), and a reply cut by ``max_tokens`` or by the network is a stated partial
object, never a silent half one. Faults apply: a drop mid-object is resumed and the object is
still exact.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel

import fluxstream
from fluxstream.errors import ParseError
from fluxstream.server import Server
from fluxstream.structured import (
    StructuredTracker,
    anthropic_tool,
    response_format,
    schema_name,
    text_format,
)

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Plan a day in Zürich"}]


class Stop(BaseModel):
    place: str
    minutes: int
    note: str | None


class Plan(BaseModel):
    """A day out."""

    title: str
    city: str
    mood: Literal["calm", "busy"]
    budget: float
    stops: list[Stop]
    tags: list[str]
    backup: Stop | None


FORMATS = ("chat", "responses", "messages")


def request_for(api: str, **extra: Any) -> dict[str, Any]:
    """The request body asking ``api`` for a ``Plan``."""
    if api == "chat":
        return {"model": "m", "messages": USER, "response_format": response_format(Plan),
                **extra}
    if api == "responses":
        return {"model": "m", "input": USER, "text": {"format": text_format(Plan)}, **extra}
    return {"model": "m", "max_tokens": 1024, "messages": USER, "tools": [anthropic_tool(Plan)],
            "tool_choice": {"type": "tool", "name": schema_name(Plan)}, **extra}


def tracker_for(api: str) -> StructuredTracker:
    if api == "messages":  # the object is the forced tool's input
        return StructuredTracker(tools={schema_name(Plan): Plan})
    return StructuredTracker(Plan)


def result_of(api: str, tracker: StructuredTracker) -> Any:
    return tracker.call_result(0, 0) if api == "messages" else tracker.result()


def grows(before: Any, after: Any) -> bool:
    """``after`` extends ``before``: keys kept, strings and lists only longer, values kept."""
    if isinstance(before, dict):
        return isinstance(after, dict) and all(
            k in after and grows(v, after[k]) for k, v in before.items())
    if isinstance(before, list):
        return isinstance(after, list) and len(before) <= len(after) and all(
            grows(b, a) for b, a in zip(before, after, strict=False))
    if isinstance(before, str):
        return isinstance(after, str) and after.startswith(before)
    return bool(before == after)


async def stream_objects(
    server: Server, api: str, body: dict[str, Any], **options: Any
) -> tuple[list[dict[str, Any]], Any, Any]:
    """Stream ``body`` with the client; every partial object (as a dict), the tracker, the
    reply."""
    tracker = tracker_for(api)
    snapshots: list[dict[str, Any]] = []
    async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-s") as client:
        endpoint = {"chat": client.chat, "responses": client.responses,
                    "messages": client.messages}[api]
        async with endpoint.stream(**body, **options) as stream:
            async for event in stream:
                changed = tracker.feed(event)
                if changed is not None and changed.value is not None:
                    snapshots.append(changed.value.model_dump(exclude_unset=True))
    return snapshots, tracker, stream.reply


async def unstreamed(server: Server, api: str, body: dict[str, Any]) -> Plan:
    """The object of the non-streamed answer (``stream`` false), parsed in one go."""
    path = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        answer = (await http.post(path[api], json={**body, "stream": False})).json()
    if api == "chat":
        return Plan.model_validate_json(answer["choices"][0]["message"]["content"])
    if api == "responses":
        return Plan.model_validate_json(answer["output"][0]["content"][0]["text"])
    return Plan.model_validate(answer["content"][0]["input"])


@pytest.mark.parametrize("api", FORMATS)
async def test_partials_grow_and_final_equals_the_unstreamed_parse(
    aserver: Server, api: str
) -> None:
    body = request_for(api)
    snapshots, tracker, reply = await stream_objects(aserver, api, body)
    result = result_of(api, tracker)
    assert reply.outcome is fluxstream.Outcome.DONE
    assert result.complete and result.value == await unstreamed(aserver, api, body)
    assert len(snapshots) > 20  # the object filled in piece by piece
    assert snapshots[0] == {} or len(snapshots[0]) <= 1
    for before, after in itertools.pairwise(snapshots):
        assert grows(before, after), (before, after)
    assert snapshots[-1] == result.value.model_dump()
    assert len(result.value.stops) == 3 and any(ord(c) > 127 for c in result.text)


@pytest.mark.parametrize("api", FORMATS)
async def test_max_tokens_cut_is_a_stated_partial(aserver: Server, api: str) -> None:
    limit = {"max_output_tokens": 25} if api == "responses" else {"max_tokens": 25}
    body = request_for(api, **limit)
    snapshots, tracker, reply = await stream_objects(aserver, api, body)
    result = result_of(api, tracker)
    assert reply.choices[0].stop == "length"
    # The reason is the provider's own: length, incomplete (Responses), max_tokens.
    assert not result.complete and result.reason == reply.choices[0].finish_reason
    assert result.value is not None and snapshots[-1] == result.value.model_dump(
        exclude_unset=True)
    assert "title" in result.value.model_fields_set and "tags" not in result.value.model_fields_set
    for before, after in itertools.pairwise(snapshots):
        assert grows(before, after)


@pytest.mark.parametrize("api", FORMATS)
async def test_network_cut_mid_object_is_a_stated_partial(aserver: Server, api: str) -> None:
    body = request_for(api)
    _, tracker, reply = await stream_objects(
        aserver, api, body, resume=fluxstream.ResumePolicy.off(),
        extra_headers={"X-Fluxstream-Fault": "drop-after-events=30"})
    result = result_of(api, tracker)
    assert reply.outcome is fluxstream.Outcome.TRUNCATED
    assert not result.complete and result.reason == "truncated"
    full = await unstreamed(aserver, api, body)
    assert result.value is not None and result.value.title == full.title
    assert result.value.model_fields_set < set(Plan.model_fields)


@pytest.mark.parametrize("api", FORMATS)
async def test_drop_mid_object_resumed_is_exact(aserver: Server, api: str) -> None:
    """A drop in the middle of the object, resumed by ``Last-Event-ID`` (the ``sse-ids``
    profile numbers the Responses and Messages events): the partials still only grow and the
    object is the unstreamed one."""
    body = request_for(api)
    snapshots, tracker, reply = await stream_objects(
        aserver, api, body,
        extra_headers={"X-Fluxstream-Fault": "drop-after-events=30,fail-first=1,write-size=11",
                       "X-Fluxstream-Profile": "sse-ids"})
    result = result_of(api, tracker)
    assert reply.outcome is fluxstream.Outcome.DONE
    assert [r.attempt for r in aserver.records.requests] == [1, 2]
    assert aserver.records.requests[-1].last_event_id is not None
    assert result.complete and result.value == await unstreamed(aserver, api, body)
    for before, after in itertools.pairwise(snapshots):
        assert grows(before, after)


@pytest.mark.parametrize("api", ("chat", "responses"))
async def test_fenced_json_is_still_the_object(aserver: Server, api: str) -> None:
    body = request_for(api)
    _, tracker, _ = await stream_objects(
        aserver, api, body, extra_headers={"X-Fluxstream-Profile": "fenced-json"})
    result = result_of(api, tracker)
    assert result.text.startswith("```json\n") and result.text.endswith("\n```")
    assert result.complete and result.value == await unstreamed(aserver, api, body)


@pytest.mark.parametrize("api", ("chat", "responses"))
async def test_a_model_ignoring_the_schema_is_a_parse_error(aserver: Server, api: str) -> None:
    body = request_for(api)
    snapshots, tracker, reply = await stream_objects(
        aserver, api, body, extra_headers={"X-Fluxstream-Profile": "ignore-schema"})
    assert snapshots == [] and reply.outcome is fluxstream.Outcome.DONE
    with pytest.raises(ParseError) as info:
        tracker.result()
    assert info.value.reason == "invalid_json" and info.value.text == reply.text
