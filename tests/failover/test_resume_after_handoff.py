"""Resuming a reply that another upstream is continuing: a resume token taken after a
mid-reply handoff resumes on the upstream that was serving (its API, its translated request,
the delivered text continued there: none of the primary's ids); an in-stream ``Last-Event-ID``
reconnect on the fallback re-sends the continuation it is reading, so the ids it sends number
that stream; ``resume()`` takes per-call ``fallbacks``/``failover`` as ``stream`` does; Gemini
refusing a prefill is asked again with an instruction instead of being left. Real sockets (the
embedded server), asyncio and trio, aiohttp and httpx.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import pytest
from raw_upstream import FINISH, HEAD, LIFE, read_request, text, upstream
from shown_text import CONTINUES
from sse_frames import frame

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Upstream
from fluxstream.apis import CONTINUE_INSTRUCTION
from fluxstream.server import ServerThread, expected_reply

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
#: Every request to the fallback shares it, so ``fail-first=1`` cuts only the first.
ONCE = {"X-Fluxstream-Attempt-Key": "fallback"}


@pytest.fixture(scope="module")
def plain() -> Iterator[ServerThread]:
    with ServerThread(profile=CONTINUES) as running:
        yield running


async def expected_chat(server: ServerThread) -> str:
    async with fluxstream.AsyncClient(server.base_url, api_key="k") as client:
        reply = await client.chat.complete(model="m", messages=MSG, max_tokens=1024)
    return reply.text


async def read_until(
    stream: fluxstream.ReplyStream, past_handoff: int | None = None
) -> tuple[str, list[Any]]:
    """The text as a renderer writing ``buf[offset:]`` shows it, and the other events; with
    ``past_handoff``, the loop is left that many characters after the handoff (the reader
    goes away mid-reply, as a worker that is stopped does)."""
    shown = ""
    others: list[Any] = []
    handoff: Handoff | None = None
    async for event in stream:
        if event.type == "text":
            assert event.offset == len(shown), (event.offset, len(shown))
            shown += event.text
            if (past_handoff is not None and handoff is not None
                    and len(shown) > handoff.offset + past_handoff):
                break
        else:
            if isinstance(event, Handoff):
                handoff = event
            others.append(event)
    return shown, others


async def resume_all(stream: fluxstream.ReplyStream, shown: str) -> tuple[str, list[Any]]:
    others: list[Any] = []
    async with stream:
        async for event in stream:
            if event.type == "text":
                assert event.offset == len(shown), (event.offset, len(shown))
                shown += event.text
            else:
                others.append(event)
    return shown, others


async def test_token_after_a_cross_api_continuation_resumes_on_the_fallback(
    plain: ServerThread,
) -> None:
    expected = await expected_chat(plain)
    with ServerThread(profile="openai", faults="drop-after=900") as primary, \
            ServerThread(profile=CONTINUES, faults="drip=0.005") as fallback:
        fallbacks = [Upstream(fallback.base_url, api_key="k2")]
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=fallbacks,
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024)
            async with stream:
                shown, others = await read_until(stream, past_handoff=30)
                token = stream.resume_token()
                shown = stream.reply.text  # the whole read (the rest of the loop's batch)
        (handoff,) = [e for e in others if isinstance(e, Handoff)]
        assert 0 < handoff.offset < len(shown) < len(expected)
        # True to what is serving: the fallback's API and request, no id of another stream.
        assert token["upstream"] == fallbacks[0].label and token["api"] == "chat_completions"
        assert token["body"]["messages"][-1] == MSG[-1]  # its own request, not a continuation
        assert token["response_id"] is None and token["sequence"] is None
        to_primary = len(primary.records.requests)
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=fallbacks,
        ) as other:
            resumed = other.messages.resume(token)  # the endpoint the reply was asked of
            shown, more = await resume_all(resumed, shown)
        assert len(primary.records.requests) == to_primary  # never the primary again
        sent = fallback.records.requests[-1].json
        assert sent["messages"][-1]["role"] == "assistant"  # the delivered text, continued
        prefix = sent["messages"][-1]["content"]
    reply = resumed.reply
    assert reply.outcome is Outcome.DONE, reply.outcome
    # What was shown, then exactly what the fallback continued it with, asked for what is
    # left of the cap: the text before the token counts a token per 4 characters (no delta
    # count travels in a token), so the reply may end a little before the uninterrupted one.
    assert shown == reply.text == prefix + expected_reply(sent, CONTINUES).text
    assert expected.startswith(shown) and len(shown) > len(prefix)
    assert sent["max_tokens"] <= 1024 - math.ceil(len(prefix) / 4)
    assert not any(e.type in ("reset", "handoff") for e in more)


async def test_in_stream_last_event_id_on_the_fallback_resends_its_continuation(
    plain: ServerThread,
) -> None:
    expected = await expected_chat(plain)
    with ServerThread(profile="openai", faults="drop-after=900") as primary, \
            ServerThread(profile=CONTINUES, faults="drop-after=700,fail-first=1") as fallback:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k",
            fallbacks=[Upstream(fallback.base_url, headers=ONCE)],
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024)
            async with stream:
                shown, others = await read_until(stream)
        first, again = fallback.records.requests[-2:]
    reply = stream.reply
    assert reply.outcome is Outcome.DONE, (reply.outcome, stream.cause)
    assert shown == reply.text == expected
    assert [e.type for e in others].count("handoff") == 1
    assert len(reply.segments) == 2  # the fallback's drop was its own to resume
    # The reconnect re-sent the continuation it was reading, after the id it had.
    assert again.last_event_id
    assert again.json == first.json and first.json["messages"][-1]["role"] == "assistant"


# ----------------------------------------------------------------------- raw upstreams


async def read_json(sock: anyio.abc.SocketStream) -> tuple[dict[str, str], Any]:
    """One request: its headers (lowercased) and its JSON body."""
    request = await read_request(sock, within=LIFE)
    assert request is not None, "the request did not come"
    return request.headers, json.loads(request.body) if request.body else None


async def _cut_primary(sock: anyio.abc.SocketStream, index: int) -> None:
    """A Chat Completions primary without event ids: the reply breaks off at "Hello, wor"."""
    await read_json(sock)
    await sock.send(HEAD + text("Hello, ") + text("wor"))


def _ignoring_fallback(seen: list[tuple[dict[str, str], Any]]) -> Any:
    """A fallback with event ids that breaks off its continuation, answers the Last-Event-ID
    reconnect with a new sample (another completion id), and continues the text when asked."""

    async def script(sock: anyio.abc.SocketStream, index: int) -> None:
        headers, body = await read_json(sock)
        seen.append((headers, body))
        if index == 0:
            await sock.send(HEAD + text("ld, and", "1", id="c1") + text(" more", "2", id="c1"))
        elif index == 1:
            await sock.send(HEAD + text("Something else", "3", id="c2") + FINISH)
        else:
            await sock.send(HEAD + text(" text.", "1", id="c3") + FINISH + b"data: [DONE]\n\n")

    return script


async def test_a_rejected_reconnect_of_a_continuation_continues_there_before_moving_on(
    plain: ServerThread,
) -> None:
    seen: list[tuple[dict[str, str], Any]] = []
    before = len(plain.records.requests)
    async with upstream(_cut_primary) as primary, upstream(_ignoring_fallback(seen)) as fb:
        async with fluxstream.AsyncClient(
            primary.base, api_key="k", fallbacks=[Upstream(fb.base), Upstream(plain.base_url)],
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            async with stream:
                shown, others = await read_until(stream)
    reply = stream.reply
    assert reply.outcome is Outcome.DONE, (reply.outcome, stream.cause)
    assert shown == reply.text == "Hello, world, and more text."
    assert [e.type for e in others].count("handoff") == 1 and len(reply.segments) == 2
    assert len(plain.records.requests) == before  # the next fallback was never asked
    (_, first), (h1, again), (_, third) = seen
    assert h1.get("last-event-id") == "2" and again == first  # the continuation, re-sent
    assert first["messages"][-1]["content"] == "Hello, wor"
    assert third["messages"][-1] == {"role": "assistant", "content": "Hello, world, and more",
                                     "prefix": True}


async def _chat_primary(sock: anyio.abc.SocketStream, index: int) -> None:
    await read_json(sock)
    await sock.send(HEAD + text("The capital") + text(" of Wyo"))


def gemini(t: str, finish: bool = False) -> bytes:
    candidate: dict[str, Any] = {"content": {"parts": [{"text": t}], "role": "model"}}
    if finish:
        candidate["finishReason"] = "STOP"
    return frame({"candidates": [candidate]})


REFUSED = json.dumps({"error": {
    "code": 400, "status": "INVALID_ARGUMENT",
    "message": "Requests ending with a model turn are not supported.",
}}).encode()


def _gemini_without_prefill(seen: list[Any]) -> Any:
    """Gemini as some of its models are: a request ending in a model turn is a 400."""

    async def script(sock: anyio.abc.SocketStream, index: int) -> None:
        _, body = await read_json(sock)
        seen.append(body)
        if body["contents"][-1]["role"] == "model":
            await sock.send(
                b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n" % len(REFUSED) + REFUSED)
        else:
            await sock.send(HEAD + gemini("ming is Cheyenne.", finish=True))

    return script


async def test_gemini_refusing_a_prefill_is_asked_again_with_an_instruction(
    plain: ServerThread,
) -> None:
    seen: list[Any] = []
    before = len(plain.records.requests)
    async with upstream(_chat_primary) as primary, \
            upstream(_gemini_without_prefill(seen)) as fb:
        async with fluxstream.AsyncClient(
            primary.base, api_key="k",
            fallbacks=[Upstream(fb.base, api="gemini"), Upstream(plain.base_url)],
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            async with stream:
                shown, others = await read_until(stream)
    reply = stream.reply
    assert reply.outcome is Outcome.DONE, (reply.outcome, stream.cause)
    assert shown == reply.text == "The capital of Wyoming is Cheyenne."
    assert [e.type for e in others].count("handoff") == 1  # the 400 did not move it on
    assert len(plain.records.requests) == before  # the Gemini upstream kept the reply
    prefilled, instructed = seen
    assert prefilled["contents"][-1] == {"role": "model", "parts": [{"text": "The capital of Wyo"}]}
    assert instructed["contents"][-2:] == [
        {"role": "model", "parts": [{"text": "The capital of Wyo"}]},
        {"role": "user", "parts": [{"text": CONTINUE_INSTRUCTION}]},
    ]
    assert reply.segments[-1].api == "gemini" and reply.segments[-1].kind == "done"


# ----------------------------------------------------------------------- resume(fallbacks=)

ENDPOINTS = {
    "chat": "chat_completions", "responses": "responses", "messages": "anthropic_messages",
    "gemini": "gemini",
}


def _open(client: fluxstream.AsyncClient, endpoint: str, **kw: Any) -> fluxstream.ReplyStream:
    if endpoint == "responses":
        return client.responses.stream(model="m", input=MSG, **kw)
    if endpoint == "gemini":
        return client.gemini.stream(model="m", contents=[
            {"role": "user", "parts": [{"text": "hello there"}]}], **kw)
    return getattr(client, endpoint).stream(model="m", messages=MSG, max_tokens=1024, **kw)


@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
async def test_resume_takes_per_call_fallbacks_and_failover(endpoint: str) -> None:
    with ServerThread(profile="openai", faults="status=503") as primary, \
            ServerThread(profile="sse-ids", faults="drip=0.005") as fallback:
        async with fluxstream.AsyncClient(fallback.base_url, api_key="k") as plain_client:
            expected = (await _open(plain_client, endpoint).until_done()).text
        fallbacks = [Upstream(fallback.base_url, api=ENDPOINTS[endpoint])]
        async with fluxstream.AsyncClient(primary.base_url, api_key="k") as client:
            stream = _open(client, endpoint, fallbacks=fallbacks)
            async with stream:
                await read_until(stream, past_handoff=20)
                token = stream.resume_token()
                shown = stream.reply.text
            assert token["upstream"] == fallbacks[0].label and len(shown) < len(expected)
            resume = getattr(client, endpoint).resume
            with pytest.raises(fluxstream.errors.ResumeTokenError, match="same fallbacks"):
                resume(token)  # the client has none: the token's upstream is not its own
            with pytest.raises(TypeError, match="Failover"):
                resume(token, fallbacks=fallbacks, failover="fast")  # type: ignore[arg-type]
            resumed = resume(token, fallbacks=fallbacks, failover=Failover(
                per_upstream_attempts=1))
            shown, more = await resume_all(resumed, shown)
    assert resumed.reply.outcome is Outcome.DONE
    assert shown == resumed.reply.text == expected
    assert not any(e.type == "reset" for e in more)
