"""End to end, over 127.0.0.1, on asyncio and trio: ``client.gemini`` against the embedded
server's Gemini dialect (``/v1beta/models/{model}:streamGenerateContent?alt=sse``).

Each reply must be exact (the server's own script says what was streamed): text, thoughts,
tool calls, usage, finish reason, outcome; the key sent as ``x-goog-api-key``; the v1beta, v1
and Vertex base URLs; ``response_format=Model`` read back as the model; a drop continued by
sending the delivered text back as a ``model`` turn, without a character twice; a resume
token resumed on ``client.gemini`` and through ``client.chat``; a mid-stream error is
``reply.error``; an error status in Google's shape is the typed status error.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from pydantic import BaseModel

import fluxstream
from fluxstream import apis
from fluxstream._events import TextDelta
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import Server, script_for, serve

pytestmark = pytest.mark.anyio

MODEL = "gemini-2.5-flash"
CONTENTS = [{"role": "user", "parts": [{"text": "Weather in Zürich? 你好"}]}]
GEMINI = apis.get("gemini")
WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer"}},
           "required": ["city", "days"]}


class Plan(BaseModel):
    title: str
    stops: list[str]


def expected(**fields: Any) -> Any:
    """What the server streams for a request with ``fields``."""
    return script_for("gemini", {"model": MODEL, "contents": CONTENTS, **fields})


def client_for(server: Server, root: str = "/v1beta", **kwargs: Any) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base_url=server.url + root, api_key="AIza-e2e", **kwargs)


async def run(stream: Any) -> tuple[str, list[Any]]:
    shown: list[str] = []
    events: list[Any] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, TextDelta):
                shown.append(event.text)
    return "".join(shown), events


@pytest.mark.parametrize("root", [
    "/v1beta", "/v1", "/v1/projects/p/locations/us-central1/publishers/google"])
async def test_text_usage_outcome_and_the_key(aserver: Server, root: str) -> None:
    script = expected()
    async with client_for(aserver, root) as client:
        shown, events = await run(client.gemini.stream(model=MODEL, contents=CONTENTS))
        reply = await client.gemini.complete(model=MODEL, contents=CONTENTS)
    assert shown == reply.text == script.choices[0].text
    assert reply.outcome is fluxstream.Outcome.DONE and reply.end_reason == (
        "eof after finishReason")
    assert (reply.choices[0].finish_reason, reply.choices[0].stop) == ("STOP", "stop")
    assert reply.usage is not None and reply.usage.total_tokens == script.usage["total_tokens"]
    assert reply.model == MODEL
    record = aserver.records.requests[-1]
    assert record.path == f"{root}/models/{MODEL}:streamGenerateContent"
    assert record.header("x-goog-api-key") == "<redacted>"  # sent there (the server masks it)
    assert record.header("authorization") is None
    assert set(record.json) == {"contents"}  # no model, no stream: Google refuses them
    assert isinstance(events[-1], fluxstream.End)


async def test_a_keyed_server_takes_the_key_and_refuses_another() -> None:
    async with serve(port=0, api_key="AIza-right") as server:
        async with fluxstream.AsyncClient(base_url=server.url + "/v1beta",
                                          api_key="AIza-right") as client:
            reply = await client.gemini.complete(model=MODEL, contents=CONTENTS)
        assert reply.outcome is fluxstream.Outcome.DONE
        async with fluxstream.AsyncClient(base_url=server.url + "/v1beta", api_key="AIza-wrong",
                                          retry=RetryPolicy.off()) as client:
            with pytest.raises(fluxstream.APIStatusError) as raised:
                await client.gemini.complete(model=MODEL, contents=CONTENTS)
    assert raised.value.status_code == 400
    assert "API key not valid" in str(raised.value)


async def test_thoughts_and_the_system_instruction(aserver: Server) -> None:
    config = {"thinkingConfig": {"includeThoughts": True}}
    script = expected(generationConfig=config, systemInstruction={"parts": [{"text": "brief"}]})
    async with client_for(aserver) as client:
        reply = await client.gemini.complete(model=MODEL, contents=CONTENTS,
                                             system_instruction="brief",
                                             generation_config=config)
    assert reply.text == script.choices[0].text
    assert reply.choices[0].reasoning == script.choices[0].reasoning
    assert aserver.records.requests[-1].json["systemInstruction"] == {
        "parts": [{"text": "brief"}]}


async def test_tools_as_function_declarations(aserver: Server) -> None:
    tools = GEMINI.function_tools([{"name": "get_weather", "parameters": WEATHER}])
    script = expected(tools=tools)
    async with client_for(aserver) as client:
        reply = await client.gemini.complete(model=MODEL, contents=CONTENTS, tools=tools)
    (call,) = reply.choices[0].tool_calls
    (want,) = script.choices[0].tool_calls
    assert (call.id, call.name, call.parse_arguments()) == (want.id, want.name, want.args)
    assert reply.choices[0].stop == "tool_calls"
    sent = aserver.records.requests[-1].json
    assert sent["tools"] == [{"functionDeclarations": [
        {"name": "get_weather", "parametersJsonSchema": WEATHER}]}]


async def test_response_format_is_the_generation_config_schema(aserver: Server) -> None:
    async with client_for(aserver) as client:
        async with client.gemini.stream(model=MODEL, contents=CONTENTS,
                                        response_format=Plan) as stream:
            objects = [o async for o in stream.objects()]
    result = stream.parsed
    assert result.complete and isinstance(result.value, Plan) and objects[-1] == result.value
    config = aserver.records.requests[-1].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["properties"]["stops"]["type"] == "array"


@pytest.mark.parametrize("cut", [3, 7, 11])
async def test_a_drop_is_continued_as_a_model_turn_without_a_character_twice(
    aserver: Server, cut: int, anyio_backend: str
) -> None:
    whole = expected().choices[0].text
    headers = {"X-Fluxstream-Fault": f"drop-after-events={cut},fail-first=1",
               "X-Fluxstream-Attempt-Key": f"gemini-{cut}-{anyio_backend}"}
    before = len(aserver.records.requests)
    async with client_for(aserver, retry=RetryPolicy.off()) as client:
        stream = client.gemini.stream(model=MODEL, contents=CONTENTS, extra_headers=headers,
                                      resume=ResumePolicy(continuation=True))
        shown, events = await run(stream)
    assert shown == stream.reply.text == whole
    assert stream.reply.outcome is fluxstream.Outcome.DONE and stream.stats.resumes == 1
    offsets = [(e.offset, len(e.text)) for e in events if isinstance(e, TextDelta)]
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(offsets))
    first, second = (r.json for r in aserver.records.requests[before:])
    turn = second["contents"][-1]
    assert turn["role"] == "model" and whole.startswith(turn["parts"][0]["text"])
    assert second["contents"][:-1] == first["contents"]


@pytest.mark.parametrize("via", ["gemini", "chat"])
async def test_a_resume_token_resumes_on_gemini(aserver: Server, via: str) -> None:
    whole = expected().choices[0].text
    async with client_for(aserver, retry=RetryPolicy.off()) as client:
        stream = client.gemini.stream(model=MODEL, contents=CONTENTS)
        async with stream:
            async for event in stream:
                if isinstance(event, TextDelta) and event.offset > 5:
                    break
            token = json.loads(json.dumps(stream.resume_token()))
        assert token["api"] == "gemini" and "x-goog-api-key" not in json.dumps(token)
        resume = client.gemini.resume if via == "gemini" else client.chat.resume
        async with resume(token, resume=ResumePolicy(continuation=True)) as resumed:
            reply = await resumed.complete()
    assert reply.text == whole and reply.outcome is fluxstream.Outcome.DONE


async def test_an_error_midstream_fails_the_reply(aserver: Server) -> None:
    async with client_for(aserver, retry=RetryPolicy.off()) as client:
        with pytest.raises(fluxstream.StreamFailedError) as raised:
            await client.gemini.complete(
                model=MODEL, contents=CONTENTS,
                extra_headers={"X-Fluxstream-Profile": "error-midstream"})
    reply = raised.value.reply
    assert reply.error is not None and (reply.error.code, reply.error.type) == (
        "503", "UNAVAILABLE")
    assert expected().choices[0].text.startswith(reply.text) and reply.text


async def test_an_error_status_is_the_typed_status_error(aserver: Server) -> None:
    async with client_for(aserver, retry=RetryPolicy.off()) as client:
        with pytest.raises(fluxstream.APIStatusError) as raised:
            await client.gemini.complete(
                model=MODEL, contents=CONTENTS,
                extra_headers={"X-Fluxstream-Fault": "status=429"})
    assert raised.value.status_code == 429 and "RESOURCE_EXHAUSTED" in str(raised.value.body)


async def test_a_503_before_content_is_retried(aserver: Server, anyio_backend: str) -> None:
    headers = {"X-Fluxstream-Fault": "status=503,fail-first=1",
               "X-Fluxstream-Attempt-Key": f"gemini-503-{anyio_backend}"}
    async with client_for(aserver) as client:
        reply = await client.gemini.complete(model=MODEL, contents=CONTENTS,
                                             extra_headers=headers)
    assert reply.text == expected().choices[0].text
