"""What a Responses ``sequence_number`` may and may not do.

* On a first connection nothing was delivered before it, so a number that repeats or goes
  backwards (a bridge that numbers each item from 0, a proxy that renumbers) drops nothing:
  the event is read. Such numbers cannot order a re-read, so ``starting_after`` is no longer
  offered for that stream (``parser.sequence`` is ``None``).
* A re-read (``starting_after=N``, or a resume from a token) may drop what was delivered
  already: its leading events at or below ``N``. Each is counted (``skipped_frames``).
* Its first new event must be ``N + 1``: a re-read that starts later would splice the reply
  with a hole in it (``ABCF`` for ``ABCDEF``, ``done``). It is rejected with
  :class:`~fluxstream.errors.ResumeMismatchError`, as a ``Last-Event-ID`` reconnect that does
  not continue the stream is, and nothing of it is kept.
"""

from __future__ import annotations

from functools import partial

import pytest
from sse_frames import frames

from fluxstream._events import Outcome, SkippedFrame, TextDelta
from fluxstream._parser import StreamParser
from fluxstream.errors import ResumeMismatchError

LETTERS = "ABCDEF"


#: One named event.
frame = partial(frames, named=True)


def created(n: int) -> bytes:
    return frame({"type": "response.created", "sequence_number": n,
                  "response": {"id": "resp_1", "status": "in_progress"}})


def delta(n: int, text: str) -> bytes:
    return frame({"type": "response.output_text.delta", "sequence_number": n,
                  "output_index": 0, "content_index": 0, "delta": text})


def completed(n: int) -> bytes:
    return frame({"type": "response.completed", "sequence_number": n,
                  "response": {"id": "resp_1", "status": "completed"}})


def letters(numbers: list[int]) -> bytes:
    return b"".join(delta(n, c) for n, c in zip(numbers, LETTERS, strict=False))


@pytest.mark.parametrize("numbers", [[1, 1, 1, 1, 1, 1], [1, 2, 3, 1, 2, 3], [6, 5, 4, 3, 2, 1],
                                     [1, 2, 3, 3, 4, 5]])
def test_odd_numbers_on_a_first_connection_drop_nothing(numbers: list[int]) -> None:
    parser = StreamParser(format="responses")
    events = parser.feed(created(0) + letters(numbers) + completed(max(numbers) + 1))
    events += parser.close()
    reply = parser.reply
    assert reply.text == LETTERS and reply.outcome is Outcome.DONE
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == LETTERS
    assert parser.sequence is None  # cannot order a re-read: starting_after is not offered


def test_increasing_numbers_with_gaps_still_order_a_re_read() -> None:
    parser = StreamParser(format="responses")
    parser.feed(created(0) + letters([1, 3, 7]))
    assert parser.sequence == 7 and parser.reply.text == "ABC"


def first_connection() -> StreamParser:
    parser = StreamParser(content_key="k", format="responses")
    parser.feed(created(0) + letters([1, 2, 3]))  # A B C delivered; N = 3
    assert parser.sequence == 3
    return parser


def re_read(parser: StreamParser) -> None:
    """What the reader does before ``GET ...?starting_after=N``."""
    parser.new_connection()


def test_a_re_read_that_starts_over_drops_and_counts_what_was_delivered() -> None:
    parser = first_connection()
    re_read(parser)
    events = parser.feed(created(0) + letters([1, 2, 3, 4, 5, 6]) + completed(7))
    events += parser.close()
    assert parser.reply.text == LETTERS and parser.reply.outcome is Outcome.DONE
    assert [(e.offset, e.text) for e in events if isinstance(e, TextDelta)] == [
        (3, "D"), (4, "E"), (5, "F")]
    assert sum(isinstance(e, SkippedFrame) for e in events) == 4  # created and A B C
    assert parser.reply.skipped_frames == 4


def test_a_re_read_that_continues_at_the_next_number_is_spliced() -> None:
    parser = first_connection()
    re_read(parser)
    parser.feed(delta(4, "D") + delta(5, "E") + delta(6, "F") + completed(7))
    parser.close()
    assert parser.reply.text == LETTERS and parser.reply.outcome is Outcome.DONE
    assert parser.reply.skipped_frames == 0


@pytest.mark.parametrize("leading_replays", [False, True])
def test_a_re_read_that_skips_events_is_rejected(leading_replays: bool) -> None:
    parser = first_connection()
    re_read(parser)
    replays = letters([1, 2, 3]) if leading_replays else b""
    with pytest.raises(ResumeMismatchError, match="starting_after"):
        parser.feed(replays + delta(6, "F") + completed(7))
    assert parser.reply.text == "ABC"  # nothing of the rejected connection is kept
    parser.close()
    assert parser.reply.text == "ABC" and parser.reply.outcome is Outcome.TRUNCATED


def test_a_gap_found_in_a_later_read_is_rejected_too() -> None:
    parser = first_connection()
    re_read(parser)
    replayed = parser.feed(b": keep-alive\n\n" + delta(2, "B"))  # a replay, dropped
    assert [type(e) for e in replayed] == [SkippedFrame]
    with pytest.raises(ResumeMismatchError):
        parser.feed(delta(5, "E"))
    assert parser.reply.text == "ABC"


def test_a_resume_from_a_token_checks_the_first_number() -> None:
    from resume_tokens import token

    saved = token(first_connection())
    good = StreamParser.from_token(saved, format="responses")
    good.feed(delta(4, "D") + delta(5, "E") + delta(6, "F") + completed(7))
    good.close()
    assert good.reply.text == LETTERS and good.reply.outcome is Outcome.DONE
    for fmt in ("responses", "auto"):
        bad = StreamParser.from_token(saved, format=fmt)
        with pytest.raises(ResumeMismatchError):
            bad.feed(delta(6, "F") + completed(7))
        assert bad.reply.text == "ABC"


def test_a_continuation_or_a_restart_is_not_checked() -> None:
    """A continuation is a new response numbered from 0; a restart a new generation."""
    parser = first_connection()
    parser.begin_continuation(min_overlap=1)
    parser.feed(created(0) + delta(1, "DEF") + completed(2))
    parser.close()
    assert parser.reply.text == LETTERS
    again = first_connection()
    again.reset(1, "restart")
    again.feed(created(0) + delta(5, "xyz") + completed(6))
    again.close()
    assert again.reply.text == "xyz"


@pytest.mark.anyio
async def test_a_re_read_with_a_gap_rules_starting_after_out_and_is_not_sent_again() -> None:
    """The reader's rejection path ruled out only ``last_event_id`` whatever strategy had
    been tried, so a ``starting_after`` re-read that skipped events was sent again with the
    same ``N`` until ``max_resumes`` ran out. The strategy that failed its check is the one
    ruled out: one re-read, then the next strategy (none here: ``truncated``)."""
    import httpx

    import fluxstream

    gets: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sse = {"content-type": "text/event-stream"}
        if request.method == "POST":  # "ABC", then the connection drops (no completed)
            return httpx.Response(200, headers=sse, content=created(0) + letters([1, 2, 3]))
        gets.append(str(request.url))  # starting_after=3, but the re-read resumes at 5
        return httpx.Response(200, headers=sse, content=delta(5, "E") + completed(6))

    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    async with http, fluxstream.AsyncClient(
        base_url="http://127.0.0.1:9/v1", api_key="sk-test", http_client=http
    ) as client:
        stream = client.responses.stream(model="m", input="hi", background=True)
        async with stream:
            shown = [e.text async for e in stream if isinstance(e, TextDelta)]
    assert "".join(shown) == stream.reply.text == "ABC"  # never "ABCE"
    assert stream.reply.outcome is Outcome.TRUNCATED
    assert len(gets) == 1 and "starting_after=3" in gets[0]


@pytest.mark.parametrize("filler", [
    b"data: {}\n\n",  # a proxy's keep-alive
    frame({"type": "x.unknown"}),  # a type the format does not know
    b'event: message\ndata: {"type": 7}\n\n',  # a type that names nothing
])
def test_a_frame_the_format_skips_does_not_end_the_check(filler: bytes) -> None:
    """Only an event the format reads can end the check: a frame it skips (a proxy's
    ``{}``, an unknown type) let the gap behind it through, spliced (``ABCF``)."""
    parser = first_connection()
    re_read(parser)
    with pytest.raises(ResumeMismatchError):
        parser.feed(filler + delta(6, "F") + completed(7))
    assert parser.reply.text == "ABC"


def test_an_unnumbered_event_named_by_its_event_line_ends_the_check() -> None:
    """An event without a ``type``, named by its ``event:`` line, is still an event the
    format reads: unnumbered, it ends the check and is shown."""
    parser = first_connection()
    re_read(parser)
    unnumbered = (b"event: response.reasoning_summary_text.delta\n"
                  b'data: {"output_index":0,"summary_index":0,"delta":"why"}\n\n')
    parser.feed(unnumbered + delta(4, "D"))
    assert parser.reply.text == "ABCD" and parser.reply.choices[0].reasoning == "why"
