"""A resume token taken in the middle of a content block continues it exactly, in every format.

Regression: an Anthropic Messages stream resumed from a token (another worker, ``client.chat.
resume``) lost everything after the token: the new parser did not know the open content
blocks, so every later ``content_block_delta`` was skipped as "a block that never started"
and the reply still ended ``done`` with the text cut (20 of 150 characters) — silent loss.
Real sockets (the embedded server, which numbers every format's events with ``sse-ids``, so
the resume goes by ``Last-Event-ID``), asyncio and trio.
"""

from __future__ import annotations

from typing import Any

import pytest

import fluxstream
from fluxstream.server import Server

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "What is the weather in Zürich?"}]
IDS = {"X-Fluxstream-Profile": "sse-ids"}
CONTENT = (fluxstream.TextDelta, fluxstream.ToolCallDelta)
TOOL = {"name": "forecast", "description": "A forecast",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                          "days": {"type": "integer"}},
                         "required": ["city", "days"]}}
FUNCTION = {"type": "function", "name": "forecast", "parameters": TOOL["input_schema"]}
CHAT_TOOL = {"type": "function", "function": {"name": "forecast",
                                              "parameters": TOOL["input_schema"]}}

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "messages-text": ("messages", {"max_tokens": 1024, "messages": USER}),
    "messages-tool": ("messages", {"max_tokens": 1024, "messages": USER, "tools": [TOOL],
                                   "tool_choice": {"type": "tool", "name": "forecast"}}),
    "responses-text": ("responses", {"input": USER}),
    "responses-tool": ("responses", {"input": USER, "tools": [FUNCTION],
                                     "tool_choice": "required"}),
    "chat-text": ("chat", {"messages": USER}),
    "chat-tool": ("chat", {"messages": USER, "tools": [CHAT_TOOL], "tool_choice": "required"}),
}


def content(reply: fluxstream.Reply) -> tuple[str, list[tuple[int, str | None, str]]]:
    choice = reply.choices[0]
    return choice.text, [(c.index, c.name, c.arguments) for c in choice.tool_calls]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("where", [0.3, 0.5, 0.7])
async def test_a_token_taken_mid_block_resumes_exactly(
    aserver: Server, case: str, where: float
) -> None:
    api, params = CASES[case]
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk-s") as client:
        endpoint = {"chat": client.chat, "responses": client.responses,
                    "messages": client.messages}[api]
        async with endpoint.stream(model="m", **params, extra_headers=IDS) as whole:
            count = sum([1 async for event in whole if isinstance(event, CONTENT)])
        expected = content(whole.reply)
        assert count >= 2
        cut = max(1, min(count - 1, int(count * where)))  # after this many content events

        async with endpoint.stream(model="m", **params, extra_headers=IDS) as first:
            seen = 0
            async for event in first:
                seen += isinstance(event, CONTENT)
                if seen == cut:
                    break
            token = first.resume_token()
        text, calls = content(first.reply)
        assert len(text) + sum(len(c[2]) for c in calls) < len(expected[0]) + sum(
            len(c[2]) for c in expected[1]
        ), "the token must be taken before the content's end"

        resumed = client.chat.resume(token, extra_headers=IDS)
        async with resumed:
            await resumed.until_done()
    assert resumed.reply.outcome is fluxstream.Outcome.DONE
    assert resumed.reply.skipped_frames == 0
    assert content(resumed.reply) == expected
