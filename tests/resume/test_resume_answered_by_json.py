"""A resume answered by a whole JSON reply instead of the events after the resume point.

A server (or a proxy in front of it) may ignore ``Last-Event-ID`` *and* ``stream: true`` and
answer the reconnect with ``application/json``: the whole completion, from its first character.
A JSON body has no event ids, so it cannot be verified as the continuation of what was shown
(README: "a reconnect that fails is never spliced"): it was appended after the delivered text
(``"Hel" + "Hello world"``, outcome ``done``). It rules ``last_event_id`` out like any rejected
reconnect: the next strategy takes over, or the stream ends ``truncated`` with the text shown
exactly once.
"""

from __future__ import annotations

import json

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, MSG, read_request, text, upstream

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import ContentTypeError

pytestmark = pytest.mark.anyio

COMPLETION = json.dumps({
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello world"},
                 "finish_reason": "stop"}],
}).encode()
JSON_REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n" % len(COMPLETION)
) + COMPLETION


async def dropped_then_json(sock: anyio.abc.SocketStream, i: int) -> None:
    await read_request(sock)
    if i == 0:
        await sock.send(HEAD + b"retry: 10\n\n" + text("Hel", "1"))  # then the drop
    else:
        await sock.send(JSON_REPLY)
    await anyio.sleep(0.05)


async def run(policy: ResumePolicy) -> tuple[fluxstream.ReplyStream, list[tuple[int, str]], int]:
    shown: list[tuple[int, str]] = []
    async with upstream(dropped_then_json) as up, fluxstream.AsyncClient(
        up.base, retry=RetryPolicy.off(), resume=policy
    ) as c:
        stream = c.chat.stream(model="m", messages=MSG)
        with anyio.fail_after(5):
            async with stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        shown.append((event.offset, event.text))
        return stream, shown, up.connections


async def test_a_json_answer_to_last_event_id_is_never_spliced(anyio_backend: str) -> None:
    stream, shown, connections = await run(ResumePolicy())
    assert connections == 2
    assert shown == [(0, "Hel")]
    assert stream.reply.text == "Hel"
    assert stream.outcome is fluxstream.Outcome.TRUNCATED
    assert isinstance(stream.cause, ContentTypeError)
    # What came, said plainly (it read "expected ... or application/json, got
    # 'application/json'").
    assert str(stream.cause).startswith("HTTP 200 answered 'application/json'"), stream.cause
    assert "not its events" in str(stream.cause) and "got" not in str(stream.cause)


async def test_after_a_json_answer_the_next_strategy_takes_over(anyio_backend: str) -> None:
    """``restart`` after ``last_event_id`` was refused: a ``Reset``, then the JSON reply."""
    stream, shown, connections = await run(ResumePolicy(restart=True))
    assert connections == 3
    assert shown == [(0, "Hel"), (0, "Hello world")]
    assert stream.reply.text == "Hello world"
    assert stream.outcome is fluxstream.Outcome.DONE
