"""A request of one API asked of another (``fluxstream.apis.portable``): what failover sends.

The conversation, the system prompt, the length cap, the sampling settings every API shares
and function tools must reach the other API in its own names, from and to every registered
API; what cannot be carried (a non-text part) is refused, never sent as an empty question.
"""

from __future__ import annotations

from typing import Any

import pytest

from fluxstream import apis
from fluxstream.apis import ApiFeatureError
from fluxstream.apis.portable import convert_body

SYSTEM = "be brief"
TURNS = [("user", "hello there friend"), ("assistant", "hi!"), ("user", "tell me more")]
TOOL = {"name": "get_weather", "description": "the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def build(api_name: str) -> dict[str, Any]:
    """The same request, written the way a caller of ``api_name`` writes it."""
    api = apis.get(api_name)
    messages: list[dict[str, Any]] = [{"role": r, "content": t} for r, t in TURNS]
    fields: dict[str, Any] = {api.max_tokens_field: 77}
    fields.update(api.sampling({"temperature": 0.25, "top_p": 0.5}))
    if api_name == "anthropic_messages":
        fields["system"] = SYSTEM
    elif api_name == "responses":
        fields["instructions"] = SYSTEM
    else:
        messages.insert(0, {"role": "system", "content": SYSTEM})
    api.add_tools(fields, api.function_tools([TOOL]))
    return api.conversation("m", messages, fields)


def read_back(api_name: str, body: dict[str, Any]) -> dict[str, Any]:
    """What a request of ``api_name`` asks, in one neutral shape (by converting it to Chat
    Completions, whose reading is checked directly below)."""
    chat = convert_body(body, apis.get(api_name), apis.get("chat_completions"))
    return chat


def test_a_gemini_request_reads_as_what_it_asks() -> None:
    body = build("gemini")
    assert body["contents"][0]["parts"][0]["text"] == "hello there friend"
    chat = convert_body(body, apis.get("gemini"), apis.get("chat_completions"))
    assert chat["messages"] == [{"role": "system", "content": SYSTEM}] + [
        {"role": r, "content": t} for r, t in TURNS]
    assert chat["max_tokens"] == 77
    assert chat["temperature"] == 0.25 and chat["top_p"] == 0.5
    assert chat["tools"][0]["function"]["name"] == "get_weather"
    assert chat["tools"][0]["function"]["parameters"] == TOOL["parameters"]


NAMES = ["chat_completions", "anthropic_messages", "responses", "gemini"]


@pytest.mark.parametrize("source", NAMES)
@pytest.mark.parametrize("target", NAMES)
def test_every_api_asks_every_other_the_same_question(source: str, target: str) -> None:
    converted = convert_body(build(source), apis.get(source), apis.get(target))
    assert "stream" not in converted
    chat = read_back(target, converted)
    assert chat["messages"][0] == {"role": "system", "content": SYSTEM}
    assert chat["messages"][1:] == [{"role": r, "content": t} for r, t in TURNS]
    assert chat["max_tokens"] == 77
    assert chat["temperature"] == 0.25 and chat["top_p"] == 0.5
    assert [t["function"]["name"] for t in chat["tools"]] == ["get_weather"]


@pytest.mark.parametrize("target", NAMES)
def test_stop_sequences_reach_every_api_that_has_them(target: str) -> None:
    source = apis.get("chat_completions")
    body = source.conversation("m", [{"role": "user", "content": "x"}], {"stop": ["END"]})
    converted = convert_body(body, source, apis.get(target))
    names = {"chat_completions": "stop", "anthropic_messages": "stop_sequences",
             "gemini": "stopSequences"}
    if target in names:
        config = converted.get("generationConfig", converted)
        assert config[names[target]] == ["END"]
    # Responses has no stop sequences: the field is not sent (the server would refuse it)
    assert "stop" not in converted or target == "chat_completions"


def test_a_gemini_part_that_is_not_text_is_refused() -> None:
    gemini = apis.get("gemini")
    body = gemini.conversation("m", [{"role": "user", "parts": [
        {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]}], {})
    with pytest.raises(ApiFeatureError):
        convert_body(body, gemini, apis.get("chat_completions"))
