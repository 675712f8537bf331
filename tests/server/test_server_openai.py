"""Cross-check against a client nobody here wrote: openai-python streaming from our server
assembles exactly what ``expected_reply`` says (text, reasoning, tool calls, usage, n)."""

from __future__ import annotations

from typing import Any

import pytest
from test_server_support import TOOLS, chat

from fluxstream.server import ExpectedReply, Server, expected_reply

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.anyio

KEY = "sk-fluxstream-openai"


def accumulate_openai(chunks: list[Any]) -> dict[str, Any]:
    """The usual dict loop over openai's typed chunks."""
    text: dict[int, str] = {}
    reasoning: dict[int, str] = {}
    tools: dict[int, dict[int, dict[str, Any]]] = {}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in chunks:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            i = choice.index
            text.setdefault(i, "")
            finish.setdefault(i, None)
            delta = choice.delta
            if delta.content:
                text[i] += delta.content
            extra = getattr(delta, "model_extra", None) or {}
            if extra.get("reasoning_content"):
                reasoning[i] = reasoning.get(i, "") + extra["reasoning_content"]
            for call in delta.tool_calls or []:
                slot = tools.setdefault(i, {}).setdefault(
                    call.index, {"id": None, "name": None, "arguments": ""}
                )
                if call.id:
                    slot["id"] = call.id
                if call.function and call.function.name:
                    slot["name"] = call.function.name
                if call.function and call.function.arguments:
                    slot["arguments"] += call.function.arguments
            if choice.finish_reason:
                finish[i] = choice.finish_reason
    return {"text": text, "reasoning": reasoning, "tools": tools, "finish": finish, "usage": usage}


def check(got: dict[str, Any], expected: ExpectedReply) -> None:
    for choice in expected.choices:
        assert got["text"][choice.index] == choice.text
        assert got["reasoning"].get(choice.index) == choice.reasoning
        assert got["finish"][choice.index] == choice.finish_reason
        calls = sorted(got["tools"].get(choice.index, {}).items())
        assert [(c["id"], c["name"], c["arguments"]) for _, c in calls] == [
            (t.id, t.name, t.arguments) for t in choice.tool_calls
        ]
    assert got["usage"] == expected.usage


@pytest.mark.parametrize(
    ("extra", "profile"),
    [
        ({}, "openai"),
        ({"tools": TOOLS, "n": 2}, "openai"),
        ({"reasoning_effort": "low"}, "multiline"),
        ({"n": 3}, "azure,crlf,nospace,repeat-role"),
    ],
    ids=["text", "tools-n2", "reasoning-multiline", "quirks"],
)
async def test_openai_python_streams_the_expected_reply(
    anyio_backend: str, extra: dict[str, Any], profile: str
) -> None:
    from fluxstream.server import serve

    body = chat("Bonjour, ça va? 你好", stream_options={"include_usage": True}, **extra)
    async with serve(api_key=KEY) as server:
        await _run(server, body, profile)


async def _run(server: Server, body: dict[str, Any], profile: str) -> None:
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
    async with client:
        params = {k: v for k, v in body.items() if k != "stream"}
        extra_body = {}
        if "reasoning_effort" in params:
            params.pop("reasoning_effort")
            extra_body["reasoning_effort"] = "low"
        stream = await client.chat.completions.create(
            stream=True,
            extra_headers={"X-Fluxstream-Profile": profile},
            extra_body=extra_body or None,
            **params,
        )
        chunks = [chunk async for chunk in stream]
    sent = server.records.requests[-1].json
    check(accumulate_openai(chunks), expected_reply(sent, profile))
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


async def test_openai_python_non_streaming_and_auth(anyio_backend: str) -> None:
    from fluxstream.server import serve

    body = chat(stream=False, tools=TOOLS[:1])
    async with serve(api_key=KEY) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key=KEY) as client:
            params = {k: v for k, v in body.items() if k != "stream"}
            completion = await client.chat.completions.create(**params)
            expected = expected_reply(server.records.requests[-1].json)
            call = completion.choices[0].message.tool_calls[0]
            assert (call.id, call.function.name, call.function.arguments) == (
                expected.choices[0].tool_calls[0].id,
                expected.choices[0].tool_calls[0].name,
                expected.choices[0].tool_calls[0].arguments,
            )
            models = await client.models.list()
            assert [m.id for m in models.data] == ["fluxstream-echo", "fluxstream-reasoner"]
        async with openai.AsyncOpenAI(
            base_url=server.base_url, api_key="sk-wrong", max_retries=0
        ) as bad:
            with pytest.raises(openai.AuthenticationError):
                await bad.models.list()


@pytest.mark.xfail(
    reason="openai-python dispatches an empty event for a blank line after a comment once an "
    "`id:` was seen (WHATWG: no dispatch when the data buffer is empty), then fails to parse it",
    strict=False,
)
async def test_openai_python_with_heartbeats(anyio_backend: str) -> None:
    from fluxstream.server import serve

    body = chat(stream_options={"include_usage": True})
    async with serve(api_key=KEY) as server:
        await _run(server, body, "heartbeats")
