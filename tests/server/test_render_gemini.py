"""The embedded server's Gemini renderer, sans-IO: the request read as the chat request it
amounts to, and the rendered events (framed under each profile) read back by the Gemini format
into exactly the script's content, finish and usage; routes and error bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fluxstream._events import Outcome
from fluxstream._parser import replay
from fluxstream.server.profiles import parse_profiles
from fluxstream.server.render import frame
from fluxstream.server.render_gemini import (
    from_gemini,
    gemini_error_json,
    gemini_events,
    gemini_response,
    gemini_route,
)
from fluxstream.server.script import build_script

USER = [{"role": "user", "parts": [{"text": "Weather in Zürich?"}]}]
TOOLS = [{"functionDeclarations": [{"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}]}]


def _script(body: dict[str, Any], names: frozenset[str] = frozenset()) -> Any:
    return build_script(from_gemini(body, "gemini-test"), names)


def _body(body: dict[str, Any], names: frozenset[str]) -> bytes:
    events = gemini_events(_script(body, names), names)
    return b"".join(frame(e, names, retry=50 if i == 0 else None)
                    for i, e in enumerate(events))


@pytest.mark.parametrize("profile", ["", "crlf", "nospace", "multiline", "sse-ids",
                                     "reasoning", "crlf,multiline,heartbeats"])
@pytest.mark.parametrize("body", [
    {"contents": USER},
    {"contents": USER, "generationConfig": {"candidateCount": 2, "maxOutputTokens": 5}},
    {"contents": USER, "tools": TOOLS},
    {"contents": USER, "generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
    {"contents": USER, "generationConfig": {
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object", "properties": {"a": {"type": "string"}},
                               "required": ["a"]}}},
], ids=["text", "n2-cut", "tools", "thinking", "structured"])
def test_rendered_stream_reads_back_exactly(body: dict[str, Any], profile: str) -> None:
    names = parse_profiles(profile)
    script = _script(body, names)
    reply = replay([_body(body, names)], format="gemini")
    assert reply.outcome is Outcome.DONE and reply.skipped_frames == 0
    assert reply.model == "gemini-test" and reply.id == script.id.removeprefix("chatcmpl-")
    for choice, expected in zip(reply.choices, script.choices, strict=True):
        assert choice.text == expected.text
        assert (choice.reasoning or "") == (expected.reasoning if script.reasoning else "")
        assert [(t.id, t.name, t.parse_arguments()) for t in choice.tool_calls] == [
            (c.id, c.name, c.args) for c in expected.tool_calls]
        assert choice.stop == expected.finish_reason
    assert reply.usage is not None
    assert reply.usage.total_tokens == script.usage["total_tokens"]
    assert reply.usage.completion_tokens == script.usage["completion_tokens"]


@pytest.mark.parametrize("profile", ["error-midstream", "error-midstream-done"])
def test_error_midstream_fails_after_half_the_text(profile: str) -> None:
    names = parse_profiles(profile)
    script = _script({"contents": USER}, names)
    reply = replay([_body({"contents": USER}, names)], format="gemini")
    choice = script.choices[0]
    assert reply.outcome is Outcome.FAILED
    assert reply.text == "".join(choice.text_deltas[: len(choice.text_deltas) // 2])
    assert reply.error is not None and reply.error.type == "UNAVAILABLE"


def test_a_trailing_model_turn_is_continued() -> None:
    whole = _script({"contents": USER}).choices[0].text
    prefix = whole[:17]
    body = {"contents": [*USER, {"role": "model", "parts": [{"text": prefix}]}]}
    assert _script(body).choices[0].text == whole[17:]


def test_the_whole_response_has_the_stream_content() -> None:
    for body in ({"contents": USER}, {"contents": USER, "tools": TOOLS}):
        script = _script(body)
        from fluxstream._parser import StreamParser

        parser = StreamParser(format="gemini")
        parser.feed_completion(gemini_response(script, frozenset()))
        parser.close()
        streamed = replay([_body(body, frozenset())], format="gemini")
        assert [(c.text, c.tool_calls, c.finish_reason) for c in parser.reply.choices] == [
            (c.text, c.tool_calls, c.finish_reason) for c in streamed.choices]


def test_request_translation() -> None:
    canonical = from_gemini({
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": USER,
        "tools": TOOLS,
        "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                                 "allowedFunctionNames": ["get_weather"]}},
        "generationConfig": {"maxOutputTokens": 9},
    }, "m")
    assert canonical["messages"][0] == {"role": "system", "content": "be brief"}
    assert canonical["max_tokens"] == 9
    assert canonical["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert canonical["tools"][0]["function"]["name"] == "get_weather"


@pytest.mark.parametrize(("path", "route"), [
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent", ("gemini-2.5-flash", True)),
    ("/v1/models/gemini-2.5-flash:generateContent", ("gemini-2.5-flash", False)),
    ("/v1/projects/p/locations/us-central1/publishers/google/models/g:streamGenerateContent",
     ("g", True)),
    ("/v1/chat/completions", None),
    ("/v1beta/models/x:countTokens", None),
])
def test_routes(path: str, route: tuple[str, bool] | None) -> None:
    assert gemini_route(path) == route


def test_error_bodies_in_googles_shape() -> None:
    assert json.loads(gemini_error_json(429, "slow down")) == {
        "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}}
    assert json.loads(gemini_error_json(418, "x"))["error"]["status"] == "IM_A_TEAPOT"
