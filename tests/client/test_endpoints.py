"""``client.responses`` and ``client.messages``: the requests they send, and recorded replies
streamed through the same ``ReplyStream`` as ``client.chat`` (asyncio and trio).

The server side is a scripted ``httpx.MockTransport`` serving the corpus bytes: the embedded
server does not speak these APIs yet.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fixture_files import chat_stream
from sse_frames import frames

import fluxstream
from fluxstream._endpoints import ANTHROPIC_VERSION, anthropic_client
from fluxstream._events import TextDelta
from fluxstream._reply import Outcome
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APIStatusError, StreamFailedError

pytestmark = pytest.mark.anyio

SSE = {"content-type": "text/event-stream"}
KEY = "sk-ant-SECRET-42"
USER = [{"role": "user", "content": "hi"}]
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def _client(responses: list[httpx.Response], seen: list[httpx.Request], *,
            api_key: str = KEY, **kwargs: Any) -> fluxstream.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return responses.pop(0)

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    retry = kwargs.pop("retry", RetryPolicy(base_delay=0.0, max_delay=0.0))
    return fluxstream.AsyncClient("http://gw.test/v1", api_key, http_client=http, retry=retry,
                                  **kwargs)


def _stream(name: str) -> httpx.Response:
    return httpx.Response(200, headers=SSE, content=chat_stream(name).read_bytes())


async def test_responses_stream_request_and_reply(anyio_backend: str) -> None:
    seen: list[httpx.Request] = []
    client = _client([_stream("resp-vercel-azure-function-call")], seen)
    tools = [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]
    async with client:
        async with client.responses.stream(model="gpt-5.1", input="weather?",
                                           instructions="be brief", tools=tools,
                                           reasoning={"effort": "low"}) as stream:
            events = [e async for e in stream]
    request = seen[0]
    assert request.method == "POST" and request.url.path == "/v1/responses"
    assert json.loads(request.content) == {
        "model": "gpt-5.1", "input": "weather?", "instructions": "be brief", "tools": tools,
        "reasoning": {"effort": "low"}, "stream": True}
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in request.headers
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and reply.choices[0].stop == "tool_calls"
    (call,) = reply.choices[0].tool_calls
    assert (call.id, call.name, call.parse_arguments()) == (
        "call_H5DxLSFnsGhiROnUiDHmgyc8", "weather", {"location": "San Francisco"})
    assert events[-1].type == "end"


async def test_responses_complete(anyio_backend: str) -> None:
    client = _client([_stream("resp-vercel-xai-reasoning-summary")], [])
    async with client:
        reply = await client.responses.complete(model="grok", input=[{"role": "user",
                                                                       "content": "hi"}])
    assert reply.text.startswith("### Overview of Sonoran Cuisine")
    assert reply.choices[0].reasoning and reply.outcome is Outcome.DONE


async def test_messages_stream_sends_anthropic_headers_not_bearer(anyio_backend: str) -> None:
    seen: list[httpx.Request] = []
    client = _client([_stream("anth-sdk-py-tool-use")], seen)
    async with client:
        reply = await client.messages.complete(model="claude-sonnet-4", messages=USER,
                                               max_tokens=256, system="be brief",
                                               tools=[{"name": "get_weather",
                                                       "input_schema": {"type": "object"}}])
    request = seen[0]
    assert request.url.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in request.headers
    body = json.loads(request.content)
    assert body["max_tokens"] == 256 and body["system"] == "be brief" and body["stream"] is True
    assert reply.text == "I'll check the current weather in Paris for you."
    assert reply.choices[0].tool_calls[0].parse_arguments() == {"location": "Paris"}
    assert reply.choices[0].stop == "tool_calls" and reply.outcome is Outcome.DONE


async def test_a_gateway_bearer_token_replaces_the_key_header(anyio_backend: str) -> None:
    seen: list[httpx.Request] = []
    client = _client([_stream("anth-docs-basic")], seen,
                     headers={"Authorization": "Bearer gateway-token"})
    async with client:
        await client.messages.complete(model="m", messages=USER, max_tokens=8)
    assert seen[0].headers["authorization"] == "Bearer gateway-token"
    assert "x-api-key" not in seen[0].headers


async def test_529_overloaded_is_retried_before_content(anyio_backend: str) -> None:
    seen: list[httpx.Request] = []
    client = _client([httpx.Response(529, json=OVERLOADED), _stream("anth-docs-basic")], seen)
    async with client:
        reply = await client.messages.complete(model="m", messages=USER, max_tokens=8)
    assert len(seen) == 2 and reply.text == "Hello!" and reply.outcome is Outcome.DONE


async def test_529_without_retries_is_a_typed_error_without_the_key(anyio_backend: str) -> None:
    client = _client([httpx.Response(529, json=OVERLOADED)], [], retry=RetryPolicy.off())
    async with client:
        with pytest.raises(APIStatusError) as caught:
            await client.messages.complete(model="m", messages=USER, max_tokens=8)
    error = caught.value
    assert error.status_code == 529 and error.type == "overloaded_error"
    assert "Overloaded" in str(error)
    assert KEY not in str(error) and KEY not in repr(error) and KEY not in repr(client)


async def test_overloaded_mid_stream_fails_with_the_partial_reply(anyio_backend: str) -> None:
    client = _client([_stream("anth-syn-overloaded-midstream")], [])
    async with client:
        async with client.messages.stream(model="m", messages=USER, max_tokens=8) as stream:
            texts = [e.text async for e in stream if isinstance(e, TextDelta)]
    reply = stream.reply
    assert "".join(texts) == reply.text == "Here is the first paragraph"
    assert reply.outcome is Outcome.FAILED and reply.error is not None
    assert reply.error.type == "overloaded_error"
    client = _client([_stream("anth-syn-overloaded-midstream")], [])
    async with client:
        with pytest.raises(StreamFailedError):
            await client.messages.complete(model="m", messages=USER, max_tokens=8)


async def test_a_json_body_is_the_whole_reply(anyio_backend: str) -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
               "content": [{"type": "text", "text": "whole"}], "stop_reason": "end_turn",
               "usage": {"input_tokens": 1, "output_tokens": 1}}
    client = _client([httpx.Response(200, json=message)], [])
    async with client:
        reply = await client.messages.complete(model="m", messages=USER, max_tokens=8)
    assert reply.text == "whole" and reply.choices[0].stop == "stop"


def test_anthropic_client_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://gw.example")
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-other")
    client = anthropic_client()
    assert client.base_url == "https://gw.example/v1"
    assert client._api_key is not None and client._api_key.reveal() == KEY
    assert KEY not in repr(client)
    assert anthropic_client("https://h.example/v1/", api_key="k").base_url == (
        "https://h.example/v1")


def test_endpoints_are_on_every_client() -> None:
    client = fluxstream.AsyncClient("http://x.test/v1", api_key="k")
    builders: list[Callable[..., Any]] = [client.responses.stream, client.messages.stream]
    assert all(callable(b) for b in builders)


class _Dropping(httpx.AsyncByteStream):
    """A body that yields its bytes, then breaks like a dropped connection."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> Any:
        yield self.data
        raise httpx.RemoteProtocolError("peer closed connection")


async def test_messages_continuation_after_a_drop(anyio_backend: str) -> None:
    """A drop after content, continued by prefill: the partial text goes back as a trailing
    assistant message (no ``prefix`` flag), the new message's echo is cut, offsets go on."""
    from fluxstream._retry import ResumePolicy

    def start(mid: str) -> dict[str, Any]:
        return {"type": "message_start", "message": {"id": mid, "model": "m", "content": [],
                                                     "usage": {"input_tokens": 3}}}

    def delta(text: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}

    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    first = frames(start("msg_1"), block, delta("The quick brown"), delta(" fox"), named=True)
    second = frames(start("msg_2"), block, delta("brown fox"), delta(" jumps."),
                    {"type": "content_block_stop", "index": 0},
                    {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                     "usage": {"output_tokens": 5}}, {"type": "message_stop"}, named=True)
    seen: list[httpx.Request] = []
    client = _client([httpx.Response(200, headers=SSE, stream=_Dropping(first)),
                      httpx.Response(200, headers=SSE, content=second)], seen,
                     resume=ResumePolicy(continuation=True, min_overlap=4))
    async with client:
        async with client.messages.stream(model="m", messages=USER, max_tokens=64) as stream:
            events = [e async for e in stream]
    assert len(seen) == 2
    continued = json.loads(seen[1].content)["messages"]
    assert continued[-1] == {"role": "assistant", "content": "The quick brown fox"}
    reply = stream.reply
    assert reply.text == "The quick brown fox jumps." and reply.outcome is Outcome.DONE
    assert reply.skipped_frames == 0
    deltas = [(e.offset, e.text) for e in events if isinstance(e, TextDelta)]
    assert deltas == [(0, "The quick brown"), (15, " fox"), (19, " jumps.")]
    assert seen[1].headers["x-api-key"] == KEY


async def test_a_messages_resume_token_resumes_through_client_chat(anyio_backend: str) -> None:
    """``client.chat.resume(token)`` hands a Messages stream's token to ``client.messages``:
    Anthropic parsing and headers, offsets that go on (here by continuation)."""
    from fluxstream._retry import ResumePolicy

    start = {"type": "message_start", "message": {"id": "m1", "model": "m", "content": []}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}

    def delta(text: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}

    seen: list[httpx.Request] = []
    cut = frames(start, block, delta("Hello wor"), named=True)
    client = _client([httpx.Response(200, headers=SSE, stream=_Dropping(cut))],
                     seen, resume=ResumePolicy.off())
    async with client:
        async with client.messages.stream(model="m", messages=USER, max_tokens=9) as stream:
            async for _ in stream:
                pass
    assert stream.reply.outcome is Outcome.TRUNCATED
    token = json.loads(json.dumps(stream.resume_token()))
    assert token["path"] == "messages" and KEY not in json.dumps(token)
    rest = frames(start, block, delta("wor"), delta("ld!"),
                  {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                  {"type": "message_stop"}, named=True)
    other = _client([httpx.Response(200, headers=SSE, content=rest)], seen)
    async with other:
        async with other.chat.resume(token, resume=ResumePolicy(continuation=True,
                                                                min_overlap=3)) as again:
            events = [e async for e in again]
    assert again.reply.text == "Hello world!" and again.reply.outcome is Outcome.DONE
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [(9, "ld!")]
    assert seen[-1].url.path == "/v1/messages" and seen[-1].headers["x-api-key"] == KEY
    assert json.loads(seen[-1].content)["messages"][-1] == {"role": "assistant",
                                                            "content": "Hello wor"}
