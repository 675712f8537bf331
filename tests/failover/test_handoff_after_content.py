"""Failover after content, beyond a drop: an in-band error event (each API's busy signal)
moves the reply to the next upstream, before or after content, while a refusal ends it as
without fallbacks; an upstream whose API has no prefill is continued by an assistant turn and
a continue instruction; a server that ignores the continuation and starts over has the repeat
cut; a resume token resumes on the upstream that was serving. Real sockets (the embedded
server, a raw upstream for bytes no script sends), asyncio and trio, aiohttp and httpx.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import anyio.abc
import pytest
from raw_upstream import HEAD, read_request, text, upstream
from shown_text import CONTINUES, read_shown
from sse_frames import DONE, frame

import fluxstream
from fluxstream import Handoff, Outcome, Reset, Upstream
from fluxstream.apis import CONTINUE_INSTRUCTION, get
from fluxstream.errors import ResumeTokenError
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
GEMINI_MSG = [{"role": "user", "parts": [{"text": "hello there"}]}]


@pytest.fixture(scope="module")
def fallback() -> Iterator[ServerThread]:
    with ServerThread(profile=CONTINUES) as running:
        yield running


async def expected_chat(server: ServerThread) -> str:
    async with fluxstream.AsyncClient(server.base_url, api_key="k") as client:
        reply = await client.chat.complete(model="m", messages=MSG, max_tokens=1024)
    return reply.text



def _stream(client: fluxstream.AsyncClient, endpoint: str) -> fluxstream.ReplyStream:
    if endpoint == "responses":
        return client.responses.stream(model="m", input=MSG)
    if endpoint == "gemini":
        return client.gemini.stream(model="m", contents=GEMINI_MSG)
    return getattr(client, endpoint).stream(model="m", messages=MSG, max_tokens=1024)


@pytest.mark.parametrize(("endpoint", "profile", "kind"), [
    ("messages", "error-midstream", "overloaded_error"),
    ("chat", "error-midstream-done", "server_error"),
    ("responses", "error-midstream-done", "error"),
    ("gemini", "error-midstream", "UNAVAILABLE"),
])
async def test_an_error_event_after_content_continues_on_the_next_upstream(
    fallback: ServerThread, endpoint: str, profile: str, kind: str
) -> None:
    expected = await expected_chat(fallback)
    with ServerThread(profile=profile) as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url, api_key="k")],
        ) as client:
            stream = _stream(client, endpoint)
            shown, others = await read_shown(stream)
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and reply.error is None
    kinds = [e.type for e in others]
    assert "error" not in kinds and "reset" not in kinds
    (handoff,) = [e for e in others if isinstance(e, Handoff)]
    assert not handoff.restarted and "error event" in handoff.reason
    assert 0 < handoff.offset < len(shown)
    assert shown == reply.text
    assert expected.startswith(shown[:handoff.offset])
    first, second = reply.segments
    assert first.end == second.start == handoff.offset
    assert first.kind == "error_event" and first.detail.startswith("error event")
    assert kind == "error" or kind in first.detail
    assert second.kind == "done" and second.api == "chat_completions"
    continuation = fallback.records.requests[-1].json
    assert continuation["messages"][-1]["role"] == "assistant"  # a prefill: chat has one
    assert shown[:handoff.offset].startswith(continuation["messages"][-1]["content"])


async def test_an_error_event_before_content_moves_on_once_attempts_are_spent(
    fallback: ServerThread,
) -> None:
    expected = await expected_chat(fallback)
    # max_tokens=1: one text delta, half of it before the error: the error comes first.
    with ServerThread(profile="error-midstream") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
            failover=fluxstream.Failover(per_upstream_attempts=2),
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1)
            shown, others = await read_shown(stream)
        assert sum(r.path.endswith("/messages") for r in primary.records.requests) == 2
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text
    (handoff,) = [e for e in others if isinstance(e, Handoff)]
    assert handoff.offset == 0 and "overloaded_error" in handoff.reason
    assert reply.segments[0].requests == 2 and reply.segments[0].end == 0
    assert expected.startswith(shown[:20])


async def _refused_mid_reply(sock: anyio.abc.SocketStream, index: int) -> None:
    await read_request(sock)
    error = {"error": {"type": "invalid_request_error", "message": "bad request"}}
    await sock.send(HEAD + text("Hello, ") + text("wor") + frame(error) + DONE)


async def test_a_refusal_error_event_ends_the_reply_as_without_fallbacks(
    fallback: ServerThread,
) -> None:
    before = len(fallback.records.requests)
    async with upstream(_refused_mid_reply) as raw:
        async with fluxstream.AsyncClient(
            raw.base, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG)
            shown, others = await read_shown(stream)
    reply = stream.reply
    assert reply.outcome is Outcome.FAILED and shown == "Hello, wor"
    assert reply.error is not None and reply.error.type == "invalid_request_error"
    assert "error" in [e.type for e in others] and "handoff" not in [e.type for e in others]
    assert len(fallback.records.requests) == before


def test_instructed_continuation_in_each_api_shape() -> None:
    chat = get("chat_completions").instructed_continuation_body(
        {"model": "m", "messages": MSG}, "Hel")
    assert chat["messages"][1:] == [{"role": "assistant", "content": "Hel"},
                                    {"role": "user", "content": CONTINUE_INSTRUCTION}]
    responses = get("responses").instructed_continuation_body({"input": "hi"}, "Hel")
    assert responses["input"] == [{"role": "user", "content": "hi"},
                                  {"role": "assistant", "content": "Hel"},
                                  {"role": "user", "content": CONTINUE_INSTRUCTION}]
    gemini = get("gemini").instructed_continuation_body({"contents": GEMINI_MSG}, "Hel")
    assert gemini["contents"][1:] == [{"role": "model", "parts": [{"text": "Hel"}]},
                                      {"role": "user", "parts": [{"text": CONTINUE_INSTRUCTION}]}]
    assert not get("responses").assistant_prefill and get("anthropic_messages").assistant_prefill


async def test_no_prefill_upstream_gets_a_continue_instruction_and_a_restart_is_cut() -> None:
    # The embedded Responses server neither prefills nor follows the instruction: it answers
    # the whole reply again, which the echo cut removes (every character shown once).
    with ServerThread(profile=CONTINUES) as responses_server:
        async with fluxstream.AsyncClient(responses_server.base_url, api_key="k") as plain:
            expected = (await plain.responses.complete(model="m", input=MSG)).text
        with ServerThread(profile="openai", faults="drop-after=900") as primary:
            async with fluxstream.AsyncClient(
                primary.base_url, api_key="k",
                fallbacks=[Upstream(responses_server.base_url, api="responses")],
            ) as client:
                stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024)
                shown, others = await read_shown(stream)
        sent = responses_server.records.requests[-1].json
    reply = stream.reply
    (handoff,) = [e for e in others if isinstance(e, Handoff)]
    assert not handoff.restarted and not any(isinstance(e, Reset) for e in others)
    assert sent["input"][-2]["role"] == "assistant"
    assert shown[:handoff.offset].startswith(sent["input"][-2]["content"])
    assert sent["input"][-1] == {"role": "user", "content": CONTINUE_INSTRUCTION}
    assert reply.outcome is Outcome.DONE
    assert shown == reply.text == expected  # the repeated prefix cut: nothing twice


async def test_resume_token_resumes_on_the_upstream_that_was_serving(
    fallback: ServerThread,
) -> None:
    # The primary refuses (503) before content, so the fallback serves the request from its
    # start: its event ids index the token's body, and Last-Event-ID resumes it there.
    expected = await expected_chat(fallback)
    with ServerThread(profile="openai", faults="status=503") as primary:
        fallbacks = [Upstream(fallback.base_url, api_key="k2")]
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=fallbacks,
        ) as client:
            stream = client.chat.stream(model="m", messages=MSG, max_tokens=1024)
            shown = ""
            handoff: Handoff | None = None
            async with stream:
                async for event in stream:
                    if isinstance(event, Handoff):
                        handoff = event
                    elif event.type == "text":
                        shown += event.text
                        if handoff is not None and len(shown) > handoff.offset + 40:
                            break
                token = stream.resume_token()
                # The token holds the whole read (the rest of the batch the loop left).
                assert stream.reply.text.startswith(shown)
                shown = stream.reply.text
        assert handoff is not None and token["upstream"] == fallbacks[0].label
        to_primary = len(primary.records.requests)
        to_fallback = len(fallback.records.requests)
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=fallbacks,
            # a loaded machine may send the sentinel after the default 2 s grace (``finished``)
            timeouts=fluxstream.Timeouts(finish_grace=30),
        ) as other:
            resumed = other.chat.resume(token)
            async with resumed:
                async for event in resumed:
                    if event.type == "text":
                        assert event.offset == len(shown)
                        shown += event.text
        assert len(primary.records.requests) == to_primary  # not the primary
        assert len(fallback.records.requests) > to_fallback
        async with fluxstream.AsyncClient(primary.base_url, api_key="k") as bare:
            with pytest.raises(ResumeTokenError, match="same fallbacks"):
                bare.chat.resume(token)
    assert resumed.reply.outcome is Outcome.DONE
    assert shown == resumed.reply.text == expected
