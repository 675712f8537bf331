"""The server's dialect table: each API one entry, named by the API's one name, and the
answer functions it routes to, checked without a socket.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from fluxstream.formats import FORMATS
from fluxstream.server import build_script, from_messages, script_for
from fluxstream.server.answers import Call, EventStream, Memory, Payload, Refusal
from fluxstream.server.dialect_table import (
    DEFAULT_DIALECT,
    DIALECTS,
    dialect_of,
    find_route,
)
from fluxstream.server.error_shapes import ANTHROPIC_ERRORS, OPENAI_ERRORS

USER = [{"role": "user", "content": "Hi"}]


def call(path: str, body: Any, *, method: str = "POST", names: frozenset[str] = frozenset(),
         memory: Memory | None = None, query: str = "") -> Call:
    """``body`` sent to ``path``, with the match of the route it reaches."""
    found = find_route(path)
    assert found is not None, path
    return Call(method, path, query, (), body, names, memory or Memory(4), found[1])


def answer(request: Call) -> Any:
    found = find_route(request.path)
    assert found is not None
    return found[0].answer(request)


def test_dialects_are_named_by_the_apis_one_names() -> None:
    """The server's dialect names are the format names (and so the CLI's ``--format``): a
    test goes from a format to the server's dialect without a mapping."""
    assert set(DIALECTS) == set(FORMATS) - {"auto"}
    assert all(name == dialect.name for name, dialect in DIALECTS.items())


def test_each_dialect_owns_the_paths_it_routes() -> None:
    """A refusal on a route is worded by the dialect that owns the route's path (and so a
    route added to an entry is also checked with the entry's key rule)."""
    for dialect in DIALECTS.values():
        for route in dialect.routes:
            path = route.path.pattern.replace("(?:/v1)?", "/v1").replace(
                "([A-Za-z0-9_-]{1,128})", "resp_1")
            for sample in GEMINI_PATHS if dialect.name == "gemini" else (path,):
                assert route.path.fullmatch(sample), sample
                owner = dialect_of(sample)
                assert owner is dialect or (
                    owner is DEFAULT_DIALECT and dialect is DEFAULT_DIALECT)


#: Gemini's route is a pattern with the model inside: its paths, written out.
GEMINI_PATHS = (
    "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
    "/v1/models/gemini-2.5-flash:streamGenerateContent",
    "/v1beta/models/gemini-2.5-flash:generateContent",
    "/v1/projects/p/locations/us-central1/publishers/google/models/g:streamGenerateContent",
)


def test_paths_no_api_owns_are_answered_as_openai_would() -> None:
    assert dialect_of("/v1/models") is DEFAULT_DIALECT
    assert dialect_of("/v1/nothing") is DEFAULT_DIALECT
    assert dialect_of("/v1/messagesX") is DEFAULT_DIALECT
    assert dialect_of("/messages/count_tokens").name == "anthropic_messages"
    assert dialect_of("/v1/responses/resp_1/cancel").name == "responses"
    assert DIALECTS["anthropic_messages"].errors is ANTHROPIC_ERRORS
    assert DIALECTS["responses"].errors is OPENAI_ERRORS


def test_routes_accept_the_root_and_v1_paths_only() -> None:
    for path in ("/v1/chat/completions", "/chat/completions", "/v1/responses", "/messages",
                 "/v1/models", "/responses/resp_abc"):
        assert find_route(path) is not None, path
    for path in ("/v2/chat/completions", "/v1/chat/completions/", "/v1/responses/a/b",
                 "/v1/responses/" + "x" * 129):
        assert find_route(path) is None, path


def test_script_for_takes_the_one_names_and_the_older_ones() -> None:
    body = {"model": "m", "max_tokens": 5, "messages": USER}
    assert script_for("anthropic_messages", body) == script_for("messages", body)
    assert script_for("chat_completions", body) == script_for("chat", body)
    assert script_for("messages", body) == build_script(from_messages(body))
    responses = {"model": "m", "input": "Hi"}
    assert script_for("responses", responses).choices[0].text


def test_script_for_refuses_an_unknown_api() -> None:
    """No fallback to the chat script: a typo (``"message"``) would compare a Messages
    reply with a chat script and fail (or pass) for the wrong reason."""
    with pytest.raises(ValueError, match="unknown API 'message'"):
        script_for("message", {"model": "m", "messages": USER})


def test_answer_functions_decide_without_a_socket() -> None:
    chat = answer(call("/v1/chat/completions", {"model": "m", "messages": USER, "stream": True}))
    assert isinstance(chat, EventStream) and chat.retry is not None
    assert chat.events[-1].data == "[DONE]"
    whole = answer(call("/chat/completions", {"model": "m", "messages": USER}))
    assert isinstance(whole, Payload) and json.loads(whole.body)["object"] == "chat.completion"
    refused = answer(call("/v1/messages", {"model": "m", "messages": USER}))
    assert isinstance(refused, Refusal) and refused.status == 400
    streamed = answer(call("/v1/messages", {"model": "m", "max_tokens": 9, "messages": USER,
                                            "stream": True}))
    assert isinstance(streamed, EventStream) and streamed.keepalive is not None
    json_profile = answer(call("/v1/messages", {"model": "m", "max_tokens": 9, "messages": USER,
                                                "stream": True}, names=frozenset({"json"})))
    assert isinstance(json_profile, Payload)


def test_a_background_response_is_kept_in_the_servers_memory() -> None:
    memory = Memory(2)
    body = {"model": "m", "input": "Hi", "background": True, "stream": True}
    streamed = answer(call("/v1/responses", body, memory=memory))
    assert isinstance(streamed, EventStream)
    rid = json.loads(streamed.events[0].data)["response"]["id"]
    again = answer(call(f"/v1/responses/{rid}", None, method="GET", memory=memory,
                        query="stream=true&starting_after=2"))
    assert isinstance(again, EventStream)
    assert [json.loads(e.data)["sequence_number"] for e in again.events] == [
        json.loads(e.data)["sequence_number"] for e in streamed.events[3:]]
    missing = answer(call("/v1/responses/resp_none", None, method="GET", memory=memory))
    assert isinstance(missing, Refusal) and (missing.status, missing.code) == (404, "not_found")


def test_memory_drops_the_oldest_past_its_limit() -> None:
    memory = Memory(2)
    for key in ("a", "b", "b", "c"):
        memory.put(key, key)
    assert (memory.get("a"), memory.get("b"), memory.get("c")) == (None, "b", "c")


@pytest.mark.parametrize("status", [400, 401, 404, 413, 429, 500, 503, 529])
def test_error_shapes(status: int) -> None:
    openai = json.loads(OPENAI_ERRORS.body(status, "no", "some_code"))
    assert openai["error"]["message"] == "no" and openai["error"]["code"] == "some_code"
    anthropic = json.loads(ANTHROPIC_ERRORS.body(status, "no", "some_code"))
    assert anthropic["type"] == "error" and anthropic["error"]["message"] == "no"
    assert re.fullmatch(r"[a-z_]+_error|request_too_large", anthropic["error"]["type"])
    assert "code" not in anthropic["error"]
