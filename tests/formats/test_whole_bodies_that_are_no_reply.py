"""A whole (non-streamed) body is read as a reply only when it is one.

A base URL missing its API prefix lands on a catch-all route that answers 200 with something
like ``{"method": "POST", "path": ..., "client": ...}``; read as a reply it gave outcome
``done`` and text ``''`` in every format. Each format now reads a whole body only when it is
its reply object (``choices``, ``output``, a ``message``, ``candidates``...) or an error
object; anything else ends ``failed``, with an error saying what the body is not. A real
non-streamed reply, and an error body, are read as before.
"""

from __future__ import annotations

from typing import Any

import pytest

from fluxstream import Outcome
from fluxstream._parser import StreamParser
from fluxstream.formats import FORMATS

NAMED = [name for name in FORMATS if name != "auto"]

NOT_REPLIES: list[dict[str, Any]] = [
    {"method": "POST", "path": "/chat/completions", "client": "127.0.0.1"},  # a catch-all
    {"detail": "Not Found"},  # a framework's default answer, at 200 by a proxy
    {"status": "ok"},  # a health route
    {},
]

REPLIES: dict[str, tuple[dict[str, Any], str]] = {
    "chat_completions": ({"object": "chat.completion", "choices": [
        {"index": 0, "message": {"content": "cc"}, "finish_reason": "stop"}]}, "cc"),
    "responses": ({"object": "response", "status": "completed", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "rr"}]}]}, "rr"),
    "anthropic_messages": ({"type": "message", "content": [{"type": "text", "text": "aa"}],
                            "stop_reason": "end_turn"}, "aa"),
    "gemini": ({"candidates": [{"content": {"parts": [{"text": "gg"}]},
                                "finishReason": "STOP"}]}, "gg"),
}

ERRORS: list[dict[str, Any]] = [
    {"error": {"message": "quota exceeded", "type": "insufficient_quota"}},  # OpenAI's
    {"type": "error", "error": {"type": "overloaded_error", "message": "quota exceeded"}},
    {"error": {"code": 429, "message": "quota exceeded", "status": "RESOURCE_EXHAUSTED"}},
]


def read(name: str, body: dict[str, Any]) -> Any:
    parser = StreamParser(format=name)
    parser.feed_completion(body)
    parser.close()
    return parser.reply


@pytest.mark.parametrize("name", [*NAMED, "auto"])
@pytest.mark.parametrize("body", NOT_REPLIES, ids=["catch-all", "detail", "health", "empty"])
def test_a_body_that_is_no_reply_fails(name: str, body: dict[str, Any]) -> None:
    reply = read(name, body)
    assert reply.outcome is Outcome.FAILED, (name, reply.outcome)
    assert reply.text == ""
    assert reply.error is not None and "not a" in reply.error.message and "reply" in (
        reply.error.message
    ), reply.error


@pytest.mark.parametrize("name", NAMED)
def test_a_real_reply_of_each_format_is_read_as_before(name: str) -> None:
    body, text = REPLIES[name]
    for fmt in (name, "auto"):
        reply = read(fmt, body)
        assert (reply.outcome, reply.text) == (Outcome.DONE, text), fmt


@pytest.mark.parametrize("name", [*NAMED, "auto"])
@pytest.mark.parametrize("body", ERRORS, ids=["openai", "anthropic", "gemini"])
def test_an_error_body_is_the_replys_error_in_every_format(
    name: str, body: dict[str, Any]
) -> None:
    reply = read(name, body)
    assert reply.outcome is Outcome.FAILED
    assert reply.error is not None and reply.error.message == "quota exceeded"


@pytest.mark.parametrize("name", NAMED)
def test_each_format_says_which_bodies_it_reads(name: str) -> None:
    """The rule the client checks a whole body by (before it feeds it) is the format's own."""
    cls = FORMATS[name]
    own, _ = REPLIES[name]
    assert cls.reads_body(own)
    assert all(cls.reads_body(error) for error in ERRORS)
    assert not any(cls.reads_body(body) for body in NOT_REPLIES)
    others = [body for other, (body, _) in REPLIES.items() if other != name]
    assert not any(cls.reads_body(body) for body in others), name
