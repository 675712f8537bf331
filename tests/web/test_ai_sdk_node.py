"""Our UI message stream read by the AI SDK itself: the ``ai`` npm package under Node.

An app on uvicorn (on the test's event loop) streams replies of the embedded server through
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

import json
import random
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from ai_sdk_node import install_ai_sdk, joined, parts, read_with_ai_sdk
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from web_support import serving

import fluxstream
from fluxstream import ResumePolicy
from fluxstream.server import FAULT_HEADER, PROFILE_HEADER, ServerThread, expected_reply
from fluxstream.web import EventStreamResponse
from fluxstream.web.ai_sdk import UIMessageStream, chat_messages, masked_error

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]

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
    stream each case was served by is kept in ``streams`` (its ``reply`` is what was sent)."""

    def __init__(self, client: fluxstream.AsyncClient) -> None:
        self.client = client
        self.streams: dict[str, fluxstream.ReplyStream] = {}
        self.app = Starlette(routes=[Route("/chat", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        case = request.query_params["case"]
        messages = chat_messages(json.loads(await request.body()))
        stream = self.streams[case] = self.client.chat.stream(
            model="m", messages=messages, **CASES[case])
        error_text = shown_error if case == "shown-error" else masked_error
        return EventStreamResponse(stream, encoding=UIMessageStream(error_text=error_text))

    def reply(self, case: str) -> fluxstream.Reply:
        return self.streams[case].reply


@pytest.fixture(scope="module")
def ai_sdk() -> Path:
    return install_ai_sdk()


@asynccontextmanager
async def chat_app(upstream: ServerThread) -> AsyncIterator[tuple[str, ChatApp]]:
    async with fluxstream.AsyncClient(upstream.base_url, api_key="k") as client:
        app = ChatApp(client)
        async with serving("uvicorn", app.app) as base:
            yield base, app


async def read_in_node(prefix: Path, cases: list[dict[str, Any]], work: Path) -> list[Any]:
    """:func:`read_with_ai_sdk` off the event loop (the app serves Node on it)."""
    return await anyio.to_thread.run_sync(read_with_ai_sdk, prefix, cases, work)


def tool_parts(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"toolCallId": p["toolCallId"], "type": p["type"], "state": p["state"],
             "input": p["input"]} for p in parts(result, "tool")]


async def test_the_ai_sdk_reads_text_reasoning_tool_calls_errors_and_cuts(
    ai_sdk: Path, upstream: ServerThread, tmp_path: Path
) -> None:
    names = list(CASES)
    async with chat_app(upstream) as (base, app):
        results = dict(zip(names, await read_in_node(
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


async def test_a_body_cut_anywhere_reads_as_the_events_that_arrived_whole(
    ai_sdk: Path, upstream: ServerThread, tmp_path: Path
) -> None:
    async with chat_app(upstream) as (base, app), httpx.AsyncClient() as http:
        response = await http.post(f"{base}/chat?case=reasoning", timeout=30, json={
            "messages": [{"role": "user", "parts": [{"type": "text", "text": "ai sdk"}]}]})
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    body = response.content
    assert body.endswith(b"data: [DONE]\n\n")
    # Seeded cut points, and every cut inside the first multi-byte character.
    rng = random.Random(36)
    first_wide = next(i for i, byte in enumerate(body) if byte >= 0x80)
    cuts = sorted({*rng.sample(range(1, len(body)), 40), first_wide + 1, first_wide + 2})
    results = await read_in_node(ai_sdk, [{"bytes": body[:cut]} for cut in cuts], tmp_path)
    reply = app.reply("reasoning")
    for cut, result in zip(cuts, results, strict=True):
        assert result["failed"] is None, (cut, result)
        text, reasoning = complete_events_text(body[:cut])
        assert joined(result, "text") == text, cut
        assert joined(result, "reasoning") == reasoning, cut
        assert reply.text.startswith(text) and (reply.choices[0].reasoning or "").startswith(
            reasoning)
        assert "\ufffd" not in json.dumps(result, ensure_ascii=False)


def recipe_blocks() -> list[str]:
    """The Python blocks of ``docs/recipes/ai-sdk.md``, in order."""
    page = (ROOT / "docs" / "recipes" / "ai-sdk.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```$", page, flags=re.S | re.M)


@asynccontextmanager
async def recipe_app(block: str, upstream: ServerThread) -> AsyncIterator[tuple[str, Any]]:
    """The app a recipe block makes, as written but for the upstream's URL, served."""
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(block.replace("http://127.0.0.1:8787/v1", upstream.base_url),
                 "docs/recipes/ai-sdk.md", "exec"), namespace)
    app = namespace["app"]
    try:
        async with app.router.lifespan_context(app), serving("uvicorn", app) as base:
            yield base, namespace
    finally:
        await namespace["client"].aclose()


async def test_the_recipes_endpoints_work_as_written(
    ai_sdk: Path, upstream: ServerThread, tmp_path: Path
) -> None:
    plain, _, resumable = recipe_blocks()
    async with recipe_app(plain, upstream) as (base, _):
        [read] = await read_in_node(ai_sdk, [{"url": f"{base}/api/chat", "prompt": "recipe"}],
                                    tmp_path)
        async with httpx.AsyncClient() as http:
            refused = await http.post(f"{base}/api/chat", json={"messages": "not a list"})
    expected = expected_reply(upstream.records.requests[-1].json).text
    assert (read["failed"], read["errors"], read["finishReason"]) == (None, [], "stop")
    assert joined(read, "text") == expected and len(expected) > 40
    assert refused.status_code == 400
    # To leave mid-reply, and to come back before its end however late a loaded machine
    # runs the page's reconnect (about 2.5 s of reply; at 0.02 s a drip it was under one).
    with ServerThread(profile="openai", faults="drip=0.06") as slow:
        async with recipe_app(resumable, slow) as (base, namespace):
            [left] = await read_in_node(ai_sdk, [
                {"url": f"{base}/api/chat", "chatId": "c2", "leaveAfter": 3, "prompt": "recipe"}],
                tmp_path)
            # The recipe forgets a chat whose reply ended; its dict is all there is to wait on.
            with anyio.fail_after(30):
                while namespace["streaming"]:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            ended, unknown = await read_in_node(ai_sdk, [
                {"url": f"{base}/api/chat", "chatId": "c2", "reconnect": True},
                {"url": f"{base}/api/chat", "chatId": "no-such-chat", "reconnect": True}],
                tmp_path)
        # The page's leaving did not stop the model: one request, answered to its end.
        assert len(slow.records.requests) == 1
        assert slow.records.find_disconnect(completed=False) is None
    # Resumed mid-reply (the GET found the reply still streaming): the reply again from its
    # start, which useChat rebuilds the message from.
    assert (left["resumed"], left["failed"], left["errors"]) == (True, None, [])
    assert left["chunks"][:2] == ["start", "start-step"]
    assert joined(left, "text") == expected_reply(slow.records.requests[0].json).text
    assert left["finishReason"] == "stop"
    assert (ended["resumed"], ended["failed"]) == (False, None)  # it ended: a 204
    assert (unknown["resumed"], unknown["failed"]) == (False, None)


async def test_the_recipes_chunk_printer_prints_a_whole_reply(
    upstream: ServerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """The page's second block, as written: it prints the protocol's bytes of a reply."""
    _, printer, _ = recipe_blocks()
    code = compile(printer.replace("http://127.0.0.1:8787/v1", upstream.base_url),
                   "docs/recipes/ai-sdk.md", "exec")
    await anyio.to_thread.run_sync(exec, code, {"__name__": "__main__"})  # its own event loop
    out = capsys.readouterr().out
    assert out.endswith("data: [DONE]\n\n")
    chunks = [json.loads(event.data) for event in fluxstream.SSEDecoder().feed(out.encode())
              if event.data != "[DONE]"]
    assert [c["type"] for c in chunks[:3]] == ["start", "start-step", "text-start"]
    assert chunks[-1]["type"] == "finish" and chunks[-1]["finishReason"] == "length"
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == expected_reply(upstream.records.requests[-1].json).text
