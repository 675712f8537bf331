"""The retry/resume decision without any I/O: one table per rule of README's
"Retries, resume and content keys" section, run against :class:`fluxstream._core.recovery.Recovery`.

No sockets, no event loop, no sleeping: ``now`` is a number and the jitter's random source is
seeded, so every row states exactly what the stream will do.
"""

from __future__ import annotations

import random

import pytest

from fluxstream._core.recovery import Decision, DropState, Recovery, is_transient_error
from fluxstream._retry import ResumePolicy, RetryPolicy

T0 = 1000.0  # the "now" of the first request


def recovery(
    retry: RetryPolicy | None = None, resume: ResumePolicy | None = None, attempts: int = 1
) -> Recovery:
    rec = Recovery(retry or RetryPolicy(), resume or ResumePolicy(), rng=random.Random(7))
    rec.start(T0)
    rec.attempts = attempts
    return rec


def drop(**state: object) -> DropState:
    defaults: dict[str, object] = {
        "clean": False, "done": False, "complete": False, "saw_content": False,
    }
    return DropState(**{**defaults, **state})  # type: ignore[arg-type]


# ---------------------------------------------------------------- rule: before any content, retry
@pytest.mark.parametrize(
    ("failure", "kwargs"),
    [
        ("connect error", {"retryable": True}),
        ("timeout before the response", {"retryable": True}),
        ("429", {"retryable": 429 in RetryPolicy().retry_status}),
        ("500", {"retryable": 500 in RetryPolicy().retry_status}),
        ("502", {"retryable": 502 in RetryPolicy().retry_status}),
        ("503", {"retryable": 503 in RetryPolicy().retry_status}),
        ("504", {"retryable": 504 in RetryPolicy().retry_status}),
    ],
)
def test_a_failed_request_before_content_is_sent_again(
    failure: str, kwargs: dict[str, bool]
) -> None:
    decision = recovery().after_failed_request(tries=1, now=T0 + 0.1, **kwargs)
    assert decision.action == "retry", failure


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (drop(clean=False), "retry"),  # a transport error before the first delta
        (drop(clean=True), "retry"),  # the body closed before the first delta
        (drop(clean=False, has_event_id=True), "retry"),  # ids change nothing before content
    ],
)
def test_a_drop_before_content_is_a_plain_retry(state: DropState, action: str) -> None:
    assert recovery().after_drop(state, T0 + 0.1).action == action


@pytest.mark.parametrize(
    ("error_type", "code", "message", "retried"),
    [
        ("server_error", None, "The server had an error", True),
        ("overloaded_error", None, "Overloaded", True),
        (None, "rate_limit_exceeded", "slow down", True),
        (None, None, "503 Service Unavailable", True),
        ("invalid_request_error", "context_length_exceeded", "too long", False),
        ("invalid_request_error", None, "bad model", False),
    ],
)
def test_an_error_event_before_content_is_retried_only_when_transient(
    error_type: str | None, code: str | None, message: str, retried: bool
) -> None:
    transient = is_transient_error(error_type, code, message)
    before = recovery().after_error_event(saw_content=False, transient=transient, now=T0)
    assert (before is not None and before.action == "retry") is retried
    # After content the error is delivered, never retried: text was already shown.
    after = recovery().after_error_event(saw_content=True, transient=transient, now=T0)
    assert after is None


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_status_outside_retry_status_is_not_retried(status: int) -> None:
    retryable = status in RetryPolicy().retry_status
    assert not retryable
    decision = recovery().after_failed_request(tries=1, now=T0, retryable=retryable)
    assert decision.action == "give_up"


# ---------------------------------------------------------------- rule: backoff and bounds
@pytest.mark.parametrize(
    ("attempt", "cap"),
    [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (5, 8.0), (6, 8.0), (10, 8.0)],
)
def test_backoff_is_full_jitter_under_a_doubling_cap(attempt: int, cap: float) -> None:
    policy = RetryPolicy(max_attempts=20, base_delay=0.5, max_delay=8.0, total_timeout=1e9)
    rec = recovery(policy)
    delays = [rec.after_failed_request(tries=attempt, now=T0).delay for _ in range(200)]
    assert all(0.0 <= d <= cap for d in delays)
    assert max(delays) > cap * 0.8  # jitter spreads over the whole range, not a fixed delay
    assert min(delays) < cap * 0.2


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(3.0, 3.0), (0.0, None), (20.0, 8.0)],  # honoured; jitter alone; capped by max_delay
)
def test_retry_after_is_honoured_up_to_max_delay(
    retry_after: float, expected: float | None
) -> None:
    policy = RetryPolicy(base_delay=0.01, max_delay=8.0)
    decision = recovery(policy).after_failed_request(tries=1, now=T0, retry_after=retry_after)
    assert decision.action == "retry"
    if expected is None:
        assert decision.delay <= 0.01
    else:
        assert decision.delay == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tries", "now", "action"),
    [
        (1, T0 + 1, "retry"),
        (2, T0 + 1, "retry"),
        (3, T0 + 1, "give_up"),  # max_attempts=3 counts the first one
        (1, T0 + 61, "give_up"),  # total_timeout=60 spent
    ],
)
def test_retries_are_bounded_by_attempts_and_total_time(
    tries: int, now: float, action: str
) -> None:
    policy = RetryPolicy(max_attempts=3, total_timeout=60.0)
    assert recovery(policy).after_failed_request(tries=tries, now=now).action == action


def test_a_retry_never_waits_past_the_total_time() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=100.0, max_delay=100.0, total_timeout=60.0)
    decision = recovery(policy).after_failed_request(tries=1, now=T0 + 59.5, retry_after=50)
    assert decision.action == "retry" and decision.delay <= 0.5


@pytest.mark.parametrize(
    ("attempts", "now", "action"),
    [(1, T0, "retry"), (3, T0, "resume_or_give_up"), (1, T0 + 61, "resume_or_give_up")],
)
def test_drops_before_content_share_the_retry_budget(
    attempts: int, now: float, action: str
) -> None:
    decision = recovery(attempts=attempts).after_drop(drop(), now)
    if action == "retry":
        assert decision.action == "retry"
    else:
        assert decision.action == "give_up"  # no content, no ids: nothing to resume by


# ---------------------------------------------------------------- rule: after content, resume
LEI = ResumePolicy()  # last_event_id on by default
ALL = ResumePolicy(continuation=True, restart=True)


@pytest.mark.parametrize(
    ("policy", "state", "strategy"),
    [
        (LEI, drop(saw_content=True, has_event_id=True), "last_event_id"),
        (LEI, drop(saw_content=True, has_event_id=False), None),  # no ids: nothing to send
        (ALL, drop(saw_content=True, has_event_id=True, continuable=True), "last_event_id"),
        (ALL, drop(saw_content=True, continuable=True), "continuation"),
        (ALL, drop(saw_content=True, continuable=False), "restart"),  # tool calls, n > 1
        (ResumePolicy(continuation=True), drop(saw_content=True), None),
        (ResumePolicy(restart=True), drop(saw_content=True, continuable=True), "restart"),
        (ResumePolicy.off(), drop(saw_content=True, has_event_id=True), None),
    ],
)
def test_after_content_the_best_applicable_strategy_is_used(
    policy: ResumePolicy, state: DropState, strategy: str | None
) -> None:
    decision = recovery(resume=policy).after_drop(state, T0)
    if strategy is None:
        assert decision == Decision("give_up", reason="no resume strategy applies")
    else:
        assert (decision.action, decision.strategy) == ("resume", strategy)


@pytest.mark.parametrize(
    ("policy", "retry_ms", "delay"),
    [
        (ResumePolicy(), 1500, 1.5),  # the server's retry: field
        (ResumePolicy(max_delay=2.0), 60_000, 2.0),  # capped
        (ResumePolicy(default_delay=0.25), None, 0.25),  # no retry: field
    ],
)
def test_last_event_id_waits_the_servers_retry_delay(
    policy: ResumePolicy, retry_ms: int | None, delay: float
) -> None:
    state = drop(saw_content=True, has_event_id=True, reconnection_time=retry_ms)
    decision = recovery(resume=policy).after_drop(state, T0)
    assert decision.strategy == "last_event_id" and decision.delay == pytest.approx(delay)


@pytest.mark.parametrize(("resumes", "action"), [(0, "resume"), (4, "resume"), (5, "give_up")])
def test_resumes_are_bounded_by_max_resumes(resumes: int, action: str) -> None:
    rec = recovery(resume=ResumePolicy(max_resumes=5))
    rec.resumes = resumes
    assert rec.after_drop(drop(saw_content=True, has_event_id=True), T0).action == action


@pytest.mark.parametrize(
    ("ruled_out", "strategy"),
    [
        (set(), "last_event_id"),
        ({"last_event_id"}, "continuation"),
        ({"last_event_id", "continuation"}, "restart"),
        ({"last_event_id", "continuation", "restart"}, None),
    ],
)
def test_a_strategy_ruled_out_for_this_server_falls_back_to_the_next(
    ruled_out: set[str], strategy: str | None
) -> None:
    rec = recovery(resume=ALL)
    for name in ruled_out:
        rec.rule_out(name)
    state = drop(saw_content=True, has_event_id=True, continuable=True)
    assert rec.strategy(state) == strategy


# ------------------------------------------------------------ rule: a stored response is re-read
#: A Responses API stream whose request had ``background: true``, id and sequence number seen.
STORED: dict[str, object] = {
    "saw_content": True, "stored_response": True, "response_id": "resp_1", "sequence": 9,
}


@pytest.mark.parametrize(
    ("policy", "state", "strategy"),
    [
        (LEI, drop(**STORED), "starting_after"),  # on by default
        (ALL, drop(**{**STORED, "has_event_id": True, "continuable": True}), "starting_after"),
        # every condition is needed: the provider stored it, its id, a sequence number
        (LEI, drop(**{**STORED, "stored_response": False}), None),
        (LEI, drop(**{**STORED, "response_id": None}), None),
        (LEI, drop(**{**STORED, "response_id": ""}), None),
        (LEI, drop(**{**STORED, "response_id": ".."}), None),  # a dot segment, not an id
        (LEI, drop(**{**STORED, "response_id": "resp..1"}), "starting_after"),
        (LEI, drop(**{**STORED, "sequence": None}), None),
        (LEI, drop(**{**STORED, "sequence": -1}), None),
        (ALL, drop(**{**STORED, "stored_response": False, "continuable": True}), "continuation"),
        (LEI, drop(**{**STORED, "has_event_id": True, "sequence": None}), "last_event_id"),
        (ResumePolicy(starting_after=False), drop(**STORED), None),
        (ResumePolicy(starting_after=False), drop(**STORED, has_event_id=True), "last_event_id"),
        (ResumePolicy.off(), drop(**STORED), None),
    ],
)
def test_a_stored_response_is_resumed_by_starting_after(
    policy: ResumePolicy, state: DropState, strategy: str | None
) -> None:
    decision = recovery(resume=policy).after_drop(state, T0)
    if strategy is None:
        assert decision == Decision("give_up", reason="no resume strategy applies")
    else:
        assert (decision.action, decision.strategy) == ("resume", strategy)


@pytest.mark.parametrize(("default_delay", "retry_ms"), [(0.0, None), (0.25, 1500)])
def test_starting_after_waits_the_policys_delay(default_delay: float, retry_ms: int | None) -> None:
    """No ``retry:`` field applies to a new request of another kind: the policy's delay."""
    state = drop(**STORED, reconnection_time=retry_ms)
    decision = recovery(resume=ResumePolicy(default_delay=default_delay)).after_drop(state, T0)
    assert decision == Decision("resume", default_delay, "starting_after")


@pytest.mark.parametrize(
    ("policy", "state", "action", "strategy"),
    [
        # nothing shown yet, but the provider is generating a stored response: re-read it
        # rather than start (and pay for) a second one
        (LEI, drop(**{**STORED, "saw_content": False}), "resume", "starting_after"),
        (ResumePolicy(starting_after=False), drop(**{**STORED, "saw_content": False}),
         "retry", None),
        (LEI, drop(**{**STORED, "saw_content": False, "response_id": None}), "retry", None),
        (LEI, drop(**{**STORED, "saw_content": False, "sequence": None}), "retry", None),
    ],
)
def test_a_stored_response_dropped_before_content_is_re_read_not_sent_again(
    policy: ResumePolicy, state: DropState, action: str, strategy: str | None
) -> None:
    decision = recovery(resume=policy).after_drop(state, T0)
    assert (decision.action, decision.strategy) == (action, strategy)


def test_a_ruled_out_re_read_before_content_is_a_plain_retry() -> None:
    rec = recovery()
    rec.rule_out("starting_after")
    assert rec.after_drop(drop(**{**STORED, "saw_content": False}), T0).action == "retry"


def test_starting_after_ruled_out_falls_back_to_last_event_id() -> None:
    rec = recovery(resume=ALL)
    state = drop(**STORED, has_event_id=True, continuable=True)
    assert rec.strategy(state) == "starting_after"
    rec.rule_out("starting_after")
    assert rec.strategy(state) == "last_event_id"


# ---------------------------------------------------------------- rule: what ends without recovery
@pytest.mark.parametrize(
    ("state", "action"),
    [
        (drop(done=True, saw_content=True), "end"),  # the sentinel came
        (drop(done=True, clean=False, saw_content=True), "end"),  # error after the sentinel
        (drop(clean=True, complete=True, saw_content=True), "end"),  # finished, no sentinel
        (drop(clean=False, complete=True, saw_content=True), "give_up"),  # broken: truncated
        (drop(clean=True, saw_content=True), "give_up"),  # no strategy applies: truncated
    ],
)
def test_a_stream_that_ended_well_is_not_recovered(state: DropState, action: str) -> None:
    assert recovery(resume=LEI).after_drop(state, T0).action == action


def test_bytes_ending_cleanly_with_every_choice_finished_always_end_the_stream() -> None:
    """The reader ends such a stream at once, without describing the drop and asking
    (``StreamReader._bytes_ended``: the usual end of a format without an end marker, as
    Gemini's): the decision must be ``end`` whatever else the stream knows or has left:
    content or not, ids, resumes, a cap spent, a stored response, fallbacks, attempts."""
    from itertools import product

    from fluxstream._core.recovery import Failure

    flags = product([False, True], repeat=6)
    for saw, ids, continuable, stored, fallback, spent in flags:
        state = drop(clean=True, complete=True, saw_content=saw, has_event_id=ids,
                     reconnection_time=5 if ids else None, continuable=continuable,
                     stored_response=stored, response_id="r" if stored else None,
                     length_left=0 if spent else None)
        for attempts, resumes in ((1, 0), (3, 0), (1, 5), (9, 9)):
            rec = recovery(resume=LEI, attempts=attempts)
            rec.resumes = resumes
            failure = Failure("drop", state, fallback=fallback)
            assert rec.decide(failure, T0 + 1e6).action == "end", (state, fallback, attempts)


@pytest.mark.parametrize(
    "ask",
    [
        lambda r: r.after_drop(drop(saw_content=True, has_event_id=True), T0),
        lambda r: r.after_drop(drop(), T0),
        lambda r: r.after_failed_request(tries=1, now=T0),
    ],
)
def test_nothing_is_sent_after_a_cancel(ask: object) -> None:
    rec = recovery(resume=ALL)
    rec.cancelled = True
    assert ask(rec).action == "cancel"  # type: ignore[operator]
    assert rec.strategy(drop(saw_content=True, has_event_id=True)) is None
