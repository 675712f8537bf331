"""The decision to retry, resume, hand off or end, as a small sans-IO object.

:class:`Recovery` holds the counters of one logical stream (requests sent, resumes, restarts,
when the first request went out, the output spent of its length cap) and the two policies
(:mod:`fluxstream._retry`). Whenever something goes wrong the reader describes it as a
:class:`Failure` (what failed and what the stream knows then) and asks :meth:`Recovery.decide`,
which answers a :class:`Decision`:

* ``end``      — nothing to recover: the reply already ended well (the sentinel came, or the
  bytes ended cleanly after every choice finished);
* ``retry``    — nothing was shown yet: send the same request again after ``delay`` seconds;
* ``resume``   — content was shown: continue by ``strategy`` after ``delay`` seconds;
* ``hand_off`` — this upstream's own attempts and strategies are spent: the next upstream
  takes the reply over (failover);
* ``continue_here`` — a continuation whose own resume cannot apply is continued again on the
  upstream serving it (``otherwise``: what follows when it cannot be);
* ``end_at_length`` — a continuation would be next, but the output delivered already reaches
  the request's length cap: the reply ends ``finished``, stop ``length``, nothing asked;
* ``give_up``  — keep the partial reply and end as without fallbacks (``truncated`` for a
  drop; the typed error of a deadline or a failed request; the error event delivered);
* ``cancel``   — the caller asked to stop; nothing more is sent.

No clock, socket or event loop here: ``now`` is passed in and the jitter's random source can be
too, so every rule of the README's "Retries, resume and content keys" and "Failover" sections
is tested as a table (``tests/sansio/test_recovery.py``, ``tests/sansio/test_failover_rules.py``).
The reader only performs what the decision says.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from .._retry import ResumePolicy, RetryPolicy
from .._timeouts import Deadline
from .length_budget import LengthBudget

__all__ = [
    "STRATEGIES", "Decision", "DropState", "Failure", "Recovery", "is_transient_error",
]

Action = Literal[
    "end", "retry", "resume", "hand_off", "continue_here", "end_at_length", "give_up", "cancel",
]
#: What went wrong, as the reader tells it (see :class:`Failure`).
FailureKind = Literal[
    "drop", "deadline", "error_event", "request_failed", "reconnect_failed", "rejected", "token",
]
Strategy = Literal["starting_after", "last_event_id", "continuation", "restart"]
#: Resume strategies, best first (see :class:`~fluxstream._retry.ResumePolicy`).
STRATEGIES: tuple[Strategy, ...] = ("starting_after", "last_event_id", "continuation", "restart")

#: Words in an error event that mean the provider was busy, not that the request was wrong.
_TRANSIENT_ERROR_WORDS = (
    "overload", "rate_limit", "rate limit", "server_error", "internal", "unavailable",
    "timeout", "timed out", "try again", "capacity", "busy", "429", "500", "502", "503", "504",
)


def is_transient_error(error_type: str | None, code: str | None, message: str | None) -> bool:
    """Whether an error event reads like a busy provider (worth another try before content)."""
    text = f"{error_type} {code} {message}".lower()
    return any(word in text for word in _TRANSIENT_ERROR_WORDS)


@dataclass(frozen=True)
class Decision:
    """What to do next; ``delay`` in seconds, ``strategy`` only for ``resume``, ``otherwise``
    only for ``continue_here`` (``hand_off`` or ``give_up``: what follows when the reply
    cannot be continued there). A ``hand_off`` that finds no upstream to take the reply
    gives up."""

    action: Action
    delay: float = 0.0
    strategy: Strategy | None = None
    reason: str = ""
    otherwise: Action | None = None


@dataclass(frozen=True)
class DropState:
    """What the parser knows when the bytes of one connection ended (cleanly or not).

    :param clean: the bytes ended without a transport error.
    :param done: the sentinel (or a whole JSON body) arrived.
    :param complete: every choice has a finish reason.
    :param saw_content: any text, reasoning, refusal or tool-call delta was delivered.
    :param has_event_id: the stream carried ``id:`` fields (``Last-Event-ID`` can resume it).
    :param reconnection_time: the server's ``retry:`` field in milliseconds, if any.
    :param continuable: a continuation could extend the reply (one text-only choice).
    :param stored_response: the request asked the provider to store the response (a
        Responses API request with ``background: true``), so it can be streamed again.
    :param response_id: the id of the response being streamed (Responses API), if known.
    :param sequence: the highest ``sequence_number`` delivered (Responses API), if any.
    :param length_left: what is left of the request's length cap for a continuation (see
        :class:`~fluxstream._core.length_budget.LengthBudget`); ``None``: it has no cap.
    """

    clean: bool
    done: bool
    complete: bool
    saw_content: bool
    has_event_id: bool = False
    reconnection_time: int | None = None
    continuable: bool = False
    stored_response: bool = False
    response_id: str | None = None
    sequence: int | None = None
    length_left: int | None = None

    @property
    def cap_spent(self) -> bool:
        """Nothing is left of the length cap: a continuation would deliver past it."""
        return self.length_left is not None and self.length_left <= 0

    @property
    def replayable(self) -> bool:
        """OpenAI's own resume applies: ``GET /responses/{id}?stream=true&starting_after=N``
        streams the events of a stored response after ``N`` (the provider replays them, so
        nothing is a new sample). An id made only of dots names no response: in a URL path it
        is a dot segment (``responses/..`` is the API root), so it is never re-read."""
        return (
            self.stored_response
            and bool(self.response_id and self.response_id.strip("."))
            and self.sequence is not None
            and self.sequence >= 0
        )


@dataclass(frozen=True)
class Failure:
    """What went wrong with a stream, as the reader saw it, and what it knows then.

    :param kind: ``drop`` (the bytes ended, cleanly or by a transport error), ``deadline``
        (one of the stream's clocks ran out: ``deadline``), ``error_event`` (the parser held
        one back: a stream with an upstream left to move to), ``request_failed`` (the first
        request, or every retry of it, failed before a response), ``reconnect_failed`` (a
        retry, resume or continuation could not reconnect), ``rejected`` (a checked resume
        did not continue the stream; its strategy is ruled out already), ``token`` (not a
        failure: a stream restored from a resume token opens by resuming).
    :param state: what the parser knows (with what is left of the length cap).
    :param fallback: another upstream is left to take the reply over.
    :param stopped: the caller cancelled or closed the stream (or its client), or it ended.
    :param transient: the error event reads like a busy provider (:func:`is_transient_error`).
    :param retryable: the failed request is one another upstream may not share (not a
        status the retry policy and the API refuse to retry: a 400, a 401).
    :param continued: the rejected reconnect was of a continuation (its ids numbered it).
    :param deadline: the deadline that passed, for ``deadline``.
    """

    kind: FailureKind
    state: DropState
    fallback: bool = False
    stopped: bool = False
    transient: bool = False
    retryable: bool = True
    continued: bool = False
    deadline: Deadline | None = None


_NONE_RULED_OUT: frozenset[str] = frozenset()
_CAP_SPENT = Decision("end_at_length", reason="length cap spent")
_GIVE_UP = Decision("give_up")
_HAND_OFF = Decision("hand_off")


class Recovery:
    """Counters and rules of recovering one logical stream: retrying, resuming, moving to
    another upstream, ending (sans-IO).

    ``attempts`` counts requests sent (every retry and resume included), ``resumes`` drops
    after content that were continued, ``restarts`` fresh generations, ``budget`` the output
    spent of the request's length cap (across upstreams too). A strategy that turned out not
    to work for this server (:meth:`rule_out`) is never chosen again.
    """

    __slots__ = (
        "_rng", "_ruled_out", "attempts", "budget", "cancelled", "restarts", "resume",
        "resumes", "retry", "started",
    )

    def __init__(
        self,
        retry: RetryPolicy,
        resume: ResumePolicy,
        *,
        rng: random.Random | None = None,
        budget: LengthBudget | None = None,
    ) -> None:
        self.retry = retry
        self.resume = resume
        self.budget = budget if budget is not None else LengthBudget(None)
        self.attempts = 0
        self.resumes = 0
        self.restarts = 0
        self.started: float | None = None
        self.cancelled = False
        self._rng = rng
        #: Strategies that failed here (see :meth:`rule_out`): empty and shared until one
        #: does, as most streams never resume.
        self._ruled_out: frozenset[str] = _NONE_RULED_OUT

    # ------------------------------------------------------------------ bookkeeping

    def start(self, now: float) -> None:
        """The first request is about to go out: the total retry time counts from here."""
        if self.started is None:
            self.started = now

    def budget_left(self, now: float) -> float:
        """Seconds left of the retry policy's total time (from the first request)."""
        start = self.started if self.started is not None else now
        return self.retry.total_timeout - (now - start)

    def next_upstream(self, now: float) -> None:
        """The stream moved to another upstream: its attempts, resumes and ruled-out
        strategies count afresh there (what failed on one server says nothing of another)."""
        self.attempts = 0
        self.resumes = 0
        self.restarts = 0
        self.started = now
        self._ruled_out = _NONE_RULED_OUT

    def rule_out(self, strategy: str) -> None:
        """``strategy`` failed its check on this server (e.g. ids that do not continue)."""
        self._ruled_out = self._ruled_out | {strategy}

    def _retry_delay(self, attempt: int, retry_after: float | None, now: float) -> float:
        delay = self.retry.delay(attempt, retry_after, self._rng)
        return min(delay, max(0.0, self.budget_left(now)))

    # ------------------------------------------------------------------ the one question

    def decide(self, failure: Failure, now: float) -> Decision:
        """What the stream does about ``failure`` at ``now``: this upstream's own retries
        (before content) and resume strategies (after content) first, as without fallbacks;
        then, with another upstream left, a hand-off; else the end a stream without
        fallbacks has. A continuation with nothing left of the length cap ends at
        ``length`` instead of being asked for; nothing is sent after a cancel."""
        kind, state = failure.kind, failure.state
        if kind == "drop":
            if failure.stopped:
                return Decision("cancel")
            decision = self.after_drop(state, now)
            if decision.action == "give_up" and not state.complete:
                return self._moving_on(failure)
            return decision
        if kind == "deadline":
            deadline = failure.deadline
            if deadline is Deadline.FINISH_GRACE or (
                deadline is Deadline.STALL and state.complete
            ):  # nothing more was due (only heartbeats were left): as the bytes ending
                ended = replace(failure, kind="drop", state=replace(state, clean=True))
                return self.decide(ended, now)
            return self._moving_on(failure)  # at once, even after content
        if kind == "error_event":
            if not failure.transient:  # the request was refused: as without fallbacks
                return _GIVE_UP
            if not state.saw_content:
                retry = self.after_error_event(saw_content=False, transient=True, now=now)
                if retry is not None:
                    return retry
            # After content at once: the busy provider asked again would likely fail again.
            return self._moving_on(failure)
        if kind == "request_failed":  # a 400 or a 401: another upstream would refuse it too
            return self._moving_on(failure) if failure.retryable else _GIVE_UP
        if kind == "reconnect_failed":
            return self._moving_on(failure)
        # rejected, token: this upstream's next strategy, else the text continued there
        decision = self.resume_decision(state)
        if decision.action != "give_up" or not failure.fallback or failure.stopped:
            return decision
        if kind == "rejected" and not failure.continued:
            return self._moving_on(failure)
        if state.cap_spent:
            return _CAP_SPENT
        # A token's reply that cannot be continued there has nothing to resume by.
        return Decision("continue_here", otherwise="hand_off" if kind == "rejected" else "give_up")

    def _moving_on(self, failure: Failure) -> Decision:
        """This upstream's own recovery is spent: the next upstream takes the reply over
        (when one is left and the caller has not stopped), unless it would continue text
        with nothing left of the cap."""
        if not failure.fallback or failure.stopped:
            return _GIVE_UP
        state = failure.state
        if state.saw_content and state.continuable and state.cap_spent:
            return _CAP_SPENT
        return _HAND_OFF

    # ------------------------------------------------------------------ rules

    def after_failed_request(
        self, *, tries: int, now: float, retryable: bool = True, retry_after: float | None = None
    ) -> Decision:
        """A request failed before its response was usable (connect error, timeout, a status).

        ``tries``: the attempts that count against the retry budget (every request so far
        before any content; only this reconnect's own tries after a resume, which gets the
        policy's attempts afresh). ``retryable``: False for a status outside ``retry_status``.
        """
        if self.cancelled:
            return Decision("cancel")
        if not retryable:
            return Decision("give_up", reason="status not retryable")
        if tries >= self.retry.max_attempts or self.budget_left(now) <= 0:
            return Decision("give_up", reason="retries exhausted")
        return Decision("retry", self._retry_delay(tries, retry_after, now))

    def after_error_event(
        self, *, saw_content: bool, transient: bool, now: float
    ) -> Decision | None:
        """An error event arrived; ``None``: deliver it (the reply ends ``failed``).

        Only a transient error (see :func:`is_transient_error`) before any content is retried:
        nothing was shown, so asking again is safe.
        """
        if saw_content or not transient:
            return None
        if self.attempts >= self.retry.max_attempts or self.budget_left(now) <= 0:
            return None
        return Decision(
            "retry", self._retry_delay(self.attempts, None, now), reason="error event"
        )

    def after_drop(self, state: DropState, now: float) -> Decision:
        """The bytes of a connection ended: end, retry (before content), resume, or give up."""
        if self.cancelled:
            return Decision("cancel")
        if state.done or (state.clean and state.complete):
            return Decision("end")
        if not state.saw_content and self._rereadable(state):
            # A stored response keeps generating on the provider's side: sending the request
            # again would start (and bill) a second one. Re-read it instead.
            return self.resume_decision(state)
        if (
            not state.saw_content
            and self.attempts < self.retry.max_attempts
            and self.budget_left(now) > 0
        ):
            return Decision("retry", self._retry_delay(self.attempts, None, now), reason="drop")
        return self.resume_decision(state)

    def resume_decision(self, state: DropState) -> Decision:
        """The best strategy that applies, or ``give_up`` (the drop stays ``truncated``);
        ``end_at_length`` when it is a continuation and nothing is left of the length cap."""
        strategy = self.strategy(state)
        if strategy is None:
            return Decision("give_up", reason="no resume strategy applies")
        if strategy == "continuation" and state.cap_spent:
            return _CAP_SPENT
        if strategy == "last_event_id":
            delay = self.resume.reconnect_delay(state.reconnection_time)
        else:
            delay = self.resume.default_delay
        return Decision("resume", delay, strategy)

    def strategy(self, state: DropState) -> Strategy | None:
        """The best resume strategy for ``state``: policy, limits and ruled-out ones applied."""
        policy = self.resume
        if self.resumes >= policy.max_resumes or self.cancelled:
            return None
        for name in self._allowed(state):
            if name not in self._ruled_out:
                return name
        return None

    def _rereadable(self, state: DropState) -> bool:
        return (
            self.resume.starting_after
            and state.replayable
            and "starting_after" not in self._ruled_out
            and self.resumes < self.resume.max_resumes
        )

    def _allowed(self, state: DropState) -> Iterable[Strategy]:
        policy = self.resume
        # The provider's own replay of a stored response first: it is exact (the events
        # after the last one delivered, verified by their sequence numbers) and works
        # whether or not a gateway numbered the SSE events.
        if policy.starting_after and state.replayable:
            yield "starting_after"
        if policy.last_event_id and state.has_event_id:
            yield "last_event_id"
        if policy.continuation and state.continuable:
            yield "continuation"
        if policy.restart:
            yield "restart"
