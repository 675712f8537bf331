"""The failover decision without any I/O: one table per rule of README's "Failover: one reply
across providers" section, run against :meth:`fluxstream._core.recovery.Recovery.decide`, and
the count of the length cap every continuation asks from
(:class:`fluxstream._core.length_budget.LengthBudget`).

No sockets, no event loop, no sleeping: ``now`` is a number and the jitter's random source is
seeded, so every row states exactly what the stream will do. ``Failure.fallback`` says another
upstream is left to take the reply over; the reader performs what the decision says
(tests/failover runs the same rules on real sockets).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_recovery import T0, drop, recovery

from fluxstream._core.failover import may_fail_over
from fluxstream._core.length_budget import LengthBudget
from fluxstream._core.recovery import Decision, Failure
from fluxstream._reply import Choice, Reply, Usage
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream._timeouts import Deadline
from fluxstream.errors import APIConnectionError, APIStatusError

#: Failover(per_upstream_attempts=2), the default: the reader gives each upstream two attempts.
OWN = RetryPolicy(max_attempts=2)
NO_IDS = ResumePolicy(last_event_id=False)
CONTINUES = ResumePolicy(last_event_id=False, continuation=True)


#: After content: one text-only choice, so a continuation could extend it.
SHOWN: dict[str, Any] = {"saw_content": True, "continuable": True}


def failure(kind: Any, *, fallback: bool = True, **fields: Any) -> Failure:
    facts = {k: fields.pop(k) for k in ("stopped", "transient", "retryable", "continued",
                                        "deadline") if k in fields}
    return Failure(kind, drop(**fields), fallback=fallback, **facts)


def decide(f: Failure, *, attempts: int = 1, resume: ResumePolicy | None = None) -> Decision:
    return recovery(OWN, resume, attempts).decide(f, T0 + 0.1)


# ------------------------------------------- rule: before content, own attempts, then the next
@pytest.mark.parametrize(
    ("what", "f", "attempts", "action"),
    [
        ("a drop, an attempt left", failure("drop"), 1, "retry"),
        ("a drop, attempts spent", failure("drop"), 2, "hand_off"),
        ("a clean end without content", failure("drop", clean=True), 2, "hand_off"),
        ("an overloaded error event, an attempt left",
         failure("error_event", clean=True, transient=True), 1, "retry"),
        ("an overloaded error event, attempts spent",
         failure("error_event", clean=True, transient=True), 2, "hand_off"),
        # the channel retried the request itself before it failed for good
        ("connect error, 429, 5xx, 529, head timeout", failure("request_failed"), 2, "hand_off"),
        # a deadline moves on at once, whatever attempts are left
        ("no first token in time", failure("deadline", deadline=Deadline.FIRST_TOKEN), 1,
         "hand_off"),
        ("a retry that could not reconnect", failure("reconnect_failed"), 1, "hand_off"),
    ],
)
def test_before_content_the_upstreams_own_attempts_come_first(
    what: str, f: Failure, attempts: int, action: str
) -> None:
    assert decide(f, attempts=attempts).action == action, what


# ------------------------------------------- rule: a request refused is not handed off
@pytest.mark.parametrize(
    ("error", "moves"),
    [
        (APIStatusError(400, "bad request"), False),
        (APIStatusError(401, "no key"), False),
        (APIStatusError(404, "no such model"), False),
        (APIStatusError(429, "slow down"), True),
        (APIStatusError(503, "busy"), True),
        (APIStatusError(529, "overloaded"), True),  # the API's own (Anthropic)
        (APIConnectionError("refused"), True),
    ],
)
def test_a_refused_request_ends_as_without_fallbacks(error: Exception, moves: bool) -> None:
    retryable = may_fail_over(error, OWN.retry_status | {529})
    assert retryable is moves
    decision = decide(failure("request_failed", retryable=retryable), attempts=2)
    assert decision.action == ("hand_off" if moves else "give_up")


@pytest.mark.parametrize("content", [False, True])
def test_an_error_event_that_refuses_the_request_is_delivered(content: bool) -> None:
    """``invalid_request_error``: another provider would be asked the same wrong question."""
    f = failure("error_event", clean=True, transient=False, saw_content=content,
                continuable=content)
    assert decide(f).action == "give_up"


# ------------------------------------------- rule: after content, own strategies, then the next
@pytest.mark.parametrize(
    ("what", "f", "resume", "resumes", "expected"),
    [
        ("ids: Last-Event-ID first", failure("drop", **SHOWN, has_event_id=True), None, 0,
         ("resume", "last_event_id")),
        ("no ids, no strategy", failure("drop", **SHOWN, has_event_id=True), NO_IDS, 0,
         ("hand_off", None)),
        ("continuation on", failure("drop", **SHOWN), CONTINUES, 0, ("resume", "continuation")),
        ("resumes spent", failure("drop", **SHOWN, has_event_id=True), None, 5,
         ("hand_off", None)),
        ("a cut tool call: restarted on the next", failure("drop", saw_content=True), None, 0,
         ("hand_off", None)),
        ("a stall moves on at once", failure("deadline", **SHOWN, has_event_id=True,
                                            deadline=Deadline.STALL), None, 0,
         ("hand_off", None)),
        ("an idle read moves on at once", failure("deadline", **SHOWN, has_event_id=True,
                                                 deadline=Deadline.IDLE), None, 0,
         ("hand_off", None)),
        ("a resume that could not reconnect", failure("reconnect_failed", **SHOWN), None, 1,
         ("hand_off", None)),
    ],
)
def test_after_content_the_upstreams_own_resume_strategies_come_first(
    what: str, f: Failure, resume: ResumePolicy | None, resumes: int,
    expected: tuple[str, str | None],
) -> None:
    rec = recovery(OWN, resume)
    rec.resumes = resumes
    decision = rec.decide(f, T0)
    assert (decision.action, decision.strategy) == expected, what


@pytest.mark.parametrize("resume", [None, CONTINUES, ResumePolicy(restart=True)])
def test_a_busy_providers_error_event_after_content_moves_on_at_once(
    resume: ResumePolicy | None,
) -> None:
    """Whatever strategies this upstream has: the busy provider would likely fail again."""
    f = failure("error_event", **SHOWN, has_event_id=True, clean=True, transient=True)
    assert decide(f, resume=resume).action == "hand_off"


# ------------------------------------------- rule: a rejected continuation, continued where it is
@pytest.mark.parametrize(
    ("what", "f", "resume", "expected"),
    [
        ("a continuation's ids rejected", failure("rejected", **SHOWN, continued=True), None,
         ("continue_here", None, "hand_off")),
        ("the first request's ids rejected", failure("rejected", **SHOWN), None,
         ("hand_off", None, None)),
        ("this upstream's next strategy first",
         failure("rejected", **SHOWN, continued=True), CONTINUES,
         ("resume", "continuation", None)),
        ("no upstream left", failure("rejected", **SHOWN, continued=True, fallback=False),
         None, ("give_up", None, None)),
    ],
)
def test_a_rejected_resume_of_a_continuation_is_continued_there_first(
    what: str, f: Failure, resume: ResumePolicy | None,
    expected: tuple[str, str | None, str | None],
) -> None:
    decision = decide(f, resume=resume)
    assert (decision.action, decision.strategy, decision.otherwise) == expected, what


@pytest.mark.parametrize(
    ("what", "f", "resume", "expected"),
    [
        ("its own ids", failure("token", **SHOWN, has_event_id=True), None,
         ("resume", None)),
        ("served by another upstream: continued there",
         failure("token", **SHOWN), None, ("continue_here", "give_up")),
        ("no fallbacks, no strategy", failure("token", **SHOWN, fallback=False), None,
         ("give_up", None)),
        ("no fallbacks, continuation on", failure("token", **SHOWN, fallback=False),
         CONTINUES, ("resume", None)),
    ],
)
def test_a_resume_token_resumes_by_its_strategy_or_continues_where_it_was_served(
    what: str, f: Failure, resume: ResumePolicy | None, expected: tuple[str, str | None]
) -> None:
    decision = decide(f, resume=resume)
    assert (decision.action, decision.otherwise) == expected, what


# ------------------------------------------- rule: nothing left of the length cap ends at length
@pytest.mark.parametrize(
    ("what", "f", "resume", "action"),
    [
        ("a drop, the next upstream would continue",
         failure("drop", **SHOWN, length_left=0), NO_IDS, "end_at_length"),
        ("delivered past the cap", failure("drop", **SHOWN, length_left=-3), NO_IDS,
         "end_at_length"),
        ("a token left", failure("drop", **SHOWN, length_left=1), NO_IDS, "hand_off"),
        ("no cap", failure("drop", **SHOWN, length_left=None), NO_IDS, "hand_off"),
        ("a restart on the next asks its whole cap",
         failure("drop", saw_content=True, length_left=0), NO_IDS, "hand_off"),
        ("no fallbacks, the continuation strategy",
         failure("drop", **SHOWN, length_left=0, fallback=False), CONTINUES, "end_at_length"),
        ("the continuation strategy with fallbacks",
         failure("drop", **SHOWN, length_left=0), CONTINUES, "end_at_length"),
        ("Last-Event-ID replays the same capped reply",
         failure("drop", **SHOWN, length_left=0, has_event_id=True), None, "resume"),
        ("a restart strategy asks its whole cap",
         failure("drop", **SHOWN, length_left=0, fallback=False), ResumePolicy(restart=True),
         "resume"),
        ("a busy provider's error event", failure(
            "error_event", **SHOWN, clean=True, transient=True, length_left=0), None,
         "end_at_length"),
        ("a stall", failure("deadline", **SHOWN, length_left=0, deadline=Deadline.STALL), None,
         "end_at_length"),
        ("a rejected continuation", failure("rejected", **SHOWN, continued=True, length_left=0),
         None, "end_at_length"),
        ("a token, continued where it was served", failure("token", **SHOWN, length_left=0),
         None, "end_at_length"),
        ("a token, no fallbacks, continuation on",
         failure("token", **SHOWN, length_left=0, fallback=False), CONTINUES, "end_at_length"),
        ("no upstream left, no strategy: truncated",
         failure("drop", **SHOWN, length_left=0, fallback=False), NO_IDS, "give_up"),
    ],
)
def test_a_continuation_with_nothing_left_of_the_cap_ends_at_length(
    what: str, f: Failure, resume: ResumePolicy | None, action: str
) -> None:
    assert decide(f, resume=resume).action == action, what


# ------------------------------------------- rule: cancel and a closed client never hand off
ALL_KINDS = [
    failure("drop", **SHOWN), failure("drop"),
    failure("deadline", deadline=Deadline.FIRST_TOKEN),
    failure("deadline", **SHOWN, deadline=Deadline.STALL),
    failure("error_event", clean=True, transient=True),
    failure("error_event", **SHOWN, clean=True, transient=True),
    failure("request_failed"), failure("reconnect_failed", **SHOWN),
    failure("rejected", **SHOWN, continued=True), failure("token", **SHOWN),
]


@pytest.mark.parametrize("f", ALL_KINDS, ids=lambda f: f"{f.kind}-{f.state.saw_content}")
def test_nothing_moves_on_once_the_caller_stopped(f: Failure) -> None:
    """``stream.cancel()``, ``aclose()`` and a closed client (``AsyncClient.aclose()``) all
    stop the stream: no hand-off, no continuation, nothing asked."""
    stopped = Failure(**{**f.__dict__, "stopped": True})
    decision = decide(stopped, attempts=2, resume=NO_IDS)
    assert decision.action not in ("hand_off", "continue_here", "retry", "resume"), decision
    if f.kind == "drop":
        assert decision.action == "cancel"


@pytest.mark.parametrize("f", ALL_KINDS, ids=lambda f: f"{f.kind}-{f.state.saw_content}")
def test_with_no_upstream_left_a_stream_ends_as_without_fallbacks(f: Failure) -> None:
    alone = Failure(**{**f.__dict__, "fallback": False})
    with_one = decide(Failure(**{**f.__dict__}), attempts=2, resume=NO_IDS)
    decision = decide(alone, attempts=2, resume=NO_IDS)
    assert decision.action not in ("hand_off", "continue_here")
    if with_one.action in ("hand_off", "continue_here"):
        assert decision.action == "give_up"


# ------------------------------------------- rule: what ends well is not moved
@pytest.mark.parametrize(
    ("what", "f"),
    [
        ("the sentinel came", failure("drop", saw_content=True, done=True)),
        ("finished, no sentinel", failure("drop", saw_content=True, clean=True, complete=True)),
        ("no sentinel within finish_grace",
         failure("deadline", saw_content=True, complete=True, deadline=Deadline.FINISH_GRACE)),
        ("only heartbeats after every choice finished",
         failure("deadline", saw_content=True, complete=True, deadline=Deadline.STALL)),
    ],
)
def test_a_reply_that_ended_well_is_not_moved(what: str, f: Failure) -> None:
    assert decide(f).action == "end", what


def test_a_cut_after_every_choice_finished_stays_truncated() -> None:
    """A transport error after the finish: the text is whole, nothing to continue."""
    assert decide(failure("drop", saw_content=True, complete=True)).action == "give_up"


# ---------------------------------------------------------------- the count of the length cap
def reply(text: str, usage: Usage | None = None, partial: bool = False) -> Reply:
    return Reply(choices=[Choice(index=0, text=text)], usage=usage, usage_partial=partial)


def test_no_cap_counts_nothing_against_it() -> None:
    budget = LengthBudget(None)
    assert budget.left(reply("some text"), 3) is None
    assert budget.continuation_cap(reply("some text"), 3, own=10) is None


def test_what_is_left_is_the_cap_minus_the_estimate_of_what_was_shown() -> None:
    budget = LengthBudget(40)
    shown = reply("Hello — or 你好")  # four deltas of a token each
    assert budget.left(shown, 4) == 36
    assert budget.continuation_cap(shown, 4) == 36
    assert budget.continuation_cap(shown, 4, own=10) == 10  # the upstream's own cap bounds it


def test_a_final_usage_is_counted_instead_of_the_estimate() -> None:
    budget = LengthBudget(40)
    done = reply("Hello", Usage(prompt_tokens=3, completion_tokens=12, total_tokens=15))
    assert budget.left(done, 1) == 28
    # a snapshot sent before the end (Anthropic's message_start) is no bill: estimated
    early = reply("Hello there", Usage(prompt_tokens=3, completion_tokens=1, total_tokens=4),
                  partial=True)
    assert budget.left(early, 2) == 38


def test_parts_add_up_across_upstreams() -> None:
    budget = LengthBudget(40)
    first = reply("one two three")
    budget.close_part(first, 3, budget.part(first, 3).tokens)
    assert budget.part(first, 3).tokens == 0  # the next part has delivered nothing yet
    more = reply("one two three four five")
    assert budget.left(more, 5) == 35


def test_a_resume_tokens_reply_counts_a_token_per_four_characters() -> None:
    restored = reply("x" * 41)
    budget = LengthBudget(20, restored)
    assert budget.left(restored, 0) == 20 - 11
    assert LengthBudget(10, restored).left(restored, 0) == -1  # spent: nothing to ask


def test_a_restart_has_the_whole_cap_again() -> None:
    budget = LengthBudget(20, reply("x" * 40))
    budget.restarted()
    assert budget.left(reply(""), 0) == 20


def test_a_prefill_that_loses_its_trailing_space_asks_one_more() -> None:
    """The model writes the space again first (the echo cut hides it): it counts there."""
    budget = LengthBudget(40)
    assert budget.continuation_cap(reply("Hello "), 1) == 40 - 1 + 1
    assert budget.continuation_cap(reply("Hello"), 1) == 40 - 1
    assert budget.continuation_cap(reply("   "), 1) == 40 - 1  # all whitespace: sent as is


@pytest.mark.parametrize("cap", [None, 10, 40])
def test_a_cap_read_on_first_use_counts_as_the_cap_given(cap: int | None) -> None:
    """A stream's budget reads the request's cap only when a drop or a continuation asks
    (``cap_of``), once: what is left and what a continuation asks are those of the cap
    given at once, with or without a resume token's reply."""
    asked = 0

    def cap_of() -> int | None:
        nonlocal asked
        asked += 1
        return cap

    for restored in (None, reply("x" * 41)):
        asked = 0
        lazy, given = LengthBudget(None, restored, cap_of=cap_of), LengthBudget(cap, restored)
        assert asked == 0
        shown = reply("Hello — or 你好")
        for budget in (lazy, given):
            budget.close_part(shown, 4, budget.part(shown, 4).tokens)
        more = reply("Hello — or 你好, and more")
        assert lazy.left(more, 6) == given.left(more, 6)
        assert lazy.continuation_cap(more, 6, own=12) == given.continuation_cap(more, 6, own=12)
        assert lazy.cap == given.cap and asked == 1
