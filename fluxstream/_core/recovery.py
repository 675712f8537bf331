"""The decision to retry, resume or give up, as a small sans-IO object.

:class:`Recovery` holds the counters of one logical stream (requests sent, resumes, restarts,
when the first request went out) and the two policies (:mod:`fluxstream.retry`). The stream asks
it one question whenever something goes wrong and gets a :class:`Decision` back:

* ``end``      — nothing to recover: the reply already ended well (the sentinel came, or the
  bytes ended cleanly after every choice finished);
* ``retry``    — nothing was shown yet: send the same request again after ``delay`` seconds;
* ``resume``   — content was shown: continue by ``strategy`` after ``delay`` seconds;
* ``give_up``  — keep the partial reply and end (``truncated`` for a drop; the typed error for
  a failed request);
* ``cancel``   — the caller asked to stop; nothing more is sent.

No clock, socket or event loop here: ``now`` is passed in and the jitter's random source can be
too, so every rule of the README's "Retries, resume and content keys" section is tested as a
table (``tests/sansio/test_recovery.py``). The stream only performs what the decision says.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..retry import ResumePolicy, RetryPolicy

__all__ = ["STRATEGIES", "Decision", "DropState", "Recovery", "is_transient_error"]

Action = Literal["end", "retry", "resume", "give_up", "cancel"]
Strategy = Literal["starting_after", "last_event_id", "continuation", "restart"]
#: Resume strategies, best first (see :class:`~fluxstream.retry.ResumePolicy`).
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
    """What to do next; ``delay`` in seconds, ``strategy`` only for ``resume``."""

    action: Action
    delay: float = 0.0
    strategy: Strategy | None = None
    reason: str = ""


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


_NONE_RULED_OUT: frozenset[str] = frozenset()


class Recovery:
    """Counters and rules of retrying and resuming one logical stream (sans-IO).

    ``attempts`` counts requests sent (every retry and resume included), ``resumes`` drops
    after content that were continued, ``restarts`` fresh generations. A strategy that turned
    out not to work for this server (:meth:`rule_out`) is never chosen again.
    """

    __slots__ = (
        "_rng", "_ruled_out", "attempts", "cancelled", "restarts", "resume", "resumes",
        "retry", "started",
    )

    def __init__(
        self,
        retry: RetryPolicy,
        resume: ResumePolicy,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.retry = retry
        self.resume = resume
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
        """The best strategy that applies, or ``give_up`` (the drop stays ``truncated``)."""
        strategy = self.strategy(state)
        if strategy is None:
            return Decision("give_up", reason="no resume strategy applies")
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
