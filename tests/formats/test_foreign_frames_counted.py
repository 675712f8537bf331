"""A stream read in the wrong format says so: every frame of another format is a skipped,
counted frame (never dropped uncounted), and nothing of it is taken for the reply (an
Anthropic ``message_delta``'s ``usage`` is not Chat Completions usage)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixture_files import chat_stream
from sse_frames import frames

from fluxstream._events import SkippedFrame
from fluxstream._parser import StreamParser
from fluxstream.formats.auto import identify
from fluxstream.sse import SSEDecoder

STREAMS = {
    "chat_completions": chat_stream("cc-openai-py-basic-text"),
    "responses": chat_stream("resp-vercel-azure-function-call"),
    "anthropic_messages": chat_stream("anth-vercel-message-delta-input-tokens"),
}
PAIRS = [(fmt, asked) for fmt in STREAMS for asked in STREAMS if fmt != asked]


def foreign_frames(path: Path, asked: str) -> int:
    """Frames that name a format other than ``asked`` (keep-alives and errors name none;
    ``[DONE]``, which harnesses append to any stream, ends every format)."""
    decoder = SSEDecoder()
    events = [*decoder.feed(path.read_bytes()), *decoder.close()]
    return sum(1 for sse in events
               if sse.data.strip() != "[DONE]" and identify(sse) not in (None, asked))


@pytest.mark.parametrize(("fmt", "asked"), PAIRS, ids=[f"{f}-as-{a}" for f, a in PAIRS])
def test_every_frame_of_another_format_is_counted(fmt: str, asked: str) -> None:
    path = STREAMS[fmt]
    parser = StreamParser(format=asked)
    events = parser.feed(path.read_bytes()) + parser.close()
    reply = parser.reply
    expected = foreign_frames(path, asked)
    assert expected > 0
    assert reply.skipped_frames == expected
    assert sum(isinstance(e, SkippedFrame) for e in events) == expected
    assert reply.text == "" and reply.usage is None  # nothing read from a foreign frame
    assert all(not c.tool_calls for c in reply.choices)


def test_anthropic_usage_is_not_read_as_chat_usage() -> None:
    body = frames({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                   "usage": {"output_tokens": 12}}, {"type": "message_stop"}, named=True)
    parser = StreamParser(format="chat_completions")
    parser.feed(body)
    parser.close()
    assert parser.reply.usage is None and parser.reply.skipped_frames == 2


def test_a_typed_error_payload_is_still_the_chat_reply_error() -> None:
    """An error is never "another format": a flat ``{"type": "error", "message": ...}`` (as a
    bridge may send it to a Chat Completions client) is the reply's error, not skipped."""
    parser = StreamParser(format="chat_completions")
    parser.feed(b'data: {"type": "error", "message": "quota exceeded", "code": "429"}\n\n')
    parser.close()
    reply = parser.reply
    assert reply.error is not None and reply.error.message == "quota exceeded"
    assert reply.skipped_frames == 0 and reply.outcome.value == "failed"
