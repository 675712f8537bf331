"""The embedded server's Responses and Messages endpoints against the official SDKs' own stream
helpers: openai-python's ``client.responses.stream(...)`` and anthropic-sdk-python's
``client.messages.stream(...)`` accumulate the same text, tool calls, reasoning and usage as
fluxstream's ``client.responses`` / ``client.messages`` from the same server, and as the script
the server says it streamed. Over 127.0.0.1, on asyncio and trio.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import fluxstream
from fluxstream.server import Server, script_for

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.anyio

KEY = "sk-fluxstream-sdk"
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"]}
CLOCK = {"type": "object", "properties": {"timezone": {"type": "string"}}}
RESP_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
              {"type": "function", "name": "get_time", "parameters": CLOCK}]
ANTH_TOOLS = [{"name": "get_weather", "input_schema": WEATHER},
              {"name": "get_time", "input_schema": CLOCK}]
USER = [{"role": "user", "content": "Weather and time in Zürich? 你好"}]

RESPONSES_CASES: list[dict[str, Any]] = [
    {"input": "Hi there", "instructions": "be brief"},
    {"input": USER, "tools": RESP_TOOLS},
    {"input": USER, "reasoning": {"effort": "low"}},
    {"input": "Hi", "max_output_tokens": 6},
]
MESSAGES_CASES: list[dict[str, Any]] = [
    {"messages": USER, "system": "be brief"},
    {"messages": USER, "tools": ANTH_TOOLS},
    {"messages": USER, "thinking": {"type": "enabled", "budget_tokens": 1024}},
    {"messages": USER, "max_tokens": 6},
]


@pytest.fixture
async def keyed(anyio_backend: str) -> Any:
    async with fluxstream.server.serve(port=0, api_key=KEY) as running:
        yield running


@pytest.mark.parametrize("case", range(len(RESPONSES_CASES)))
async def test_openai_responses_stream_matches_fluxstream(keyed: Server, case: int) -> None:
    params = {"model": "fluxstream-echo", **RESPONSES_CASES[case]}
    sdk = openai.AsyncOpenAI(base_url=keyed.base_url, api_key=KEY, max_retries=0)
    kinds: list[str] = []
    deltas: list[str] = []
    async with sdk.responses.stream(**params) as stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response  # get_final_response() wants `completed` only
    await sdk.close()
    assert "".join(deltas) == final.output_text
    async with fluxstream.AsyncClient(base_url=keyed.base_url, api_key=KEY) as client:
        reply = await client.responses.complete(**params)
    script = script_for("responses", params).choices[0]
    choice = reply.choices[0]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert final.output_text == reply.text == ("" if script.tool_calls else script.text)
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.call_id, c.name, c.arguments) for c in calls] == [
        (t.id, t.name, t.arguments) for t in choice.tool_calls
    ] == [(t.id, t.name, t.arguments) for t in script.tool_calls]
    summaries = [s.text for item in final.output if item.type == "reasoning"
                 for s in item.summary]
    assert "".join(summaries) == (choice.reasoning or "") == (
        script.reasoning if "reasoning" in params else "")
    assert final.usage is not None and reply.usage is not None
    sdk_usage = final.usage.model_dump(exclude_none=True)
    assert sdk_usage == {k: getattr(reply.usage, k) for k in sdk_usage}
    assert sdk_usage["output_tokens"] == script_for("responses", params).usage[
        "completion_tokens"]
    assert final.status == choice.finish_reason
    assert final.id == reply.id


@pytest.mark.parametrize("case", range(len(MESSAGES_CASES)))
async def test_anthropic_messages_stream_matches_fluxstream(keyed: Server, case: int) -> None:
    params = {"model": "fluxstream-echo", "max_tokens": 1024, **MESSAGES_CASES[case]}
    sdk = anthropic.AsyncAnthropic(base_url=keyed.url, api_key=KEY, max_retries=0)
    kinds: list[str] = []
    async with sdk.messages.stream(**params) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_message()
    await sdk.close()
    async with fluxstream.AsyncClient(base_url=keyed.base_url, api_key=KEY) as client:
        reply = await client.messages.complete(**params)
    script = script_for("messages", params).choices[0]
    choice = reply.choices[0]
    assert kinds[-1] == "message_stop"
    text = "".join(b.text for b in final.content if b.type == "text")
    assert text == reply.text == ("" if script.tool_calls else script.text)
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in uses] == [
        (t.name, json.loads(t.arguments)) for t in choice.tool_calls
    ] == [(t.name, t.args) for t in script.tool_calls]
    assert [b.id for b in uses] == [t.id for t in choice.tool_calls]
    thinking = "".join(b.thinking for b in final.content if b.type == "thinking")
    assert thinking == (choice.reasoning or "")
    assert final.stop_reason == choice.finish_reason
    assert reply.usage is not None
    assert final.usage.input_tokens == reply.usage.input_tokens  # type: ignore[attr-defined]
    assert final.usage.output_tokens == reply.usage.output_tokens  # type: ignore[attr-defined]
    assert final.id == reply.id


async def test_anthropic_sdk_sees_overloaded_529_as_its_typed_error(keyed: Server) -> None:
    sdk = anthropic.AsyncAnthropic(
        base_url=keyed.url, api_key=KEY, max_retries=0,
        default_headers={"X-Fluxstream-Fault": "status=529"},
    )
    with pytest.raises(anthropic.APIStatusError) as info:
        await sdk.messages.create(model="m", max_tokens=5, messages=USER)
    await sdk.close()
    assert info.value.status_code == 529
    assert info.value.body == {"type": "error",
                               "error": {"type": "overloaded_error", "message": "Overloaded"}}


async def test_openai_sdk_resumes_a_background_response_with_starting_after(
    keyed: Server,
) -> None:
    """OpenAI's own resume, by OpenAI's own client: a background response's stream read again
    from ``retrieve(id, stream=True, starting_after=N)`` is exactly the events after ``N``."""
    sdk = openai.AsyncOpenAI(base_url=keyed.base_url, api_key=KEY, max_retries=0)
    first = await sdk.responses.create(model="m", input=USER, background=True, stream=True)
    events = [event async for event in first]
    assert events[0].response.background is True
    rid = events[0].response.id
    rest = await sdk.responses.retrieve(rid, stream=True, starting_after=10)
    again = [event async for event in rest]
    async with sdk.responses.stream(response_id=rid, starting_after=10) as helper:
        helped = [event async for event in helper]
        final = await helper.get_final_response()
    stored = await sdk.responses.retrieve(rid)
    await sdk.close()
    assert [e.sequence_number for e in again] == list(range(11, len(events)))
    assert [e.model_dump() for e in again] == [e.model_dump() for e in events[11:]]
    assert len(helped) == len(again)
    text = script_for("responses", {"model": "m", "input": USER}).choices[0].text
    assert stored.output_text == text and stored.status == "completed"
    # The helper rebuilt the response from events 11.. only (it missed the created event's
    # snapshot): its final response is still the completed event's.
    assert final.output_text == text


async def test_anthropic_sdk_prefill_is_continued(keyed: Server) -> None:
    params: dict[str, Any] = {"model": "m", "max_tokens": 1024, "messages": USER}
    text = script_for("messages", params).choices[0].text
    prefill = text[:25].rstrip()
    sdk = anthropic.AsyncAnthropic(base_url=keyed.url, api_key=KEY, max_retries=0)
    async with sdk.messages.stream(
        **{**params, "messages": [*USER, {"role": "assistant", "content": prefill}]}
    ) as stream:
        final = await stream.get_final_message()
    await sdk.close()
    assert prefill + final.content[0].text == text  # type: ignore[union-attr]
