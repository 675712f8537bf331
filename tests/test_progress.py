"""The clocks of a stream, without I/O (fluxstream.progress): which timeout is overdue when.

Reading a long prompt is not a stall (issue 10, item 6): ``stall_timeout`` counts only between
content, ``first_token_timeout`` only up to the first content; heartbeats, skipped frames and
usage chunks are never progress.
"""

from __future__ import annotations

from fluxstream.events import Event, Finish, SkippedFrame, TextDelta, UsageUpdate
from fluxstream.progress import Progress
from fluxstream.reply import Usage

KEY = "k"
TEXT: list[Event] = [TextDelta(KEY, 0, 0, "x")]
JUNK: list[Event] = [SkippedFrame("invalid JSON", "{"), UsageUpdate(Usage(total_tokens=1))]


def never_complete() -> bool:
    return False


def started(**options: float | None) -> Progress:
    progress = Progress(
        stall_timeout=options.get("stall_timeout"),
        finish_grace=options.get("finish_grace", 2.0),
        first_token_timeout=options.get("first_token_timeout"),
    )
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
