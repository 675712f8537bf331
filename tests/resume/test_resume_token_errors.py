"""A resume token comes back from somewhere else (a database, a browser, another worker), so a
damaged or foreign one is bad input: it gets one typed error, ``ResumeTokenError`` (a
``FluxstreamError`` and a ``ValueError``), never an ``AttributeError`` or ``KeyError`` from
deep inside the parser: ``offsets`` of the wrong shape once crashed ``restore()`` in every
format, so each format is checked with every malformed field."""

from __future__ import annotations

from typing import Any

import pytest

import fluxstream
from fluxstream import StreamParser
from fluxstream.errors import FluxstreamError, ResumeTokenError

FORMATS = ["chat_completions", "responses", "anthropic_messages", "gemini", "auto"]


def good_token(fmt: str) -> dict[str, Any]:
    parser = StreamParser(format="chat_completions")
    parser.feed(
        b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    )
    return {
        "version": 1, "key": parser.content_key, "path": "chat/completions",
        "body": {"model": "m", "messages": []}, "offsets": parser.offsets(),
        "reply": parser.reply.model_dump(mode="json"), "wire": parser.wire_state(),
    }


DAMAGE: dict[str, Any] = {
    "offsets-not-a-mapping": {"offsets": [1, 2]},
    "offsets-choice-a-list": {"offsets": {"0": []}},
    "offsets-tool-calls-a-mapping": {"offsets": {"0": {"tool_calls": {"a": 1}}}},
    "offsets-text-a-string": {"offsets": {"0": {"text": "many"}}},
    "offsets-choice-not-a-number": {"offsets": {"x": {"text": 1}}},
    "offsets-text-past-any-int-str": {"offsets": {"0": {"text": 10**5000}}},
    "offsets-text-negative": {"offsets": {"0": {"text": -1}}},
    "reply-a-list": {"reply": [1]},
    "reply-choices-junk": {"reply": {"choices": "abc"}},
    "no-key": {"key": None},
    "wire-junk": {"wire": {"blocks": "junk", "parts": 7}},
}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("damage", list(DAMAGE), ids=list(DAMAGE))
def test_a_damaged_token_gets_one_typed_error(fmt: str, damage: str) -> None:
    token = good_token(fmt)
    for name, value in DAMAGE[damage].items():
        if value is None:
            del token[name]
        else:
            token[name] = value
    try:
        parser = StreamParser.from_token(token, format=fmt)
    except ResumeTokenError as exc:
        assert isinstance(exc, FluxstreamError) and isinstance(exc, ValueError)
        return
    # What a format can take safely it may take; the parser must then work.
    parser.feed(b'data: {"choices":[{"index":0,"delta":{"content":"!"}}]}\n\n')
    parser.close()


def test_a_good_token_still_resumes() -> None:
    parser = StreamParser.from_token(good_token("chat_completions"))
    events = parser.feed(b'data: {"choices":[{"index":0,"delta":{"content":"!"}}]}\n\n')
    assert [getattr(e, "offset", None) for e in events][:1] == [2]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "token",
    [None, [], "token", {"version": 1}, {"version": 99, "key": "k", "body": {}},
     {"version": 1, "key": "k", "body": "not a body"}],
    ids=["none", "list", "string", "no-key-no-body", "version", "body-a-string"],
)
async def test_client_resume_refuses_a_foreign_token_with_the_typed_error(token: Any) -> None:
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-test")
    try:
        for resume in (client.chat.resume, client.responses.resume, client.messages.resume):
            with pytest.raises(ResumeTokenError):
                resume(token)
    finally:
        await client.aclose()
