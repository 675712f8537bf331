"""The embedded server's Responses (``/v1/responses``) and Anthropic Messages (``/v1/messages``)
endpoints, checked on the wire with the independent SSE parser of ``test_server_support``:
event names and order, ``sequence_number``, no ``[DONE]``, keys and error shapes, background
responses resumed by ``GET ... ?stream=true&starting_after=N``, prefill continuation, the
schema-shaped JSON of structured output, and that the renderers stay small one-way modules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field
from test_server_support import Event, parse_sse

from fluxstream.server import (
    ServerThread,
    build_script,
    from_messages,
    from_responses,
    script_for,
)
from fluxstream.server.schema_value import schema_value
from fluxstream.server.script import json_pieces

USER = [{"role": "user", "content": "Weather in Zürich?"}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}]
ANTH_TOOLS = [{"name": "get_weather", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"]}}]


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.base_url, timeout=10) as client:
        yield client


def _events(response: httpx.Response) -> list[Event]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    parsed = parse_sse(response.content)
    assert not parsed.partial
    return parsed.events


def _payloads(events: list[Event]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        assert event.data is not None
        payload = json.loads(event.data)
        assert event.event == payload["type"]  # the event line names the payload's type
        out.append(payload)
    return out


# ---------------------------------------------------------------------------- Responses


def test_responses_stream_named_events_sequence_numbers_and_no_done(http: httpx.Client) -> None:
    body = {"model": "m", "input": "Hi", "instructions": "be brief", "stream": True}
    payloads = _payloads(_events(http.post("/responses", json=body)))
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    kinds = [p["type"] for p in payloads]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    script = script_for("responses", body)
    deltas = [p["delta"] for p in payloads if p["type"] == "response.output_text.delta"]
    assert tuple(deltas) == script.choices[0].text_deltas
    final = payloads[-1]["response"]
    assert final["status"] == "completed" and final["id"].startswith("resp_")
    assert final["output"][0]["content"][0]["text"] == "".join(deltas)
    usage = final["usage"]
    assert usage["output_tokens"] == len(deltas) == 30
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_responses_non_streaming_equals_the_streamed_final_object(http: httpx.Client) -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "Hi"}], "tools": RESP_TOOLS,
            "reasoning": {"effort": "low"}}
    whole = http.post("/responses", json=body).json()
    streamed = _payloads(_events(http.post("/responses", json={**body, "stream": True})))
    assert streamed[-1]["response"] == whole
    kinds = [item["type"] for item in whole["output"]]
    assert kinds == ["reasoning", "function_call"]
    call = whole["output"][1]
    assert json.loads(call["arguments"]) == {"city": "Zürich", "days": 1}
    assert call["call_id"].startswith("call_")
    fragments = "".join(p["delta"] for p in streamed
                        if p["type"] == "response.function_call_arguments.delta")
    assert fragments == call["arguments"]


def test_responses_max_output_tokens_is_incomplete(http: httpx.Client) -> None:
    body = {"model": "m", "input": "Hi", "max_output_tokens": 4, "stream": True}
    payloads = _payloads(_events(http.post("/responses", json=body)))
    final = payloads[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert sum(p["type"] == "response.output_text.delta" for p in payloads) == 4


def test_responses_error_midstream(http: httpx.Client) -> None:
    body = {"model": "m@error-midstream", "input": "Hi", "stream": True}
    payloads = _payloads(_events(http.post("/responses", json=body)))
    assert payloads[-1]["type"] == "error" and payloads[-1]["code"] == "internal_error"
    assert sum(p["type"] == "response.output_text.delta" for p in payloads) == 15
    done = _payloads(_events(http.post(
        "/responses", json={**body, "model": "m@error-midstream-done"})))
    assert [p["type"] for p in done[-2:]] == ["error", "response.failed"]


def test_background_response_resumes_with_starting_after(http: httpx.Client) -> None:
    body = {"model": "m", "input": "Hi", "stream": True, "background": True}
    with pytest.raises(httpx.RemoteProtocolError):  # cut mid-event, after 9 whole events
        http.post("/responses", json=body, headers={"X-Fluxstream-Fault": "drop-after-events=9"})
    whole = _payloads(_events(http.post("/responses", json={**body, "background": True})))
    rid = whole[0]["response"]["id"]
    assert whole[0]["response"]["background"] is True
    rest = _payloads(_events(http.get(f"/responses/{rid}",
                                      params={"stream": "true", "starting_after": 8})))
    assert [p["sequence_number"] for p in rest] == list(range(9, len(whole)))
    assert rest == whole[9:]
    everything = _payloads(_events(http.get(f"/responses/{rid}", params={"stream": "true"})))
    assert everything == whole
    final = http.get(f"/responses/{rid}").json()
    assert final == whole[-1]["response"]


def test_get_response_errors(http: httpx.Client) -> None:
    missing = http.get("/responses/resp_nope", params={"stream": "true"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    http.post("/responses", json={"model": "m", "input": "x", "background": True})
    rid = http.post("/responses", json={"model": "m", "input": "x", "background": True}).json()
    bad = http.get(f"/responses/{rid['id']}", params={"stream": "true", "starting_after": "x"})
    assert bad.status_code == 400
    assert http.post(f"/responses/{rid['id']}").status_code == 405
    not_stored = http.post("/responses", json={"model": "m", "input": "y"}).json()
    assert http.get(f"/responses/{not_stored['id']}").status_code == 404
    assert http.post("/responses", json={"model": "m"}).status_code == 400


def test_responses_sse_ids_profile_resumes_by_last_event_id(http: httpx.Client) -> None:
    body = {"model": "m@sse-ids", "input": "Hi", "stream": True}
    events = _events(http.post("/responses", json=body))
    assert [e.id for e in events] == [str(i) for i in range(len(events))]
    rest = _events(http.post("/responses", json=body, headers={"Last-Event-ID": "5"}))
    assert rest == events[6:]


# ---------------------------------------------------------------------------- Messages


def test_messages_stream_event_order_usage_and_ping(http: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 1024, "messages": USER, "stream": True}
    payloads = _payloads(_events(http.post("/messages", json=body)))
    kinds = [p["type"] for p in payloads]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) == {"content_block_delta"}
    text = "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert text == script_for("messages", body).choices[0].text
    start = payloads[0]["message"]
    assert start["id"].startswith("msg_") and start["usage"]["output_tokens"] == 1
    delta = payloads[-2]
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == 30
    assert "[DONE]" not in http.post("/messages", json=body).text


def test_messages_tool_use_thinking_and_json(http: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 1024, "messages": USER, "tools": ANTH_TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 1024}}
    whole = http.post("/messages", json=body).json()
    assert [b["type"] for b in whole["content"]] == ["thinking", "tool_use"]
    assert whole["stop_reason"] == "tool_use"
    assert whole["content"][1]["input"] == {"city": "Zürich", "days": 1}
    assert whole["content"][1]["id"].startswith("toolu_")
    payloads = _payloads(_events(http.post("/messages", json={**body, "stream": True})))
    deltas = [p["delta"] for p in payloads if p["type"] == "content_block_delta"]
    assert {d["type"] for d in deltas} == {"thinking_delta", "signature_delta",
                                           "input_json_delta"}
    arguments = "".join(d["partial_json"] for d in deltas if d["type"] == "input_json_delta")
    assert json.loads(arguments) == whole["content"][1]["input"]
    thinking = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
    assert thinking == whole["content"][0]["thinking"]


def test_messages_max_tokens_cut_says_max_tokens(http: httpx.Client) -> None:
    body = {"model": "m", "max_tokens": 3, "messages": USER}
    whole = http.post("/messages", json=body).json()
    assert whole["stop_reason"] == "max_tokens"
    assert whole["content"][0]["text"] == "Hello — or"


def test_messages_prefill_is_continued(http: httpx.Client) -> None:
    original = {"model": "m", "max_tokens": 1024, "messages": USER}
    text = script_for("messages", original).choices[0].text
    prefill = text[:20]
    body = {**original, "messages": [*USER, {"role": "assistant", "content": prefill}],
            "stream": True}
    response = http.post("/messages", json=body)
    assert response.headers["x-fluxstream-continuation"] == "continued"
    payloads = _payloads(_events(response))
    rest = "".join(p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta")
    assert prefill + rest == text
    assert payloads[0]["message"]["id"] == http.post("/messages", json=original).json()["id"]


def test_messages_prefill_ending_in_whitespace_is_refused(http: httpx.Client) -> None:
    """As Anthropic does: "final assistant content cannot end with trailing whitespace"."""
    for prefill in ("Hello — or 你好 — from fluxstream 👋🏽\n", "Hello ", "Hi\t"):
        body = {"model": "m", "max_tokens": 1024, "stream": True,
                "messages": [*USER, {"role": "assistant", "content": prefill}]}
        refused = http.post("/messages", json=body)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert "trailing whitespace" in refused.json()["error"]["message"]


def test_messages_heartbeats_are_ping_events(http: httpx.Client) -> None:
    body = {"model": "m@heartbeats", "max_tokens": 1024, "messages": USER, "stream": True}
    response = http.post("/messages", json=body)
    parsed = parse_sse(response.content)
    assert parsed.comments == []
    pings = [e for e in parsed.events if e.event == "ping"]
    others = len(parsed.events) - len(pings)
    # One before every event but the first (ping included), and Anthropic's own after the start.
    assert len(pings) == others + 1


def test_messages_error_midstream_is_an_anthropic_error_event(http: httpx.Client) -> None:
    body = {"model": "m@error-midstream", "max_tokens": 1024, "messages": USER, "stream": True}
    payloads = _payloads(_events(http.post("/messages", json=body)))
    assert payloads[-1] == {"type": "error",
                            "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_messages_errors_are_anthropic_shaped(http: httpx.Client) -> None:
    bad = http.post("/messages", json={"model": "m", "messages": USER})  # no max_tokens
    assert bad.status_code == 400
    assert bad.json()["type"] == "error"
    assert bad.json()["error"]["type"] == "invalid_request_error"
    busy = http.post("/messages", json={"model": "m", "max_tokens": 5, "messages": USER},
                     headers={"X-Fluxstream-Fault": "status=529"})
    assert busy.status_code == 529
    assert busy.json() == {"type": "error",
                           "error": {"type": "overloaded_error", "message": "Overloaded"}}
    limited = http.post("/messages", json={"model": "m", "max_tokens": 5, "messages": USER},
                        headers={"X-Fluxstream-Fault": "status=429"})
    assert limited.json()["error"]["type"] == "rate_limit_error"
    missing = http.post("/messages/nope", json={})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_messages_key_is_x_api_key_or_bearer(server_factory: Any) -> None:
    running = server_factory(api_key="sk-ant-test")
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    with httpx.Client(base_url=running.base_url, timeout=10) as http:
        assert http.post("/messages", json=body).status_code == 401
        wrong = http.post("/messages", json=body, headers={"x-api-key": "sk-ant-wrong"})
        assert wrong.status_code == 401
        assert wrong.json()["error"]["type"] == "authentication_error"
        assert "sk-ant-wrong" not in wrong.text
        assert http.post("/messages", json=body,
                         headers={"x-api-key": "sk-ant-test"}).status_code == 200
        assert http.post("/messages", json=body,
                         headers={"Authorization": "Bearer sk-ant-test"}).status_code == 200
        # Responses authenticate like chat: Bearer only.
        responses = {"model": "m", "input": "x"}
        assert http.post("/responses", json=responses,
                         headers={"x-api-key": "sk-ant-test"}).status_code == 401
        assert http.post("/responses", json=responses,
                         headers={"Authorization": "Bearer sk-ant-test"}).status_code == 200
    recorded = [dict(r.headers).get("x-api-key") for r in running.records.requests]
    assert "sk-ant-test" not in recorded and "<redacted>" in recorded


# ---------------------------------------------------------------------------- dialects


def test_dialects_translate_to_the_chat_request() -> None:
    chat = from_responses({
        "model": "m", "instructions": "sys", "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "max_output_tokens": 7, "reasoning": {"effort": "high"}, "tools": RESP_TOOLS,
        "tool_choice": {"type": "function", "name": "get_weather"},
        "text": {"format": {"type": "json_schema", "name": "X", "schema": {"type": "object"}}},
    })
    assert chat["messages"] == [{"role": "system", "content": "sys"},
                                {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert chat["max_tokens"] == 7 and chat["reasoning_effort"] == "high"
    assert chat["tools"][0]["function"]["name"] == "get_weather"
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["response_format"]["json_schema"]["schema"] == {"type": "object"}
    anth = from_messages({
        "model": "m", "system": "sys", "max_tokens": 9, "tools": ANTH_TOOLS,
        "messages": [*USER, {"role": "assistant", "content": "Hel"}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    })
    assert anth["messages"][-1] == {"role": "assistant", "content": "Hel", "prefix": True}
    assert anth["tool_choice"] == "required" and anth["parallel_tool_calls"] is False
    assert anth["tools"][0]["function"]["parameters"] == ANTH_TOOLS[0]["input_schema"]
    # Only a trailing assistant message after something else is a prefill.
    lone = from_messages({"model": "m", "max_tokens": 9,
                          "messages": [{"role": "assistant", "content": "x"}]})
    assert "prefix" not in lone["messages"][-1]


def test_a_cap_never_lengthens_and_cut_is_length() -> None:
    chat = {"model": "m", "messages": USER, "max_tokens": 100}
    capped = build_script(chat).choices[0]
    assert len(capped.text_deltas) == 30 and capped.finish_reason == "stop"
    filled = build_script(chat, "fill-max-tokens").choices[0]  # asked for by name: goes on
    assert len(filled.text_deltas) == 100 and filled.finish_reason == "stop"
    short = build_script({**chat, "max_tokens": 5}).choices[0]
    assert len(short.text_deltas) == 5 and short.finish_reason == "length"
    assert build_script({**chat, "max_tokens": 30}).choices[0].finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_reply_cut_by_max_tokens_says_length_in_every_format(
    http: httpx.Client, stream: bool
) -> None:
    """The same request cut at 5 tokens: Chat Completions said ``stop`` where Responses
    and Messages said the reply was cut, so a client could not tell a cut reply from a whole
    one on the default API."""
    chat = {"model": "m", "messages": USER, "max_tokens": 5, "stream": stream}
    responses = {"model": "m", "input": "hi", "max_output_tokens": 5, "stream": stream}
    messages = {"model": "m", "messages": USER, "max_tokens": 5, "stream": stream}
    if stream:
        chunks = [json.loads(e.data or "") for e in _events(http.post("/chat/completions",
                                                                      json=chat))
                  if e.data != "[DONE]"]
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
        chat_finish = next(f for f in finishes if f is not None)
        last = _payloads(_events(http.post("/responses", json=responses)))[-1]["response"]
        deltas = [e for e in _payloads(_events(http.post("/messages", json=messages)))
                  if e["type"] == "message_delta"]
        anthropic_stop = deltas[-1]["delta"]["stop_reason"]
    else:
        chat_finish = http.post("/chat/completions", json=chat).json()["choices"][0][
            "finish_reason"]
        last = http.post("/responses", json=responses).json()
        anthropic_stop = http.post("/messages", json=messages).json()["stop_reason"]
    assert chat_finish == "length"
    assert (last["status"], last["incomplete_details"]) == (
        "incomplete", {"reason": "max_output_tokens"})
    assert anthropic_stop == "max_tokens"


# ---------------------------------------------------------------------------- schema values


class Address(BaseModel):
    street: str
    city: str
    country: str | None = None


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)
    height: float
    tags: list[str]
    home: Address
    previous: list[Address]
    nickname: str | None
    role: str = Field(json_schema_extra={"enum": ["admin", "user"]})
    active: bool


class Tree(BaseModel):
    label: str
    children: list[Tree]


def test_schema_value_fits_the_schema_and_is_deterministic() -> None:
    schema = Person.model_json_schema()
    values = [schema_value(schema, seed=seed) for seed in range(4)]
    for value in values:
        Person.model_validate(value)  # every required field, nested $refs, ranges
        assert len(value["tags"]) == 3 and len(value["previous"]) == 3
    assert values[0] == schema_value(schema, seed=0)
    assert values[0] != values[1]
    assert {values[0]["nickname"] is None, values[1]["nickname"] is None} == {True, False}
    text = json.dumps(values[0], ensure_ascii=False)
    assert any(ord(ch) > 0x7F for ch in text)
    assert values[0]["role"] in ("admin", "user")


def test_schema_value_recursion_and_size_are_bounded() -> None:
    value = schema_value(Tree.model_json_schema())
    tree = Tree.model_validate(value)

    def depth(node: Tree) -> int:
        return 1 + max((depth(c) for c in node.children), default=0)

    assert 2 <= depth(tree) <= 6
    huge = {"type": "array", "items": {"type": "array", "items": {"type": "array", "items": {
        "type": "array", "items": {"type": "array", "items": {"type": "string"}}}}}}
    assert len(json.dumps(schema_value(huge))) < 100_000
    loop = {"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}
    assert isinstance(schema_value(loop), str)  # a ref loop ends, as a string


def test_json_pieces_are_small_and_rejoin() -> None:
    text = json.dumps(schema_value(Person.model_json_schema()), ensure_ascii=False)
    pieces = json_pieces(text)
    assert "".join(pieces) == text and max(map(len, pieces)) <= 7 and len(pieces) > 20


def test_structured_content_for_each_api(http: httpx.Client) -> None:
    schema = Person.model_json_schema()
    chat = http.post("/chat/completions", json={
        "model": "m", "messages": USER,
        "response_format": {"type": "json_schema", "json_schema": {"name": "P",
                                                                   "schema": schema}}}).json()
    person = Person.model_validate_json(chat["choices"][0]["message"]["content"])
    responses = http.post("/responses", json={
        "model": "m", "input": "x",
        "text": {"format": {"type": "json_schema", "name": "P", "schema": schema}}}).json()
    assert Person.model_validate_json(responses["output"][0]["content"][0]["text"]) == person
    messages = http.post("/messages", json={
        "model": "m", "max_tokens": 1024, "messages": USER,
        "tools": [{"name": "P", "input_schema": schema}],
        "tool_choice": {"type": "tool", "name": "P"}}).json()
    assert [b["type"] for b in messages["content"]] == ["tool_use"]
    assert Person.model_validate(messages["content"][0]["input"]) == person


def test_structured_content_cut_by_max_tokens_is_length(http: httpx.Client) -> None:
    schema = Person.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "P", "schema": schema}}
    chat = http.post("/chat/completions", json={
        "model": "m", "messages": USER, "response_format": fmt, "max_tokens": 10}).json()
    assert chat["choices"][0]["finish_reason"] == "length"
    content = chat["choices"][0]["message"]["content"]
    assert content.startswith('{"name":') and len(json_pieces(content)) <= 10
    forced = http.post("/messages", json={
        "model": "m", "max_tokens": 6, "messages": USER,
        "tools": [{"name": "P", "input_schema": schema}],
        "tool_choice": {"type": "tool", "name": "P"}, "stream": True})
    payloads = _payloads(_events(forced))
    assert payloads[-2]["delta"]["stop_reason"] == "max_tokens"
    parts = [p["delta"]["partial_json"] for p in payloads if p["type"] == "content_block_delta"]
    assert len(parts) == 6


# ---------------------------------------------------------------------------- structure


def test_renderers_import_one_way() -> None:
    """Content never asks how it is rendered: the script, the dialects and the schema values
    import no renderer and not the app; the renderers import no other renderer."""
    from test_server_script import _server_imports

    graph = _server_imports()
    renderers = {"render", "render_responses", "render_messages"}
    for name in ("script", "content", "schema_value", "dialects"):
        assert not graph[name] & (renderers | {"app", "connection"}), name
    assert graph["render_responses"] & renderers == {"render"}
    assert graph["render_messages"] & renderers == {"render"}
    # The dialect table composes the renderers, which translate with the dialects (this also
    # shows that the graph sees the imports at all).
    assert {"render", "render_responses", "render_messages"} <= graph["dialect_table"]
    assert "dialects" in graph["render_responses"] & graph["render_messages"]
