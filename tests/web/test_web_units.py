"""The parts of ``fluxstream.web`` without a server: ids read back from any text, the SSE
encoding's bytes, what is not sent to a page, and the response without a framework."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fluxstream
from fluxstream import End, ErrorEvent, Outcome, ReasoningBlock, SkippedFrame, TextDelta
from fluxstream.relay import Position, RelayEvent
from fluxstream.relay.codec import sse_event
from fluxstream.web import SSE, EventIds, EventStreamResponse
from fluxstream.web._ids import IdProblem, Kind

IDS = EventIds.of("reply-key", Kind.FOLLOWED)


@settings(max_examples=300)
@given(st.one_of(
    st.text(max_size=80),
    st.builds(lambda tag, a, b: f"{tag}.{a}-{b}", st.text("0123456789abcdef", max_size=14),
              st.integers(-5, 10**20), st.integers(-5, 10**12)),
))
def test_any_last_event_id_reads_as_a_position_of_this_reply_or_as_a_problem(text: str) -> None:
    read = IDS.read(text)
    assert isinstance(read, (Position, IdProblem))
    if isinstance(read, Position):  # only what this reply's ids could have been
        assert IDS.id_of(read) == text.strip()


def test_ids_name_their_reply_and_kind() -> None:
    position = Position(12, 3)
    assert IDS.read(IDS.id_of(position)) == position
    assert EventIds.of("another", Kind.FOLLOWED).read(IDS.id_of(position)) is IdProblem.OTHER_REPLY
    assert EventIds.of("reply-key", Kind.LIVE).read(IDS.id_of(position)) is IdProblem.OTHER_REPLY
    assert IDS.read("12-3") is IdProblem.MALFORMED  # a bare relay position
    assert IDS.read(IDS.tag + ".0-0") is IdProblem.MALFORMED  # "the start" is no event's id
    assert IDS.read(IDS.tag + ".") is IdProblem.MALFORMED
    assert IDS.read(IDS.tag + ".12-3" + "0" * 60) is IdProblem.MALFORMED
    assert len(IDS.id_of(Position(10**15 - 1, 10**9 - 1))) <= 64


def test_sse_shares_the_relays_bytes_behind_the_tag() -> None:
    item = RelayEvent(Position(4, 1), TextDelta("k", 0, 7, "héllo\n"))
    encoder = SSE(retry=1500).encoder(IDS)
    assert encoder.open() == b"retry: 1500\n\n"
    data = encoder.event(item)
    assert data == b"id: " + IDS.tag.encode() + b"." + sse_event(item)[4:]
    decoded = fluxstream.SSEDecoder().feed(data)
    assert [(e.event, e.id) for e in decoded] == [("text", IDS.id_of(Position(4, 1)))]
    assert json.loads(decoded[0].data) == {
        "key": "k", "choice": 0, "offset": 7, "text": "héllo\n", "type": "text"}
    assert encoder.heartbeat() == b": ping\n\n"
    assert SSE().encoder(IDS).open() == b""


def test_a_page_is_not_sent_raw_provider_data() -> None:
    encoder = SSE().encoder(IDS)
    secret = {"org": "org-internal", "trace": "x" * 100}
    error = encoder.event(RelayEvent(Position(1, 0), ErrorEvent("overloaded", "529", "t", None,
                                                                  secret)))
    assert b"org-internal" not in error
    sent = fluxstream.SSEDecoder().feed(error)[0]
    assert sent.event == "error" and json.loads(sent.data)["message"] == "overloaded"
    assert encoder.event(RelayEvent(Position(1, 1), SkippedFrame("bad json", "{x"))) == b""
    block = ReasoningBlock("k", 0, 0, {"type": "thinking", "signature": "sig"})
    assert encoder.event(RelayEvent(Position(1, 2), block)) == b""
    assert b"event: end" in encoder.event(RelayEvent(Position(2, 0), End(Outcome.DONE, None)))


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry"):
        SSE(retry=-1)
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="k")
    stream = client.chat.stream(model="m", messages=[])
    for bad in ({"heartbeat": 0}, {"send_timeout": -1}, {"heartbeat": float("nan")}):
        with pytest.raises(ValueError, match="positive"):
            EventStreamResponse(stream, **bad)


def test_the_module_imports_no_web_framework() -> None:
    code = ("import sys, fluxstream.web; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('starlette', 'fastapi', 'sse_starlette')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_once_starlette_is_loaded_a_response_is_one_of_its_responses() -> None:
    from starlette.responses import Response

    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="k")
    response = EventStreamResponse(client.chat.stream(model="m", messages=[]))
    assert isinstance(response, Response) and isinstance(response, EventStreamResponse)
    assert type(response).__name__ == "EventStreamResponse"
    assert type(EventStreamResponse(client.chat.stream(model="m", messages=[]))) is type(response)
    assert response.background is None and response.status_code == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in response.raw_headers
