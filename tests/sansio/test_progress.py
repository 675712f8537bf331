"""The clocks of a stream, without I/O (fluxstream._core.progress): which timeout is overdue when.

Reading a long prompt is not a stall (issue 10, item 6): ``stall_timeout`` counts only between
content, ``first_token_timeout`` only up to the first content; heartbeats, skipped frames and
usage chunks are never progress.
"""

from __future__ import annotations

from fluxstream._core.progress import Progress
from fluxstream._events import Event, Finish, SkippedFrame, TextDelta, UsageUpdate
from fluxstream._reply import Usage
from fluxstream._timeouts import Timeouts

KEY = "k"
TEXT: list[Event] = [TextDelta(KEY, 0, 0, "x")]
JUNK: list[Event] = [SkippedFrame("invalid JSON", "{"), UsageUpdate(Usage(total_tokens=1))]


def never_complete() -> bool:
    return False


def started(**options: float | None) -> Progress:
    progress = Progress(Timeouts(
        stall=options.get("stall_timeout"),
        finish_grace=options.get("finish_grace", 2.0),
        first_token=options.get("first_token_timeout"),
    ))
    progress.start(0.0)
    progress.connected(0.0)
    return progress


def test_pings_before_the_first_token_are_not_a_stall() -> None:
    progress = started(stall_timeout=0.5)
    for second in range(1, 18):  # llama.cpp pings for 17 s while it reads a long prompt
        assert progress.read([], float(second), never_complete) is None
    assert progress.read(TEXT, 18.0, never_complete) is None
    assert progress.read(TEXT, 18.2, never_complete) is None


def test_stall_timeout_counts_between_content_from_the_first_content_on() -> None:
    progress = started(stall_timeout=0.5)
    assert progress.read(TEXT, 1.0, never_complete) is None
    assert progress.read([], 1.4, never_complete) is None
    assert progress.read([], 1.6, never_complete) == "stall"


def test_junk_frames_and_usage_are_not_progress() -> None:
    progress = started(stall_timeout=0.5)
    progress.read(TEXT, 1.0, never_complete)
    assert progress.read(JUNK, 1.3, never_complete) is None
    assert progress.read(JUNK, 1.6, never_complete) == "stall"


def test_first_token_timeout_bounds_the_wait_for_the_first_content() -> None:
    progress = started(stall_timeout=0.5, first_token_timeout=3.0)
    assert progress.read(JUNK, 2.9, never_complete) is None
    assert progress.read(JUNK, 3.1, never_complete) == "first_token"


def test_after_the_first_token_only_the_stall_timeout_applies() -> None:
    progress = started(stall_timeout=0.5, first_token_timeout=3.0)
    progress.read(TEXT, 2.0, never_complete)
    assert progress.first_token_left(10.0) is None
    assert progress.read([], 2.4, never_complete) is None
    assert progress.read([], 2.6, never_complete) == "stall"


def test_after_every_choice_finished_the_grace_ends_the_stream_not_a_stall() -> None:
    progress = started(stall_timeout=0.5, finish_grace=2.0)
    progress.read(TEXT, 1.0, never_complete)
    assert progress.read([Finish(KEY, 0, "stop")], 1.1, lambda: True) is None
    assert progress.lingering
    assert progress.read([], 2.0, lambda: True) is None  # lingering: no stall
    assert progress.linger_left(2.0) is not None and abs(progress.linger_left(2.0) - 1.1) < 1e-9


def test_an_event_still_arriving_gets_a_grace_per_read_within_a_bound() -> None:
    """While part of an event has been read, each read may wait one grace of silence, the
    grace starting again from there, but never past MID_EVENT_GRACES graces more: a slow last
    write is not cut, a trickle that never makes an event still ends."""
    from fluxstream._core.progress import MID_EVENT_GRACES

    progress = Progress(Timeouts(stall=None, finish_grace=1.0))
    assert progress.linger_wait(0.0, in_event=True) is None  # not lingering: no say
    progress.linger_until = 10.0
    assert progress.linger_wait(9.5, in_event=False) == 0.5  # between events: the grace only
    assert progress.linger_wait(10.5, in_event=False) == 0.0
    cap = 10.0 + MID_EVENT_GRACES
    assert progress.linger_wait(10.5, in_event=True) == 1.0  # one more grace of silence
    assert progress.linger_wait(cap - 0.25, in_event=True) == 0.25  # never past the cap
    assert progress.linger_wait(cap + 1, in_event=True) == 0.0
    assert progress.linger_wait(cap + 1, in_event=False) == 0.0


# ------------------------------------------------------------------ which deadline each wait is for


def test_each_read_wait_names_its_deadline() -> None:
    """The I/O layer is told which deadline a wait is for; it never works it out."""
    from fluxstream._core.progress import Wait
    from fluxstream._timeouts import Deadline

    progress = started(stall_timeout=0.5, first_token_timeout=3.0, finish_grace=1.0)
    assert progress.read_wait(1.0, in_event=False) == Wait(2.0, Deadline.FIRST_TOKEN)
    progress.read(TEXT, 1.0, never_complete)
    assert progress.read_wait(1.0, in_event=False) == Wait(0.5, Deadline.STALL)
    progress.read([Finish(KEY, 0, "stop")], 1.5, lambda: True)
    assert progress.read_wait(2.0, in_event=False) == Wait(0.5, Deadline.FINISH_GRACE)
    assert started().read_wait(0.0, in_event=False) is None  # no deadline: read without one


def test_the_head_wait_is_the_nearer_of_the_read_timeout_and_the_first_token() -> None:
    from fluxstream._core.progress import Wait
    from fluxstream._timeouts import Deadline

    progress = Progress(Timeouts(read=10.0, first_token=3.0))
    progress.start(0.0)
    assert progress.head_wait(1.0, saw_content=False) == Wait(2.0, Deadline.FIRST_TOKEN)
    assert progress.head_wait(1.0, saw_content=True) == Wait(3.0, Deadline.FIRST_TOKEN)
    assert progress.due_before_content(2.9, saw_content=False) is None
    assert progress.due_before_content(3.0, saw_content=False) is Deadline.FIRST_TOKEN
    assert progress.due_before_content(9.0, saw_content=True) is None
    assert progress.backoff(2.5, 5.0, saw_content=False) == 0.5  # cut to the deadline
    assert progress.backoff(2.5, 0.2, saw_content=False) == 0.2
    assert progress.backoff(2.5, 5.0, saw_content=True) == 5.0
    progress = Progress(Timeouts(read=1.0, first_token=3.0))
    progress.start(0.0)
    assert progress.head_wait(0.0, saw_content=False) == Wait(1.0, Deadline.HEAD)
    assert Progress(Timeouts(read=None)).head_wait(0.0, saw_content=False) is None


def test_the_first_deadline_that_ended_the_stream_is_in_the_stats() -> None:
    from fluxstream._reply import Reply
    from fluxstream._timeouts import Deadline

    progress = started(stall_timeout=0.5)
    assert progress.stats(Reply(), 1, 0, 1.0).deadline is None
    assert progress.read(TEXT, 1.0, never_complete) is None
    overdue = progress.read([], 1.6, never_complete)
    assert overdue is Deadline.STALL
    progress.passed(overdue)
    progress.passed(Deadline.IDLE)  # a later one does not replace it
    assert progress.stats(Reply(), 1, 0, 2.0).deadline is Deadline.STALL


def test_a_read_of_many_events_counts_as_one_event_at_a_time() -> None:
    """A read of many events is counted without a step per event: the same content count,
    first token, grace and deadline as counting them one by one, for every mix of events
    and read sizes across the threshold."""
    import random

    from fluxstream._events import ReasoningDelta

    rng = random.Random(43)
    usage = UsageUpdate(Usage(prompt_tokens=1))
    kinds: list[Event] = [
        TextDelta("k", 0, 0, "a"), ReasoningDelta("k", 0, 0, "r"), Finish("k", 0, "stop"),
        SkippedFrame("junk", "x"), usage,
    ]
    timeouts = Timeouts(stall=5.0, finish_grace=2.0, first_token=9.0)
    for _ in range(300):
        fast, slow = Progress(timeouts), Progress(timeouts)
        fast.start(0.0)
        slow.start(0.0)
        now = 0.0
        for _ in range(rng.randint(1, 6)):
            events = [rng.choice(kinds) for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 9, 30]))]
            now += rng.choice([0.5, 3.0, 6.0])
            done = rng.random() < 0.5
            complete = (lambda: True) if done else (lambda: False)
            got = fast.read(events, now, complete)
            # The same events in reads of at most three at the same time, each counted one
            # event at a time: the reference (``complete`` does not change within a read).
            pieces = [events[i:i + 3] for i in range(0, len(events), 3)] or [[]]
            for piece in pieces:
                assert len(piece) < 4
                want = slow.read(piece, now, complete)
            assert got == want
            assert fast.content_events == slow.content_events
            assert (fast.first_token, fast.last_token, fast.linger_until) == (
                slow.first_token, slow.last_token, slow.linger_until)
