"""Resume tokens built sans-IO, exactly as a stream builds one, for the format tests.

:func:`token` is what ``ReplyStream.resume_token()`` carries (request fields left out), passed
through JSON; :func:`resumed` reads the rest of a recorded stream with a parser made from it
(a ``Last-Event-ID`` resume), so a test can compare it with reading the stream in one go.
"""

from __future__ import annotations

import json
from typing import Any

from fixture_files import chat_streams

from fluxstream._parser import StreamParser
from fluxstream._reply import Reply

RESP = chat_streams("resp-")
ANTH = chat_streams("anth-")


def frames(body: bytes) -> list[bytes]:
    return [f + b"\n\n" for f in body.replace(b"\r\n", b"\n").split(b"\n\n") if f.strip()]


def token(parser: StreamParser) -> dict[str, Any]:
    """What ``ReplyStream.resume_token()`` carries (request fields left out), through JSON."""
    value = {
        "key": parser.content_key,
        "last_event_id": parser.last_event_id or None,
        "reconnection_time": parser.reconnection_time,
        "response_id": parser.response_id,
        "sequence": parser.sequence,
        "offsets": parser.offsets(),
        "wire": parser.wire_state(),
        "reply": parser.reply.model_dump(mode="json"),
    }
    loaded: dict[str, Any] = json.loads(json.dumps(value))
    return loaded


def content(reply: Reply) -> Any:
    return [
        (c.text, c.reasoning, c.refusal, c.finish_reason,
         [(t.index, t.id, t.name, t.arguments) for t in c.tool_calls])
        for c in reply.choices
    ], reply.outcome, reply.error and reply.error.message


def read(pieces: list[bytes], fmt: str) -> Reply:
    parser = StreamParser(content_key="k", format=fmt)
    for piece in pieces:
        parser.feed(piece)
    parser.close()
    return parser.reply


def resumed(pieces: list[bytes], cut: int, fmt: str) -> Reply | None:
    """The reply of a token taken after ``cut`` frames and resumed with the rest (``None``
    when the stream had ended by then: nothing to resume)."""
    first = StreamParser(content_key="k", format=fmt)
    for piece in pieces[:cut]:
        first.feed(piece)
    if first.finished or first.done:
        return None
    second = StreamParser.from_token(token(first), format=fmt)
    for piece in pieces[cut:]:
        second.feed(piece)
    second.close()
    return second.reply
