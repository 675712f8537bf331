"""A resume token taken in the middle of a content block continues it exactly, in every format.

Regression: an Anthropic Messages stream resumed from a token (another worker, ``client.chat.
resume``) lost everything after the token: the new parser did not know the open content
blocks, so every later ``content_block_delta`` was skipped as "a block that never started"
and the reply still ended ``done`` with the text cut (20 of 150 characters) — silent loss.
Real sockets (the embedded server, which numbers every format's events with ``sse-ids``, so
the resume goes by ``Last-Event-ID``), asyncio and trio.

Also a Responses stream cut after a part's last delta: the part's ``.done`` (its whole text)
was taken as new text by the restored parser and the reply held the text twice.
"""

from __future__ import annotations

from typing import Any

import pytest

import fluxstream
from fluxstream.server import Server

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "What is the weather in Zürich?"}]
IDS = {"X-Fluxstream-Profile": "sse-ids"}
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


@pytest.mark.parametrize("writes", [None, 7])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_token_taken_after_any_event_resumes_exactly(
    aserver: Server, case: str, writes: int | None
) -> None:
    """Every cut point of the stream: after the k-th event, for every k; with the server's
    events in one write each, and cut into 7-byte writes (other read boundaries, so a cut
    also lands inside a read of several events)."""
    api, params = CASES[case]
    headers = IDS if writes is None else {**IDS, "X-Fluxstream-Fault": f"write-size={writes}"}
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="sk-s") as client:
        endpoint = {"chat": client.chat, "responses": client.responses,
                    "messages": client.messages}[api]
        async with endpoint.stream(model="m", **params, extra_headers=headers) as whole:
            count = sum([1 async for _ in whole])
        expected = content(whole.reply)
        assert count >= 3 and (expected[0] or expected[1])
        for cut in range(1, count):
            async with endpoint.stream(model="m", **params, extra_headers=headers) as first:
                seen = 0
                async for _event in first:
                    seen += 1
                    if seen == cut:
                        break
                token = first.resume_token()
            resumed = client.chat.resume(token, extra_headers=headers)
            async with resumed:
                await resumed.until_done()
            reply = resumed.reply
            # ``finished`` when the token came after every choice finished (nothing to read).
            assert reply.outcome in (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED), cut
            assert reply.skipped_frames == 0, cut
            assert content(reply) == expected, cut
