"""The shared SSE builder (``tests/sse_frames.py``) writes exactly the bytes the per-file
``frame()`` helpers it replaced wrote: each expected value below is what one of those helpers
produced for the same input, so a test moved onto the builder still feeds the same bytes."""

from __future__ import annotations

import json

import pytest
from sse_frames import (
    CHAT_FINISH,
    DONE,
    chat_choice,
    chat_chunk,
    chat_frame,
    chat_text,
    frame,
    frames,
)

from fluxstream.sse import SSEDecoder


def test_a_json_object_is_written_as_json_dumps_writes_it() -> None:
    assert frame({"a": [1, None], "b": "é"}) == b'data: {"a": [1, null], "b": "\\u00e9"}\n\n'


def test_a_text_or_bytes_payload_is_sent_as_it_is() -> None:
    raw = '{"content":"a\\ud83d"}'  # an escape a server wrote, kept as it was
    assert frame(raw) == b'data: {"content":"a\\ud83d"}\n\n'
    assert frame(b"[DONE]") == DONE == b"data: [DONE]\n\n"
    assert frame("ü") == "data: ü\n\n".encode()


def test_the_id_comes_before_the_event_name_before_the_data() -> None:
    assert frame({}, "ping", id="7") == b"id: 7\nevent: ping\ndata: {}\n\n"
    assert frame({}, id="0-1") == b"id: 0-1\ndata: {}\n\n"
    assert frame({}, event="error") == b"event: error\ndata: {}\n\n"


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_every_line_ends_with_the_line_ending_given(eol: str) -> None:
    expected = f"event: x{eol}data: 1{eol}{eol}".encode()
    assert frame("1", "x", eol=eol) == expected
    assert frames("1", "2", eol=eol) == f"data: 1{eol}{eol}data: 2{eol}{eol}".encode()


def test_named_events_take_their_type_when_it_is_a_string() -> None:
    body = frames({"type": "message_stop"}, {"type": 5}, {"x": 1}, "[DONE]", named=True)
    assert body == (b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
                    b'data: {"type": 5}\n\ndata: {"x": 1}\n\ndata: [DONE]\n\n')
    assert frames({"type": "ping"}) == b'data: {"type": "ping"}\n\n'


def test_done_ends_the_body_with_the_sentinel_in_its_line_ending() -> None:
    assert frames({"a": 1}, done=True) == b'data: {"a": 1}\n\ndata: [DONE]\n\n'
    assert frames(done=True) == DONE
    assert frames("x", done=True, eol="\r\n") == b"data: x\r\n\r\ndata: [DONE]\r\n\r\n"


def test_the_chat_chunk_of_the_client_tests() -> None:
    assert chat_text("Hel") == (
        b'data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "Hel"}}]}'
        b"\n\n"
    )
    assert chat_text("Hel", "1") == b"id: 1\n" + chat_text("Hel")
    assert CHAT_FINISH == (
        b'data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {}, '
        b'"finish_reason": "stop"}]}\n\n'
    )
    assert chat_frame(usage={"total_tokens": 2}) == (
        b'data: {"id": "c", "model": "m", "choices": [], "usage": {"total_tokens": 2}}\n\n'
    )


def test_the_chat_chunk_as_openai_writes_it() -> None:
    choice = chat_choice("hi", with_finish=True)
    assert chat_frame(choice, id="c1", typed=True) == (
        b'data: {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": '
        b'[{"index": 0, "delta": {"content": "hi"}, "finish_reason": null}]}\n\n'
    )
    assert chat_choice(finish="length", index=2) == {
        "index": 2, "delta": {}, "finish_reason": "length"
    }


def test_chunk_fields_keep_their_place_when_overridden() -> None:
    chunk = chat_chunk(chat_choice("x"), id="c2", model="gpt", usage=None)
    assert list(chunk) == ["id", "model", "choices", "usage"]
    assert chunk["id"] == "c2" and chunk["model"] == "gpt"


def test_what_it_writes_decodes_to_what_it_was_given() -> None:
    payloads = [{"type": "a", "text": "é\n"}, {"b": [1, 2]}, "raw"]
    for eol in ("\n", "\r\n"):
        events = SSEDecoder().feed(frames(*payloads, named=True, eol=eol)
                                   + frame({"c": 3}, "x", id="9", eol=eol))
        assert [e.data for e in events] == [
            json.dumps(payloads[0]), json.dumps(payloads[1]), "raw", '{"c": 3}'
        ]
        assert [e.event for e in events] == ["a", "message", "message", "x"]
        assert events[-1].id == "9"
