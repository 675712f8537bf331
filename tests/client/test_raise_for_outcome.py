"""For users who expect an exception: ``reply.raise_for_outcome()`` and ``raise_for_outcome=True``.

A cut stream ends its ``async for`` quietly with outcome ``truncated``; the official SDKs
raise, and code written for them never reads ``outcome``. As httpx has
``raise_for_status()``: ``reply.raise_for_outcome()`` returns the reply when it ended well
(``done``, ``finished``), so calls chain, and otherwise raises a typed error carrying the
partial reply (``StreamTruncatedError``, ``StreamFailedError``; ``StreamError`` when it was
cancelled or has not ended), exactly what ``complete()`` raises. ``raise_for_outcome=True``
(client-wide, or per call) makes the end of iteration raise it, after the last event (the
``End``) was delivered and after the observers were told of the end, on both transports and
through ``text()``, ``text(coalesce=)`` and ``objects()`` too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pydantic
import pytest

import fluxstream
from fluxstream._parser import StreamParser
from fluxstream.errors import StreamError, StreamFailedError, StreamTruncatedError
from fluxstream.server import ServerThread

MESSAGES = [{"role": "user", "content": "A reply long enough to be cut in many places"}]


def _chunk(text: str, finish: str | None = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    return f"data: {json.dumps({'id': 'c', 'choices': [choice]})}\n\n".encode()


def ended(*pieces: bytes) -> fluxstream.Reply:
    parser = StreamParser(content_key="k")
    for piece in pieces:
        parser.feed(piece)
    parser.close()
    return parser.reply


# ------------------------------------------------------------------ Reply.raise_for_outcome


def test_a_reply_that_ended_well_is_returned_so_calls_chain() -> None:
    done = ended(_chunk("Hi"), _chunk("", "stop"), b"data: [DONE]\n\n")
    finished = ended(_chunk("Hi"), _chunk("", "stop"))
    assert (done.outcome, finished.outcome) == (fluxstream.Outcome.DONE,
                                                fluxstream.Outcome.FINISHED)
    assert done.raise_for_outcome() is done
    assert finished.raise_for_outcome().text == "Hi"


@pytest.mark.parametrize(("reply", "error", "message"), [
    (ended(_chunk("Hel")), StreamTruncatedError, "before every choice finished"),
    (ended(_chunk("Hel"), b'data: {"error": {"message": "overloaded", "type": "x"}}\n\n'),
     StreamFailedError, "overloaded"),
    (fluxstream.Reply(outcome=fluxstream.Outcome.CANCELLED), StreamError, "cancelled"),
    (fluxstream.Reply(), StreamError, "has not ended"),
], ids=["truncated", "failed", "cancelled", "streaming"])
def test_a_reply_that_did_not_end_well_raises_a_typed_error_carrying_it(
    reply: fluxstream.Reply, error: type[StreamError], message: str
) -> None:
    with pytest.raises(error, match=message) as caught:
        reply.raise_for_outcome()
    assert type(caught.value) is error and caught.value.reply is reply
    # A reply dumped (a database, the relay) and read back raises the same.
    again = fluxstream.Reply.model_validate_json(reply.model_dump_json())
    with pytest.raises(error, match=message):
        again.raise_for_outcome()


# ------------------------------------------------------------------ the end of iteration


class Ends:
    """An observer that notes when it was told of the end."""

    def __init__(self) -> None:
        self.ended: list[fluxstream.Outcome | None] = []

    def on_open(self, info: fluxstream.StreamInfo) -> None:
        pass

    def on_event(self, event: fluxstream.Event) -> None:
        pass

    def on_end(self, reply: fluxstream.Reply, stats: fluxstream.StreamStats) -> None:
        self.ended.append(reply.outcome)


@pytest.fixture(scope="module")
def upstream() -> Any:
    with ServerThread(profile="openai") as running:
        yield running


def cut(**extra: str) -> dict[str, str]:
    """Headers of a stream cut after a few events (the retry that follows is not cut, but
    the client here neither retries nor resumes)."""
    return {"X-Fluxstream-Fault": "drop-after-events=6",
            "X-Fluxstream-Attempt-Key": uuid.uuid4().hex, **extra}


def client(upstream: ServerThread, transport: str, **options: Any) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(
        upstream.base_url, api_key="sk-x", transport=transport,
        retry=fluxstream.RetryPolicy.off(), resume=fluxstream.ResumePolicy.off(), **options)


TRANSPORTS = pytest.mark.parametrize("transport", ["auto", "httpx"])
#: A pause of the server after a few events, so that a cancel after the first delta comes
#: before the end however loaded the machine is.
SLOW = {"X-Fluxstream-Fault": "stall=3,stall-after-events=3"}


@pytest.mark.anyio
@TRANSPORTS
async def test_a_cut_stream_raises_after_its_last_event_and_after_on_end(
    upstream: ServerThread, transport: str
) -> None:
    observer = Ends()
    events: list[fluxstream.Event] = []
    async with client(upstream, transport, raise_for_outcome=True,
                      observers=[observer]) as flux:
        stream = flux.chat.stream(model="m", messages=MESSAGES, extra_headers=cut())
        with anyio.fail_after(10):
            async with stream:
                with pytest.raises(StreamTruncatedError) as caught:
                    async for event in stream:
                        assert observer.ended == []  # told of the end only after the last
                        events.append(event)
                assert observer.ended == [fluxstream.Outcome.TRUNCATED]
    assert isinstance(events[-1], fluxstream.End)  # delivered before the raise
    reply = caught.value.reply
    assert reply is not None and reply.outcome is fluxstream.Outcome.TRUNCATED
    shown = "".join(e.text for e in events if isinstance(e, fluxstream.TextDelta))
    assert shown == reply.text != ""
    assert caught.value.__cause__ is stream.cause
    # complete() raises the same error, with the same words.
    async with client(upstream, transport, raise_for_outcome=True) as flux:
        with pytest.raises(StreamTruncatedError) as completed:
            await flux.chat.complete(model="m", messages=MESSAGES, extra_headers=cut())
    assert str(completed.value) == str(caught.value)


@pytest.mark.anyio
@TRANSPORTS
@pytest.mark.parametrize(("on_client", "on_call", "raises"), [
    (False, None, False), (True, None, True), (True, False, False), (False, True, True),
])
async def test_client_wide_and_per_call(
    upstream: ServerThread, transport: str, on_client: bool, on_call: bool | None, raises: bool
) -> None:
    async with client(upstream, transport, raise_for_outcome=on_client) as flux:
        stream = flux.chat.stream(model="m", messages=MESSAGES, extra_headers=cut(),
                                  raise_for_outcome=on_call)
        with anyio.fail_after(10):
            async with stream:
                try:
                    async for _ in stream:
                        pass
                except StreamTruncatedError:
                    raised = True
                else:
                    raised = False
    assert raised is raises and stream.reply.outcome is fluxstream.Outcome.TRUNCATED


@pytest.mark.anyio
@TRANSPORTS
async def test_a_stream_that_ended_well_does_not_raise(upstream: ServerThread,
                                                       transport: str) -> None:
    async with client(upstream, transport, raise_for_outcome=True) as flux:
        async with flux.chat.stream(model="m", messages=MESSAGES) as stream:
            async for _ in stream:
                pass
        reply = stream.reply
        assert reply.raise_for_outcome() is reply and reply.outcome is fluxstream.Outcome.DONE


@pytest.mark.anyio
@TRANSPORTS
async def test_an_error_event_raises_stream_failed_error(upstream: ServerThread,
                                                         transport: str) -> None:
    async with client(upstream, transport, raise_for_outcome=True) as flux:
        stream = flux.chat.stream(model="m", messages=MESSAGES,
                                  extra_headers={"X-Fluxstream-Profile": "error-midstream"})
        with anyio.fail_after(10):
            async with stream:
                with pytest.raises(StreamFailedError) as caught:
                    async for _ in stream:
                        pass
    assert caught.value.reply is not None and caught.value.reply.text
    assert stream.reply.outcome is fluxstream.Outcome.FAILED


@pytest.mark.anyio
@TRANSPORTS
async def test_cancelled_raises_but_leaving_early_does_not(upstream: ServerThread,
                                                           transport: str) -> None:
    """A ``break`` never reaches the end of iteration; a stream cancelled under the loop
    (``stream.cancel()``, a Stop button in another task) ends it, with an error to catch."""
    async with client(upstream, transport, raise_for_outcome=True) as flux:
        # The upstream stalls after its first events: a loaded machine that coalesces the
        # server's writes must not hand over the whole reply (then rightly ``done``) in the
        # read the ``break`` follows.
        async with flux.chat.stream(model="m", messages=MESSAGES, extra_headers=SLOW) as stream:
            async for _ in stream:
                break
        assert stream.reply.outcome is fluxstream.Outcome.CANCELLED
        stream = flux.chat.stream(model="m", messages=MESSAGES, extra_headers=SLOW)
        with anyio.fail_after(10):
            async with stream:
                with pytest.raises(StreamError, match="cancelled") as caught:
                    async for event in stream:
                        if isinstance(event, fluxstream.TextDelta):
                            stream.cancel()
        assert type(caught.value) is StreamError
        assert stream.reply.outcome is fluxstream.Outcome.CANCELLED


async def _all(items: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in items]


class Weather(pydantic.BaseModel):
    city: str
    days: int


@pytest.mark.anyio
@TRANSPORTS
@pytest.mark.parametrize("way", ["text", "text-coalesced", "objects", "objects-coalesced"])
async def test_text_and_objects_raise_after_the_last_item(
    upstream: ServerThread, transport: str, way: str
) -> None:
    structured = way.startswith("objects")
    async with client(upstream, transport, raise_for_outcome=True) as flux:
        stream = flux.chat.stream(
            model="m", messages=MESSAGES, extra_headers=cut(),
            response_format=Weather if structured else None)
        seen: list[Any] = []
        with anyio.fail_after(10):
            async with stream:
                coalesce = 0.005 if way.endswith("coalesced") else None
                items = (stream.objects(coalesce=coalesce) if structured
                         else stream.text(coalesce=coalesce))
                with pytest.raises(StreamTruncatedError) as caught:
                    async for item in items:
                        seen.append(item)
    reply = caught.value.reply
    assert reply is not None and reply.text
    if structured:
        assert seen and seen[-1] == reply.parse(Weather).value  # the last object came first
    else:
        assert "".join(seen) == reply.text


@pytest.mark.anyio
async def test_until_done_returns_whatever_the_outcome_and_a_resume_raises_too(
    upstream: ServerThread,
) -> None:
    async with client(upstream, "auto", raise_for_outcome=True) as flux:
        stream = flux.chat.stream(model="m", messages=MESSAGES, extra_headers=cut())
        async with stream:
            reply = await stream.until_done()
        assert reply.outcome is fluxstream.Outcome.TRUNCATED
        token = stream.resume_token()
    async with fluxstream.AsyncClient(upstream.base_url, api_key="sk-x") as flux:
        for raises in (None, True):  # the client's (not raising), then this call's
            resumed = flux.chat.resume(token, raise_for_outcome=raises, extra_headers=SLOW)
            with anyio.fail_after(10):
                async with resumed:
                    try:
                        async for event in resumed:
                            if isinstance(event, fluxstream.TextDelta):
                                resumed.cancel()
                    except StreamError:
                        assert raises
                    else:
                        assert not raises
            assert resumed.reply.outcome is fluxstream.Outcome.CANCELLED


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_raise_for_outcome_is_a_bool(value: Any) -> None:
    with pytest.raises(TypeError, match="raise_for_outcome"):
        fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-x", raise_for_outcome=value)
    flux = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-x")
    if value is not None:
        with pytest.raises(TypeError, match="raise_for_outcome"):
            flux.chat.stream(model="m", messages=MESSAGES, raise_for_outcome=value)
