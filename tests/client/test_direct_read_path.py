"""The hot read path (``ReplyStream.__anext__`` awaiting the body itself, ``StreamReader.took``
deciding the outcome) against the general one (``StreamReader.read`` through the channel and
the attempt): the same events, reply, outcome, error and counters, whatever the read
boundaries; and the hot path is the one a plain stream takes.

The general path is forced by making :meth:`StreamReader.direct_body` answer ``None``, as it
does whenever a deadline, a read-ahead task or a cancel scope applies.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import anyio
import anyio.lowlevel
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sse_frames import chat_choice, chat_frame

import fluxstream
from fluxstream._io.reader import StreamReader
from fluxstream._io.transport import ControlledResponse, ResponseControls
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import serve

MSG = [{"role": "user", "content": "hi"}]


def _event(text: str | None, finish: str | None = None, idx: int | None = None) -> bytes:
    choice = chat_choice(text, finish=finish, with_finish=True)
    return chat_frame(choice, id="c1", typed=True, event_id=None if idx is None else str(idx))


#: What a body is made of: content, role-only and usage-less chunks, comments (heartbeats),
#: frames no format reads, an error event; the body ends with or without a finish reason and
#: the sentinel.
_PARTS = st.one_of(
    st.text(min_size=1, max_size=12).map(lambda text: ("text", text)),
    st.just(("role", "")),
    st.just(("ping", "")),
    st.just(("junk", "")),
    st.just(("error", "")),
)


def _body(parts: list[tuple[str, str]], finish: bool, done: bool, ids: bool) -> bytes:
    out = []
    for n, (kind, text) in enumerate(parts):
        idx = n + 1 if ids else None
        if kind == "text":
            out.append(_event(text, idx=idx))
        elif kind == "role":
            out.append(_event(None, idx=idx))
        elif kind == "ping":
            out.append(b": ping\n\n")
        elif kind == "junk":
            out.append(b'data: {"object": "something.else"}\n\n')
        else:
            out.append(b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n')
    if finish:
        out.append(_event(None, "stop"))
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [body[a:b] for a, b in itertools.pairwise(points) if b > a]


class _Pieces:
    """A body that hands out exactly these reads (a checkpoint before each, like a socket)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = list(pieces)

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        await anyio.lowlevel.checkpoint()
        if not self._pieces:
            raise StopAsyncIteration
        return self._pieces.pop(0)


class _Response(ControlledResponse):
    status_code = 200
    def __init__(self, pieces: list[bytes]) -> None:
        self.extensions: dict[str, Any] = {}
        self.headers = httpx.Headers({"content-type": "text/event-stream"})
        self._body = _Pieces(pieces)

    def aiter_bytes(self) -> _Pieces:
        return self._body

    def controls(self) -> ResponseControls:
        # A connection that can be aborted (unscoped reads), closed at once, its body's end
        # already there.
        return ResponseControls(abort=lambda: None, body_complete=lambda: True,
                                close=lambda: None)

    async def aclose(self) -> None:
        pass


class _Http:
    """An HTTP client whose every response body is ``pieces``, read by read."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.sent = 0

    def build_request(self, method: str, url: Any, **_: Any) -> tuple[str, str]:
        return method, str(url)

    async def send(self, request: Any, stream: bool = True) -> _Response:
        self.sent += 1
        return _Response(self.pieces)

    async def aclose(self) -> None:
        pass


@contextmanager
def _general_path() -> Iterator[None]:
    with mock.patch.object(StreamReader, "direct_body", lambda self: None):
        yield


_TIMED = {"time_to_first_token", "duration", "time_to_last_token"}


async def _run(pieces: list[bytes]) -> dict[str, Any]:
    http = _Http(pieces)
    async with fluxstream.AsyncClient(
        "http://127.0.0.1:9/v1", "k", http_client=http,
        retry=RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0),
        resume=ResumePolicy(restart=True, max_resumes=2),
    ) as client:
        events: list[Any] = []
        error = None
        stream = client.chat.stream(model="m", messages=MSG)
        try:
            async with stream:
                async for event in stream:
                    events.append(event)
        except fluxstream.FluxstreamError as exc:
            error = (type(exc).__name__, str(exc))
        stats = {k: v for k, v in vars(stream.stats).items() if k not in _TIMED}
        seen = {
            "events": [repr(e) for e in events],
            "reply": stream.reply.model_dump(mode="json"),
            "outcome": str(stream.outcome),
            "error": error,
            "stats": stats,
            "sent": http.sent,
        }
        # Each stream has a random content key: the one thing the two runs differ in.
        shown = json.dumps(seen, default=str).replace(stream.content_key, "KEY")
        loaded: dict[str, Any] = json.loads(shown)
        return loaded


def _both(pieces: list[bytes], backend: str) -> tuple[dict[str, Any], dict[str, Any]]:
    direct = anyio.run(_run, pieces, backend=backend)
    with _general_path():
        general = anyio.run(_run, pieces, backend=backend)
    return direct, general


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@settings(max_examples=60)
@given(
    parts=st.lists(_PARTS, max_size=8),
    finish=st.booleans(),
    done=st.booleans(),
    ids=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_the_direct_read_equals_the_general_one_at_any_read_boundaries(
    backend: str,
    parts: list[tuple[str, str]],
    finish: bool,
    done: bool,
    ids: bool,
    cuts: list[int],
) -> None:
    pieces = _cut(_body(parts, finish, done, ids), cuts)
    direct, general = _both(pieces, backend)
    assert direct == general


def test_a_read_of_nothing_but_part_of_an_event_reads_on() -> None:
    """A read that completes no event goes on reading (one byte a read)."""
    body = _event("hello") + _event(None, "stop") + b"data: [DONE]\n\n"
    pieces = [body[i : i + 1] for i in range(len(body))]
    direct, general = _both(pieces, "asyncio")
    assert direct == general
    assert direct["outcome"] == str(fluxstream.Outcome.DONE)
    assert direct["reply"]["choices"][0]["text"] == "hello"


@pytest.mark.anyio
async def test_a_plain_stream_reads_its_deltas_without_the_general_read(
    anyio_backend: str,
) -> None:
    """On the real transport (the default one, or httpx with ``--transport httpx``, and on
    trio): with no deadline in force, no delta goes through ``StreamReader.read``; only the
    reads while waiting for the sentinel after the finish reason (``finish_grace``) do."""
    general = 0
    read = StreamReader.read

    async def counted(self: StreamReader) -> list[Any]:
        nonlocal general
        general += 1
        return await read(self)

    async with serve(port=0, profile="openai") as server:
        async with fluxstream.AsyncClient(server.base_url) as client:
            with mock.patch.object(StreamReader, "read", counted):
                stream = client.chat.stream(
                    model="m", messages=MSG, max_tokens=40,
                    extra_headers={"X-Fluxstream-Fault": "drip=0.002"},
                )
                async with stream:
                    deltas = [e async for e in stream if type(e) is fluxstream.TextDelta]
    assert stream.outcome is fluxstream.Outcome.DONE
    assert len(deltas) >= 20
    assert "".join(d.text for d in deltas) == stream.reply.text
    assert stream.stats.content_events == len(deltas)
    assert general <= 3


@pytest.mark.anyio
async def test_a_deadline_in_force_takes_the_general_read(anyio_backend: str) -> None:
    """With ``stall`` set, every read after the first content is bounded: none is direct."""
    direct = 0
    body = StreamReader.direct_body

    def counted(self: StreamReader) -> AsyncIterator[bytes] | None:
        nonlocal direct
        found = body(self)
        direct += found is not None
        return found

    async with serve(port=0, profile="openai") as server:
        async with fluxstream.AsyncClient(
            server.base_url, timeouts=fluxstream.Timeouts(stall=30.0, first_token=30.0)
        ) as client:
            with mock.patch.object(StreamReader, "direct_body", counted):
                stream = client.chat.stream(model="m", messages=MSG, max_tokens=10)
                async with stream:
                    async for _ in stream:
                        pass
    assert stream.outcome is fluxstream.Outcome.DONE
    assert direct == 0
