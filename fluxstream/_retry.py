"""Retry and resume policies: plain values, no I/O, so they are easy to test and to share.

Two different situations, two policies:

* :class:`RetryPolicy` — the request failed *before any content arrived* (connect error, 429,
  500/502/503/504, an error event before the first delta). Nothing was shown to anyone, so
  sending the same request again is always safe. Exponential backoff with full jitter (the
  AWS architecture blog's "full jitter": ``uniform(0, min(cap, base * 2**attempt))``), the
  server's ``Retry-After`` (``retry-after-ms`` first) honoured when it is longer, bounded by
  attempts and by total time; a provider's ``x-should-retry: true``/``false`` decides over the
  status whether to try again at all, as the official SDKs let it.
* :class:`ResumePolicy` — the connection dropped *after content arrived*. Text was shown, so a
  plain retry would show it twice. Strategies, best first:

  1. ``last_event_id`` (on by default, used only when the stream carried ``id:`` fields):
     reconnect with ``Last-Event-ID`` after the server's ``retry:`` delay; the server sends
     only later events, and anything at or before what was delivered is dropped anyway.
     Safe whenever the server implements the SSE resume contract.
  2. ``continuation`` (opt-in): a new request with the partial assistant text appended as an
     assistant message (``prefix: true``, the flag DeepSeek/Mistral/Moonshot-style prefix
     completion uses), the overlap cut so the joined text is exactly old + new. Safe only for
     providers that honour assistant prefixes; the continuation is a new sample, not a replay.
  3. ``restart`` (opt-in): a fresh generation, announced by a :class:`~fluxstream._events.Reset`
     event; offsets start again at 0 and the reply holds only the new attempt. Always safe for
     renderers that honour ``Reset`` (they replace instead of append).

  0. ``starting_after`` (on by default, used only for a Responses API stream whose request had
     ``background: true``, once its response id and a ``sequence_number`` were seen): OpenAI's
     own resume, ``GET /responses/{id}?stream=true&starting_after=N`` with ``N`` the last
     sequence number delivered; the provider replays the stored response's later events, and
     any event at or below ``N`` is dropped anyway. Tried before ``last_event_id``.

  Without a strategy that applies, a drop stays ``truncated``, exactly as before.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["RETRYABLE_STATUS", "ResumePolicy", "RetryPolicy"]

#: Statuses worth another try: rate limited, or a server/gateway that failed before answering.
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Retries before the first content. ``RetryPolicy.off()`` disables them.

    :param max_attempts: total attempts, the first included (1 = no retry).
    :param base_delay: seconds; the backoff cap doubles from here each attempt.
    :param max_delay: the largest single wait (also caps a server's ``Retry-After``).
    :param total_timeout: give up once this many seconds have passed since the first attempt.
    """

    max_attempts: int = 3
    base_delay: float = 0.5
    max_delay: float = 8.0
    total_timeout: float = 60.0
    retry_status: frozenset[int] = field(default=RETRYABLE_STATUS)

    @classmethod
    def off(cls) -> RetryPolicy:
        return cls(max_attempts=1)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.total_timeout < 0:
            raise ValueError("delays and timeouts must not be negative")

    def retryable(self, status: int, should_retry: bool | None = None) -> bool:
        """Whether a response of ``status`` is worth another try: the provider's
        ``x-should-retry`` (``should_retry``) when it said ``true`` or ``false``, as the
        official SDKs obey it, else :attr:`retry_status`."""
        return status in self.retry_status if should_retry is None else should_retry

    def delay(
        self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        cap = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        jittered = (rng or random).uniform(0.0, cap)
        if retry_after is not None:
            return min(self.max_delay, max(jittered, retry_after))
        return jittered


@dataclass(frozen=True)
class ResumePolicy:
    """How to continue after a mid-stream drop; see the module docstring for when each is safe.

    :param starting_after: re-read a stored (``background: true``) Responses API response
        after the last ``sequence_number`` delivered (OpenAI's own resume).
    :param last_event_id: reconnect with ``Last-Event-ID`` when the stream carried ids.
    :param continuation: re-request with the partial text as an assistant prefix.
    :param restart: start a fresh generation (announced by a ``Reset`` event).
    :param max_resumes: how many drops one logical stream may survive.
    :param default_delay: seconds to wait before reconnecting when the server sent no ``retry:``.
    :param max_delay: the largest wait honoured from a server's ``retry:`` field.
    :param prefix_flag: extra fields added to the appended assistant message (continuation).
    :param min_overlap: the shortest echoed overlap cut from a continuation (code points).
    """

    last_event_id: bool = True
    continuation: bool = False
    restart: bool = False
    max_resumes: int = 5
    default_delay: float = 0.0
    max_delay: float = 10.0
    prefix_flag: dict[str, object] = field(default_factory=lambda: {"prefix": True})
    min_overlap: int = 8
    starting_after: bool = True

    @classmethod
    def off(cls) -> ResumePolicy:
        return cls(last_event_id=False, continuation=False, restart=False, max_resumes=0,
                   starting_after=False)

    def reconnect_delay(self, retry_ms: int | None) -> float:
        if retry_ms is None:
            return self.default_delay
        return min(self.max_delay, retry_ms / 1000.0)
