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


def test_a_chat_request_asks_for_the_usage_and_keeps_its_other_stream_options() -> None:
    """Failover asks a Chat Completions fallback for its usage chunk (a segment's usage),
    which Chat servers send only when asked."""
    chat = apis.get("chat_completions")
    body = chat.conversation("m", [{"role": "user", "content": "x"}], {})
    chat.ask_usage(body)
    assert body["stream_options"] == {"include_usage": True}
    body["stream_options"] = {"continuous_usage_stats": True}
    chat.ask_usage(body)
    assert body["stream_options"] == {"continuous_usage_stats": True, "include_usage": True}


@pytest.mark.parametrize("source", NAMES)
@pytest.mark.parametrize("target", ["gemini", "anthropic_messages", "responses"])
def test_no_api_without_stream_options_is_sent_them(source: str, target: str) -> None:
    converted = convert_body(build(source), apis.get(source), apis.get(target))
    apis.get(target).ask_usage(converted)
    assert "stream_options" not in converted


def test_each_api_declares_its_tools_its_own_way() -> None:
    """A tool written another API's way is not taken for a function (it used to be read
    whatever the request's API): Anthropic's ``input_schema`` is no Chat tool's schema."""
    chat = apis.get("chat_completions")
    anthropic = apis.get("anthropic_messages")
    foreign = {"model": "m", "messages": [{"role": "user", "content": "x"}],
               "tools": [{"type": "function", "function": {"name": "f"}}]}
    with pytest.raises(ApiFeatureError, match="named function"):
        convert_body(foreign, anthropic, chat)
    assert convert_body(foreign, chat, anthropic)["tools"] == [
        {"name": "f", "input_schema": {"type": "object"}}]


@pytest.mark.parametrize("source", NAMES)
@pytest.mark.parametrize("target", NAMES)
def test_a_tools_description_reaches_every_api(source: str, target: str) -> None:
    """The model chooses a tool by its description: Anthropic's and Responses' tools used to
    be sent without it."""
    converted = convert_body(build(source), apis.get(source), apis.get(target))
    chat = read_back(target, converted)
    assert [t["function"] for t in chat["tools"]] == [TOOL]
