"""``client.chat/responses/messages.stream(..., log=log)``: the stream is recorded into the
reply log as it is delivered, whatever way it is read (events, ``text(coalesce=)``,
``objects()``, ``complete()``). Run against the memory log and a real Redis (``make_log``).

The upstream is the embedded server over 127.0.0.1; followers read the log back and must see
exactly what the producer's consumer saw.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
import sniffio
from pydantic import BaseModel
from relay_support import Followed, expected_text, request

import fluxstream
from fluxstream.relay import MemoryReplyLog, ReplyLog
from fluxstream.server import ServerThread
from fluxstream.structured import StructuredTracker

pytestmark = pytest.mark.anyio

MakeLog = Callable[..., ReplyLog]


class Stop(BaseModel):
    place: str
    minutes: int


class Plan(BaseModel):
    title: str
    stops: list[Stop]
    tags: list[str]


async def follow_all(log: ReplyLog, key: str) -> Followed:
    seen = Followed()
    with anyio.fail_after(20):
        async for item in log.follow(key):
            seen.events.append(item)
    return seen


async def test_log_records_a_chat_stream_read_event_by_event(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    log = make_log()
    req = request(tokens=40)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(content_key="events", log=log, **req)
        delivered: list[fluxstream.Event] = []
        async with stream:
            async for event in stream:
                delivered.append(event)
        assert getattr(stream, "log_error", "not recorded") is None
    seen = await follow_all(log, "events")
    seen.check()
    assert seen.text == expected_text(req) == stream.reply.text
    assert seen.end.outcome is fluxstream.Outcome.DONE
    shown = "".join(e.text for e in delivered if isinstance(e, fluxstream.TextDelta))
    assert seen.text == shown


async def test_log_records_text_coalesced_and_complete(
    make_log: MakeLog, upstream: ServerThread
) -> None:
    log = make_log()
    req = request(tokens=40)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(content_key="coalesced", log=log, **req)
        async with stream:
            pieces = [piece async for piece in stream.text(coalesce=0.02)]
        reply = await client.chat.complete(content_key="completed", log=log, **req)
    assert "".join(pieces) == expected_text(req) == reply.text
    assert len(pieces) < 40  # joined per frame
    for key in ("coalesced", "completed"):
        seen = await follow_all(log, key)
        seen.check()
        assert seen.text == expected_text(req), key
        assert seen.end.outcome is fluxstream.Outcome.DONE


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_log_records_structured_objects_of_every_endpoint(
    make_log: MakeLog, upstream: ServerThread, api: str
) -> None:
    """``objects(coalesce=)`` read through the recorded stream: the objects are those of the
    stream, and the log holds every event (a follower rebuilds the same object)."""
    log = make_log()
    user = [{"role": "user", "content": "plan"}]
    key = f"objects-{api}"
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        if api == "chat":
            stream = client.chat.stream(model="m", messages=user, response_format=Plan,
                                        content_key=key, log=log)
        elif api == "responses":
            stream = client.responses.stream(model="m", input=user, response_format=Plan,
                                             content_key=key, log=log)
        else:
            stream = client.messages.stream(model="m", messages=user, max_tokens=1024,
                                            response_format=Plan, content_key=key, log=log)
        async with stream:
            objects = [plan async for plan in stream.objects(coalesce=0.02)]
        final = stream.parsed
    assert final.complete and objects and objects[-1] == final.value
    seen = await follow_all(log, key)
    assert seen.end.outcome is fluxstream.Outcome.DONE
    followed = StructuredTracker(
        None if api == "messages" else Plan, tools={"Plan": Plan} if api == "messages" else None)
    for item in seen.events:
        followed.feed(item.event)
    result: Any = followed.call_result(0, 0) if api == "messages" else followed.result()
    assert result.complete and result.value == final.value


@pytest.mark.trio_only
async def test_memory_log_passthrough_on_trio(anyio_backend: str, upstream: ServerThread) -> None:
    assert sniffio.current_async_library() == "trio"
    log = MemoryReplyLog()
    user = [{"role": "user", "content": "plan"}]
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        stream = client.chat.stream(model="m", messages=user, response_format=Plan,
                                    content_key="trio", log=log)
        async with stream:
            objects = [plan async for plan in stream.objects(coalesce=0.02)]
    assert objects and objects[-1] == stream.parsed.value
    seen = await follow_all(log, "trio")
    seen.check()
    assert seen.text == stream.reply.text and seen.end.outcome is fluxstream.Outcome.DONE
