"""A ``Last-Event-ID`` resume is verified before it is trusted (issue 10 item 3).

Each server here cuts the first connection after some text, then answers the reconnect the
way a real server got it wrong: it ignores the header and sends a new sample, renumbers its
ids, or uses ids that cannot be ordered. Whatever it does, no character is ever shown twice
and nothing is spliced from another sample: the resume falls back to the next strategy, or
the stream ends ``truncated`` saying why. A server that replays the same sample from the top
is fine: the replay is checked against what was delivered and dropped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
from sse_frames import chat_choice, chat_frame

import fluxstream
from fluxstream._events import Reset, TextDelta
from fluxstream._retry import ResumePolicy, RetryPolicy

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"connection: close\r\n\r\n"
)
FIRST = ["The ", "quick ", "brown "]
REST = ["fox ", "jumps."]
OTHER = ["A ", "different ", "sample."]


def event(event_id: str | None, text: str | None, cid: str = "chatcmpl-1", finish: bool = False
          ) -> bytes:
    choice = chat_choice(text, finish="stop" if finish else None, with_finish=True)
    return chat_frame(choice, id=cid, event_id=event_id)


def sample(pieces: list[str], ids: list[str | None], cid: str = "chatcmpl-1") -> bytes:
    out = b"".join(event(i, p, cid) for i, p in zip(ids, pieces, strict=True))
    return out + event(None, None, cid, finish=True) + b"data: [DONE]\n\n"


Reconnect = Callable[[str | None], bytes]


@asynccontextmanager
async def dropping_server(first: bytes, reconnect: Reconnect) -> AsyncIterator[list[Any]]:
    """Connection 1 gets ``first`` and is cut; every later one gets ``reconnect(last_id)``.
    Yields ``[base_url, seen_last_ids]``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    seen: list[str | None] = []

    async def handle(sock: anyio.abc.SocketStream) -> None:
        async with sock:
            data = b""
            with anyio.move_on_after(2):
                while b"\r\n\r\n" not in data:
                    data += await sock.receive()
            head = data.partition(b"\r\n\r\n")[0].decode()
            last = None
            for line in head.split("\r\n"):
                if line.lower().startswith("last-event-id:"):
                    last = line.split(":", 1)[1].strip()
            seen.append(last)
            try:
                if len(seen) == 1:
                    await sock.send(HEAD + first)  # then the connection drops, no end
                else:
                    await sock.send(HEAD + reconnect(last))
            except (anyio.BrokenResourceError, OSError):
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        try:
            yield [f"http://127.0.0.1:{port}/v1", seen]
        finally:
            tg.cancel_scope.cancel()


async def run(
    base: str, resume: ResumePolicy | None = None
) -> tuple[fluxstream.Reply, list[Any]]:
    events: list[Any] = []
    client = fluxstream.AsyncClient(
        base, retry=RetryPolicy(max_attempts=1), resume=resume or ResumePolicy()
    )
    async with client, client.chat.stream(model="m", messages=MSG) as stream:
        with anyio.fail_after(10):
            async for ev in stream:
                events.append(ev)
    return stream.reply, events


def shown(events: list[Any]) -> str:
    """What a renderer honouring offsets and ``Reset`` shows, asserting no overlap."""
    buf = ""
    for ev in events:
        if isinstance(ev, Reset):
            buf = ""
        elif isinstance(ev, TextDelta) and ev.choice == 0:
            assert ev.offset == len(buf), f"text at {ev.offset} over {len(buf)} shown"
            buf += ev.text
    return buf


FIRST_BYTES = b"".join(event(str(i + 1), p) for i, p in enumerate(FIRST))
HONEST_TEXT = "".join(FIRST + REST)


async def test_an_honest_server_resumes_seamlessly(anyio_backend: str) -> None:
    def honest(last: str | None) -> bytes:
        assert last == "3"
        return sample(REST, ["4", "5"])

    async with dropping_server(FIRST_BYTES, honest) as (base, seen):
        reply, events = await run(base)
    assert seen == [None, "3"]
    assert reply.outcome is fluxstream.Outcome.DONE and shown(events) == HONEST_TEXT


async def test_a_server_replaying_the_same_sample_from_the_top_is_deduplicated(
    anyio_backend: str,
) -> None:
    def replay(last: str | None) -> bytes:
        return sample(FIRST + REST, ["1", "2", "3", "4", "5"])

    async with dropping_server(FIRST_BYTES, replay) as (base, _):
        reply, events = await run(base)
    assert reply.outcome is fluxstream.Outcome.DONE and shown(events) == HONEST_TEXT


@pytest.mark.parametrize(
    ("name", "reconnect"),
    [
        # The header is ignored, a new generation with its own completion id and ids 1..n.
        ("new sample", lambda last: sample(OTHER, ["1", "2", "3"], cid="chatcmpl-2")),
        # Same completion id, ids from the top, but not the same text: a new sample.
        ("different replay", lambda last: sample(OTHER, ["1", "2", "3"])),
        # The continuation is real but the ids start again at 1: they do not continue.
        ("renumbered", lambda last: sample(REST, ["1", "2"])),
        # Ids past the resume point, but a new generation (new completion id).
        ("new sample, later ids", lambda last: sample(OTHER, ["7", "8", "9"], cid="chatcmpl-9")),
    ],
)
async def test_a_resume_that_does_not_continue_ends_truncated_saying_why(
    name: str, reconnect: Reconnect, anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with dropping_server(FIRST_BYTES, reconnect) as (base, seen):
        reply, events = await run(base)
    assert len(seen) == 2, name
    assert reply.outcome is fluxstream.Outcome.TRUNCATED, name
    assert shown(events) == "".join(FIRST) == reply.text  # nothing spliced, nothing twice
    assert reply.end_reason is not None and "ResumeMismatchError" in reply.end_reason
    assert any("Last-Event-ID rejected" in r.getMessage() for r in caplog.records)


async def test_non_numeric_ids_restarted_from_the_top_are_checked_and_dropped(
    anyio_backend: str,
) -> None:
    ids = ["a7f", "b21", "c90", "d44", "e05"]
    first = b"".join(event(i, p) for i, p in zip(ids, FIRST, strict=False))

    def restart_same(last: str | None) -> bytes:
        assert last == "c90"
        return sample(FIRST + REST, ids)

    async with dropping_server(first, restart_same) as (base, _):
        reply, events = await run(base)
    assert reply.outcome is fluxstream.Outcome.DONE and shown(events) == HONEST_TEXT


async def test_non_numeric_ids_of_a_new_sample_are_not_spliced(anyio_backend: str) -> None:
    first = b"".join(event(i, p) for i, p in zip(["a7f", "b21", "c90"], FIRST, strict=True))

    def new_sample(last: str | None) -> bytes:
        return sample(OTHER, ["x1", "x2", "x3"], cid="chatcmpl-2")

    async with dropping_server(first, new_sample) as (base, _):
        reply, events = await run(base)
    assert reply.outcome is fluxstream.Outcome.TRUNCATED
    assert shown(events) == "".join(FIRST)


async def test_a_rejected_resume_falls_back_to_the_next_strategy(anyio_backend: str) -> None:
    """Restart allowed: the new sample is shown after a Reset, never spliced onto the old."""

    def new_sample(last: str | None) -> bytes:
        return sample(OTHER, ["1", "2", "3"], cid="chatcmpl-2")

    async with dropping_server(FIRST_BYTES, new_sample) as (base, seen):
        reply, events = await run(base, ResumePolicy(restart=True))
    assert seen == [None, "3", None]  # the restart sends no Last-Event-ID
    assert any(isinstance(e, Reset) for e in events)
    assert reply.outcome is fluxstream.Outcome.DONE and shown(events) == "".join(OTHER)
