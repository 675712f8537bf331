"""Our UI message stream read by the AI SDK itself: the ``ai`` npm package under Node.

An app on uvicorn (a thread of this process) streams replies of the embedded server through
``EventStreamResponse`` with the AI SDK's UI message stream as its encoding; Node POSTs to it
with the package's ``DefaultChatTransport`` (what ``useChat`` sends and reads) and folds the
chunks into a message with ``readUIMessageStream`` (what ``useChat`` does with them). The
message must hold exactly the reply: its text, its reasoning, its tool calls (streamed
arguments, then the parsed input), and the error or the cut that ended it. A body cut
anywhere is read into exactly the text of the events that arrived whole. See
``ai_sdk_node.py`` for how the package is installed (once, outside the repository) and when a
missing Node is a skip or a failure.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from ai_sdk_node import install_ai_sdk, joined, parts, read_with_ai_sdk

import fluxstream
from fluxstream import ResumePolicy
from fluxstream.relay import MemoryReplyLog, RecordedStream
from fluxstream.server import FAULT_HEADER, PROFILE_HEADER, ServerThread
from fluxstream.web import EventStreamResponse
from fluxstream.web.ai_sdk import UIMessageStream, chat_messages, masked_error

uvicorn = pytest.importorskip("uvicorn")
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}},
]

#: What each case asks the embedded server for (keyword arguments of ``chat.stream``).
CASES: dict[str, dict[str, Any]] = {
    "text": {},
    "reasoning": {"extra_headers": {PROFILE_HEADER: "reasoning"}},
    "tools": {"tools": TOOLS},
    "error": {"extra_headers": {PROFILE_HEADER: "error-midstream"}},
    "shown-error": {"extra_headers": {PROFILE_HEADER: "error-midstream"}},
    "truncated": {"extra_headers": {FAULT_HEADER: "drop-after-events=9"},
                  "resume": ResumePolicy.off()},
}


def shown_error(event: fluxstream.ErrorEvent | fluxstream.End) -> str:
    return event.message if isinstance(event, fluxstream.ErrorEvent) else str(event.reason)


class ChatApp:
    """``POST /chat?case=NAME``: a reply of the embedded server as a UI message stream; the
    stream each case was served by is kept in ``streams`` (its ``reply`` is what was sent).

    ``POST /relayed`` and ``GET /relayed/{chat_id}/stream``: the resumable endpoint of
    ``docs/recipes/ai-sdk.md``: the reply is recorded into a reply log by a task of the app
    and the page follows the log, so a page that leaves and comes back (``useChat``'s
    ``resume``) reads the reply again from its start; once it ended, the GET is a 204."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.streams: dict[str, fluxstream.ReplyStream] = {}
        self.log = MemoryReplyLog()
        self.latest: dict[str, str] = {}  # chat id -> the key of its reply still streaming
        self.recorded: dict[str, RecordedStream] = {}
        self.ended = threading.Event()
        self.app = Starlette(routes=[
            Route("/chat", self.chat, methods=["POST"]),
            Route("/relayed", self.relayed, methods=["POST"]),
            Route("/relayed/{chat_id}/stream", self.resume),
        ], lifespan=self.lifespan)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with fluxstream.AsyncClient(self.upstream) as self.client:
            async with anyio.create_task_group() as self.tasks:
                yield
                self.tasks.cancel_scope.cancel()

    async def chat(self, request: Request) -> Response:
        case = request.query_params["case"]
        messages = chat_messages(json.loads(await request.body()))
        stream = self.streams[case] = self.client.chat.stream(
            model="m", messages=messages, **CASES[case])
        error_text = shown_error if case == "shown-error" else masked_error
        return EventStreamResponse(stream, encoding=UIMessageStream(error_text=error_text))

    async def relayed(self, request: Request) -> Response:
        body = json.loads(await request.body())
        key = uuid.uuid4().hex
        stream = self.client.chat.stream(
            model="m", messages=chat_messages(body), content_key=key,
            extra_headers={FAULT_HEADER: "drip=0.02"})  # slow enough to leave mid-reply
        recorded = self.recorded[body["id"]] = self.log.record(stream, only_consumer=True)
        await recorded.start()
        self.latest[body["id"]] = key
        self.tasks.start_soon(self.drain, body["id"], recorded)
        return EventStreamResponse.follow(self.log, key, encoding=UIMessageStream())

    async def drain(self, chat_id: str, recorded: RecordedStream) -> None:
        async with recorded:
            async for _ in recorded:
                pass
        del self.latest[chat_id]
        self.ended.set()

    async def resume(self, request: Request) -> Response:
        key = self.latest.get(request.path_params["chat_id"])
        if key is None:
            return Response(status_code=204)  # nothing streaming: useChat stays as it is
        return EventStreamResponse.follow(self.log, key, encoding=UIMessageStream())

    def reply(self, case: str) -> fluxstream.Reply:
        return self.streams[case].reply


@pytest.fixture(scope="module")
def ai_sdk() -> Path:
    return install_ai_sdk()


@pytest.fixture
def chat_app() -> Iterator[tuple[str, ChatApp]]:
    with ServerThread(profile="openai") as upstream:
        app = ChatApp(upstream.base_url)
        config = uvicorn.Config(app.app, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.started
        port = server.servers[0].sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}", app
        finally:
            server.should_exit = True
            thread.join(10)


def tool_parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"toolCallId": p["toolCallId"], "type": p["type"], "state": p["state"],
             "input": p["input"]} for p in parts(result, "tool")]


def test_the_ai_sdk_reads_text_reasoning_tool_calls_errors_and_cuts(
    ai_sdk: Path, chat_app: tuple[str, ChatApp], tmp_path: Path
) -> None:
    base, app = chat_app
    names = list(CASES)
    results = dict(zip(names, read_with_ai_sdk(
        ai_sdk, [{"url": f"{base}/chat?case={name}", "prompt": "ai sdk"} for name in names],
        tmp_path), strict=True))
    for name in names:
        assert results[name]["failed"] is None, (name, results[name])
        assert results[name]["chunks"][:2] == ["start", "start-step"], name

    text, reply = results["text"], app.reply("text")
    assert reply.outcome is fluxstream.Outcome.DONE and len(reply.text) > 40
    assert joined(text, "text") == reply.text  # multi-byte, emoji, quotes, a newline
    assert len(parts(text, "text")) == 1 and parts(text, "text")[0]["state"] == "done"
    assert (text["finishReason"], text["errors"]) == ("stop", [])
    assert text["message"]["metadata"]["outcome"] == "done"
    assert text["message"]["metadata"]["usage"]["completion_tokens"] == (
        reply.usage.completion_tokens if reply.usage else None)

    reasoning, reply = results["reasoning"], app.reply("reasoning")
    assert reply.choices[0].reasoning and reply.text
    assert joined(reasoning, "reasoning") == reply.choices[0].reasoning
    assert joined(reasoning, "text") == reply.text
    kinds = [p["type"] for p in reasoning["message"]["parts"] if p["type"] != "step-start"]
    assert kinds == ["reasoning", "text"]  # in the order the model produced them
    assert reasoning["errors"] == []

    tools, reply = results["tools"], app.reply("tools")
    calls = reply.choices[0].tool_calls
    assert len(calls) == 2 and (tools["finishReason"], tools["errors"]) == ("tool-calls", [])
    assert tool_parts(tools) == [
        {"toolCallId": call.id, "type": f"tool-{call.name}", "state": "input-available",
         "input": json.loads(call.arguments)} for call in calls]
    # The arguments were streamed (several deltas per call, interleaved), then made whole.
    assert tools["chunks"].count("tool-input-delta") >= 2 * len(calls)
    assert tools["chunks"].count("tool-input-available") == len(calls)

    error, reply = results["error"], app.reply("error")
    assert reply.outcome is fluxstream.Outcome.FAILED and reply.error is not None
    assert joined(error, "text") == reply.text and reply.text  # what came before the error
    assert error["errors"] == ["An error occurred."]  # the upstream's words stay on the server
    assert reply.error.message not in json.dumps(error)
    assert error["finishReason"] == "error"
    shown = results["shown-error"]
    assert shown["errors"] == [app.reply("shown-error").error.message]  # type: ignore[union-attr]

    cut, reply = results["truncated"], app.reply("truncated")
    assert reply.outcome is fluxstream.Outcome.TRUNCATED and reply.text
    assert joined(cut, "text") == reply.text
    assert (cut["finishReason"], cut["errors"]) == ("interrupted", [])
    assert cut["message"]["metadata"]["outcome"] == "truncated"


def complete_events_text(body: bytes) -> tuple[str, str]:
    """The text and reasoning of the chunks whose SSE events are complete in ``body``."""
    decoder = fluxstream.SSEDecoder()
    text = reasoning = ""
    for event in decoder.feed(body):
        if event.data == "[DONE]":
            continue
        chunk = json.loads(event.data)
        if chunk["type"] == "text-delta":
            text += chunk["delta"]
        elif chunk["type"] == "reasoning-delta":
            reasoning += chunk["delta"]
    return text, reasoning


def test_a_body_cut_anywhere_reads_as_the_events_that_arrived_whole(
    ai_sdk: Path, chat_app: tuple[str, ChatApp], tmp_path: Path
) -> None:
    base, app = chat_app
    response = httpx.post(f"{base}/chat?case=reasoning", timeout=30, json={
        "messages": [{"role": "user", "parts": [{"type": "text", "text": "ai sdk"}]}]})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    body = response.content
    assert body.endswith(b"data: [DONE]\n\n")
    # Seeded cut points, and every cut inside the first multi-byte character.
    rng = random.Random(36)
    first_wide = next(i for i, byte in enumerate(body) if byte >= 0x80)
    cuts = sorted({*rng.sample(range(1, len(body)), 40), first_wide + 1, first_wide + 2})
    results = read_with_ai_sdk(ai_sdk, [{"bytes": body[:cut]} for cut in cuts], tmp_path)
    reply = app.reply("reasoning")
    for cut, result in zip(cuts, results, strict=True):
        assert result["failed"] is None, (cut, result)
        text, reasoning = complete_events_text(body[:cut])
        assert joined(result, "text") == text, cut
        assert joined(result, "reasoning") == reasoning, cut
        assert reply.text.startswith(text) and (reply.choices[0].reasoning or "").startswith(
            reasoning)
        assert "\ufffd" not in json.dumps(result, ensure_ascii=False)


def test_use_chat_resumes_a_reply_it_left_and_finds_nothing_once_it_ended(
    ai_sdk: Path, chat_app: tuple[str, ChatApp], tmp_path: Path
) -> None:
    base, app = chat_app
    [left] = read_with_ai_sdk(ai_sdk, [
        {"url": f"{base}/relayed", "chatId": "c1", "leaveAfter": 8, "prompt": "ai sdk"}],
        tmp_path)
    assert app.ended.wait(30)
    reply = app.recorded["c1"].reply
    assert reply.outcome is fluxstream.Outcome.DONE  # the page's leaving did not stop it
    # Resumed mid-reply (the GET found the reply still streaming): the reply again from its
    # start, which useChat rebuilds the message from.
    assert (left["resumed"], left["failed"], left["errors"]) == (True, None, [])
    assert left["chunks"][:2] == ["start", "start-step"]
    assert joined(left, "text") == reply.text and left["finishReason"] == "stop"
    ended, unknown = read_with_ai_sdk(ai_sdk, [
        {"url": f"{base}/relayed", "chatId": "c1", "reconnect": True},
        {"url": f"{base}/relayed", "chatId": "no-such-chat", "reconnect": True}], tmp_path)
    assert (ended["resumed"], ended["failed"]) == (False, None)
    assert (unknown["resumed"], unknown["failed"]) == (False, None)
