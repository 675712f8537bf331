"""End to end, over 127.0.0.1, on asyncio and trio: ``client.responses`` and ``client.messages``
against the embedded server's ``/v1/responses`` and ``/v1/messages``.

Each reply must be exact (the server's own script says what was streamed): text, tool calls,
usage, finish reason, outcome; heartbeats (Responses comments, Anthropic ``ping`` events)
counted; a drop resumed without text shown twice (Anthropic by prefill continuation,
Responses by ``Last-Event-ID`` where the server numbers its events, and by OpenAI's own
``GET /responses/{id}?stream=true&starting_after=N`` for a background response); a mid-stream
error is ``reply.error``; a ``529`` before content is retried.
"""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

import fluxstream
from fluxstream import Timeouts
from fluxstream._events import TextDelta, ToolCallDelta
from fluxstream.server import Server, script_for, serve

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Weather in Zürich? 你好"}]
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}
CLOCK = {"type": "object", "properties": {"timezone": {"type": "string"}}}
RESP_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
              {"type": "function", "name": "get_time", "parameters": CLOCK}]
ANTH_TOOLS = [{"name": "get_weather", "input_schema": WEATHER},
              {"name": "get_time", "input_schema": CLOCK}]


def fault(spec: str, profile: str | None = None) -> dict[str, str]:
    headers = {"X-Fluxstream-Fault": spec}
    if profile:
        headers["X-Fluxstream-Profile"] = profile
    return headers


def client_for(server: Server, **kwargs: Any) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-e2e", **kwargs)


async def run(stream: Any) -> tuple[str, list[Any]]:
    """Drive ``stream``; the text as shown (TextDelta by TextDelta) and every event."""
    shown: list[str] = []
    events: list[Any] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, TextDelta):
                shown.append(event.text)
    return "".join(shown), events


# ---------------------------------------------------------------------------- Responses


async def test_responses_text_usage_and_outcome(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": "Hi there", "instructions": "be brief"}
    script = script_for("responses", params)
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params)
        shown, _ = await run(stream)
        reply = await client.responses.complete(**params)
    for got in (stream.reply, reply):
        assert got.text == shown == script.choices[0].text
        assert got.outcome is fluxstream.Outcome.DONE
        assert got.choices[0].finish_reason == "completed" and got.choices[0].stop == "stop"
        assert got.usage is not None
        assert got.usage.output_tokens == script.usage["completion_tokens"]  # type: ignore[attr-defined]
        assert got.usage.total_tokens == script.usage["total_tokens"]
        assert got.id == "resp_" + script.id.removeprefix("chatcmpl-")
    record = aserver.records.requests[-1]
    assert record.path == "/v1/responses" and record.header("authorization") == "Bearer <redacted>"


async def test_responses_tool_calls_and_reasoning(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": USER, "tools": RESP_TOOLS,
                              "reasoning": {"effort": "low"}}
    script = script_for("responses", params).choices[0]
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params)
        _, events = await run(stream)
    choice = stream.reply.choices[0]
    assert [(t.id, t.name, t.arguments) for t in choice.tool_calls] == [
        (t.id, t.name, t.arguments) for t in script.tool_calls]
    assert choice.reasoning == script.reasoning and choice.stop == "tool_calls"
    fragments = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(fragments) > len(script.tool_calls)  # streamed in pieces, not whole


async def test_responses_length_cut(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": "Hi", "max_output_tokens": 5}
    async with client_for(aserver) as client:
        reply = await client.responses.complete(**params)
    assert reply.choices[0].finish_reason == "incomplete" and reply.choices[0].stop == "length"
    assert reply.text == "Hello — or 你好 —" == script_for("responses", params).choices[0].text


async def test_responses_heartbeats_are_counted(aserver: Server) -> None:
    async with client_for(aserver) as client:
        stream = client.responses.stream(model="m", input="Hi",
                                         extra_headers=fault("drip=0", "heartbeats"))
        shown, _ = await run(stream)
    assert shown == script_for("responses", {"model": "m", "input": "Hi"}).choices[0].text
    total = aserver.records.responses[-1].events
    assert stream.stats.heartbeats == total - 1  # a comment before every event but the first


async def test_responses_drop_resumed_by_last_event_id(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": "Hi"}
    async with client_for(aserver) as client:
        stream = client.responses.stream(
            **params, extra_headers=fault("drop-after-events=12,fail-first=1,write-size=7",
                                          "sse-ids"))
        shown, _ = await run(stream)
    assert shown == stream.reply.text == script_for("responses", params).choices[0].text
    assert stream.stats.resumes == 1 and stream.reply.outcome is fluxstream.Outcome.DONE
    assert aserver.records.requests[-1].last_event_id == "11"


async def test_responses_drop_without_event_ids_is_truncated_not_duplicated(
    aserver: Server,
) -> None:
    """OpenAI's Responses events carry no ``id:``, and a response created without
    ``background: true`` is not stored, so ``starting_after`` does not apply: a drop ends
    truncated with what arrived, shown once."""
    params: dict[str, Any] = {"model": "m", "input": "Hi"}
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params,
                                         extra_headers=fault("drop-after-events=12"))
        shown, _ = await run(stream)
    text = script_for("responses", params).choices[0].text
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED
    assert shown == stream.reply.text and text.startswith(shown) and 0 < len(shown) < len(text)


async def test_background_response_resumed_with_starting_after(aserver: Server) -> None:
    """OpenAI's own resume: the stream of a ``background`` response is read again from
    ``GET /responses/{id}?stream=true&starting_after=N``, N the last ``sequence_number``
    seen; the parser goes on and the reply is exact (this is what a client strategy for
    Responses will do; the parser part is fluxstream's)."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True, "stream": True}
    parser = fluxstream.StreamParser(format="responses")
    async with httpx.AsyncClient(base_url=aserver.base_url, timeout=10) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream("POST", "/responses", json=params,
                                   headers=fault("drop-after-events=10,write-size=5")) as first:
                async for chunk in first.aiter_raw():
                    parser.feed(chunk)
        shown_before = parser.reply.text
        after = parser._format.sequence  # type: ignore[attr-defined]
        assert after == 9 and shown_before
        parser.new_connection()
        async with http.stream("GET", f"/responses/{parser.reply.id}",
                               params={"stream": "true", "starting_after": after}) as rest:
            async for chunk in rest.aiter_raw():
                parser.feed(chunk)
    parser.close()
    assert parser.reply.text == script_for("responses", params).choices[0].text
    assert parser.reply.outcome is fluxstream.Outcome.DONE


async def test_responses_error_midstream(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m@error-midstream", "input": "Hi"}
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params)
        shown, _ = await run(stream)
        with pytest.raises(fluxstream.errors.StreamFailedError):
            await client.responses.complete(**params)
    script = script_for("responses", params).choices[0]
    assert shown == "".join(script.text_deltas[:15])
    assert stream.reply.error is not None and "fluxstream fault" in stream.reply.error.message
    assert stream.reply.outcome is fluxstream.Outcome.FAILED


async def test_responses_503_retried_before_content(aserver: Server) -> None:
    async with client_for(aserver) as client:
        reply = await client.responses.complete(
            model="m", input="Hi", extra_headers=fault("status=503,fail-first=1"))
    assert reply.outcome is fluxstream.Outcome.DONE
    assert [r.attempt for r in aserver.records.requests] == [1, 2]


# ---------------------------------------------------------------------------- Messages


async def test_messages_text_usage_pings_and_key(anyio_backend: str) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER,
                              "system": "be brief"}
    script = script_for("messages", params)
    async with serve(port=0, api_key="sk-ant-e2e") as server:
        async with fluxstream.AsyncClient(base_url=server.base_url,
                                          api_key="sk-ant-e2e") as client:
            stream = client.messages.stream(**params)
            shown, _ = await run(stream)
            reply = await client.messages.complete(**params)
        record = server.records.requests[-1]
    assert record.header("x-api-key") == "<redacted>" and record.header("authorization") is None
    assert record.header("anthropic-version") == "2023-06-01"
    for got in (stream.reply, reply):
        assert got.text == shown == script.choices[0].text
        assert got.outcome is fluxstream.Outcome.DONE
        assert got.choices[0].finish_reason == "end_turn" and got.choices[0].stop == "stop"
        assert got.usage is not None
        assert got.usage.output_tokens == 30  # type: ignore[attr-defined]
        assert got.usage.input_tokens == script.usage["prompt_tokens"]  # type: ignore[attr-defined]
        assert got.heartbeats == 1  # Anthropic's own ping after message_start


async def test_messages_tool_use(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER,
                              "tools": ANTH_TOOLS}
    script = script_for("messages", params).choices[0]
    async with client_for(aserver) as client:
        reply = await client.messages.complete(**params)
    choice = reply.choices[0]
    assert [(t.id, t.name, t.arguments) for t in choice.tool_calls] == [
        ("toolu_" + t.id.removeprefix("call_"), t.name, t.arguments) for t in script.tool_calls]
    assert choice.finish_reason == "tool_use" and choice.stop == "tool_calls"


async def test_messages_heartbeat_pings_counted(aserver: Server) -> None:
    async with client_for(aserver) as client:
        stream = client.messages.stream(model="m", max_tokens=1024, messages=USER,
                                        extra_headers=fault("drip=0", "heartbeats"))
        await run(stream)
    sent = aserver.records.responses[-1].events  # scripted events (one of them a ping)
    assert stream.reply.heartbeats == sent  # (sent - 1) between events + the scripted one


async def test_messages_drop_resumed_by_prefill_continuation(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    policy = fluxstream.ResumePolicy(continuation=True, min_overlap=4)
    async with client_for(aserver) as client:
        # The attempt key makes ``fail-first`` count the continuation (its body differs).
        headers = {**fault("drop-after-events=14,write-size=9,fail-first=1", "prefix-echo"),
                   "X-Fluxstream-Attempt-Key": "continued-once"}
        stream = client.messages.stream(**params, resume=policy, extra_headers=headers)
        shown, _ = await run(stream)
    text = script_for("messages", params).choices[0].text
    assert shown == stream.reply.text == text
    assert stream.stats.resumes == 1 and stream.reply.outcome is fluxstream.Outcome.DONE
    second = aserver.records.requests[-1].json
    prefill = second["messages"][-1]
    assert prefill["role"] == "assistant" and "prefix" not in prefill
    assert text.startswith(prefill["content"]) and 0 < len(prefill["content"]) < len(text)


async def test_messages_every_attempt_dropping_still_ends_exact(aserver: Server) -> None:
    """Each continuation drops too (after 12 events of its own): the prefill grows each
    time, the reply is still exact, each piece shown once."""
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    async with client_for(aserver) as client:
        stream = client.messages.stream(
            **params, resume=fluxstream.ResumePolicy(continuation=True),
            extra_headers=fault("drop-after-events=14"))
        shown, _ = await run(stream)
    assert shown == stream.reply.text == script_for("messages", params).choices[0].text
    assert stream.stats.resumes >= 2 and stream.reply.outcome is fluxstream.Outcome.DONE
    prefills = [r.json["messages"][-1]["content"] for r in aserver.records.requests[1:]]
    assert all(len(a) < len(b) for a, b in itertools.pairwise(prefills))


async def test_messages_drop_after_a_newline_is_continued(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    async with client_for(aserver) as client:
        stream = client.messages.stream(
            **params, resume=fluxstream.ResumePolicy(continuation=True),
            # 12 events: message_start, ping, block start and 9 deltas, the 9th is "\n".
            extra_headers={**fault("drop-after-events=12,fail-first=1"),
                           "X-Fluxstream-Attempt-Key": "after-newline"})
        shown, _ = await run(stream)
    assert shown == stream.reply.text == script_for("messages", params).choices[0].text


async def test_messages_error_midstream(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m@error-midstream", "max_tokens": 1024, "messages": USER}
    async with client_for(aserver) as client:
        stream = client.messages.stream(**params)
        shown, _ = await run(stream)
    assert shown == "".join(script_for("messages", params).choices[0].text_deltas[:15])
    error = stream.reply.error
    assert error is not None and error.type == "overloaded_error" and error.message == "Overloaded"
    assert stream.reply.outcome is fluxstream.Outcome.FAILED


async def test_messages_529_retried_before_content(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    async with client_for(aserver) as client:
        reply = await client.messages.complete(
            **params, extra_headers=fault("status=529,fail-first=2"))
        assert reply.text == script_for("messages", params).choices[0].text
        assert [r.attempt for r in aserver.records.requests] == [1, 2, 3]
        with pytest.raises(fluxstream.errors.APIStatusError) as info:
            await client.messages.complete(
                **params, retry=fluxstream.RetryPolicy.off(),
                extra_headers=fault("status=529"))
    assert info.value.status_code == 529
    assert "sk-e2e" not in str(info.value) and "sk-e2e" not in repr(info.value)


# ---------------------------------------------------------------------------- both formats

BODIES: dict[str, dict[str, Any]] = {
    "responses": {"model": "m", "input": USER},
    "messages": {"model": "m", "max_tokens": 1024, "messages": USER},
}


def endpoint(client: fluxstream.AsyncClient, api: str) -> Any:
    return client.responses if api == "responses" else client.messages


@pytest.mark.parametrize("api", sorted(BODIES))
@pytest.mark.parametrize("profile", ["crlf", "nospace", "multiline", "crlf,multiline,nospace",
                                     "json", "reasoning"])
async def test_framing_profiles_and_json_answers_are_exact(
    aserver: Server, api: str, profile: str
) -> None:
    body = BODIES[api]
    script = script_for(api, body, profile).choices[0]
    async with client_for(aserver) as client:
        reply = await endpoint(client, api).complete(
            **body, extra_headers={"X-Fluxstream-Profile": profile})
    assert reply.text == script.text and reply.outcome is fluxstream.Outcome.DONE
    assert (reply.choices[0].reasoning or "") == (script.reasoning if profile == "reasoning"
                                                  else "")
    assert reply.choices[0].stop == "stop"


@pytest.mark.parametrize("api", sorted(BODIES))
async def test_a_stall_with_keepalives_is_still_a_stall(aserver: Server, api: str) -> None:
    """Heartbeats during a stall (Anthropic: ``ping`` events, Responses: comments) are
    counted but are not content: the stall timeout still fires."""
    async with client_for(aserver, timeouts=Timeouts(stall=0.3)) as client:
        stream = endpoint(client, api).stream(
            **BODIES[api], retry=fluxstream.RetryPolicy.off(),
            resume=fluxstream.ResumePolicy.off(),
            extra_headers=fault("stall=5,stall-after-events=8,stall-heartbeat=0.05"))
        with pytest.raises(fluxstream.errors.StallTimeoutError):
            await run(stream)
    assert stream.stats.heartbeats >= 3
    assert stream.reply.text and stream.reply.outcome is not fluxstream.Outcome.DONE
