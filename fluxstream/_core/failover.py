"""The pure rules of failover, sans-IO: which failures move a stream on, how a segment ended,
and the circuit breaker (which upstreams to skip for a while).

When the stream moves on is :meth:`fluxstream._core.recovery.Recovery.decide`'s (it asks
:func:`may_fail_over` of a failed request through the reader); how it moves is
:mod:`fluxstream._io.failover`'s. Here: the failures of a request another upstream may not
share (:data:`FAILOVER_ERRORS`, :func:`may_fail_over`), a failure or an error event as a
handoff's reason (:func:`reason_of`, :func:`error_event_reason`) and a segment's kind by that
reason (:func:`segment_end`).

An upstream that keeps failing costs every stream its retries and its timeouts before the
stream moves on. :class:`CoolDown` (one per client, shared by its streams) counts each
upstream's failures and, after ``failures`` of them within ``window`` seconds, says to skip it
for ``cooldown`` seconds; the first stream after that tries it again (half-open), and one more
failure starts a new cool-down. ``now`` is passed in, so the rules are tested without clocks.

An upstream is counted by its identity, its label and a fingerprint of its credentials
(:attr:`fluxstream._upstream.Upstream.identity`), not by its label alone: two accounts of one
provider given in two requests share a label, and one account's failures must neither skip
the other nor be forgotten on the other's successes. A stream names its upstreams by label
(unique within it), so it is given :meth:`CoolDown.for_route`: the same counts, read through
its own labels.
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from collections.abc import Collection, Mapping
from typing import Any

from .._reply import SegmentEnd
from ..errors import APIConnectionError, APIStatusError, APITimeoutError, one_line
from .progress import DeadlinePassed

__all__ = [
    "ERROR_EVENT", "FAILOVER_ERRORS", "CoolDown", "error_event_reason", "may_fail_over",
    "reason_of", "segment_end",
]

logger = logging.getLogger("fluxstream")

#: Failures of a request that another upstream may not share.
FAILOVER_ERRORS = (APIConnectionError, APITimeoutError, APIStatusError, DeadlinePassed)
#: How every reason of a failover for an in-stream error event begins.
ERROR_EVENT = "error event"


def may_fail_over(error: BaseException, retry_statuses: Collection[int]) -> bool:
    """Whether a request that failed with ``error`` may be asked of another upstream: any
    failure but a status outside ``retry_statuses`` (the retry policy's and the API's): a
    400 or a 401 says the request is at fault, and another upstream would be asked the same
    wrong question."""
    return not isinstance(error, APIStatusError) or error.status_code in retry_statuses


def reason_of(exc: BaseException | None) -> str:
    """A failure as a handoff's ``reason``: short, one line."""
    if exc is None:
        return "connection closed"
    if isinstance(exc, DeadlinePassed):
        return f"{exc.deadline.value} timeout"
    return one_line(f"{type(exc).__name__}: {exc}")[:200]


def error_event_reason(error_type: str | None, code: str | None, message: str) -> str:
    """An error event as a handoff's ``reason`` (and its segment's ``detail``): it begins with
    :data:`ERROR_EVENT`, then the provider's kind of error and its message, on one line."""
    kind = error_type or code
    text = f"{ERROR_EVENT} ({kind}): {message}" if kind else f"{ERROR_EVENT}: {message}"
    return one_line(text)[:200]


def segment_end(reason: str, delivered: bool) -> SegmentEnd:
    """The kind of a segment that ended for ``reason`` (a handoff's), ``delivered``: whether
    that upstream delivered content. An error event is one whenever it came; otherwise an
    upstream that delivered content and broke off was dropped, one that delivered none
    failed (a status, a connect error, no first token in time, a drop before content)."""
    if reason.startswith(ERROR_EVENT):
        return SegmentEnd.ERROR_EVENT
    return SegmentEnd.DROPPED if delivered else SegmentEnd.FAILED


#: The most upstreams whose failures or cool-down one breaker keeps (requests may each give
#: their own fallbacks, so the set is open): past it, the longest-known entry goes first.
MAX_ENTRIES = 4096


class CoolDown:
    """Failures per upstream, and until when each one is skipped."""

    def __init__(self, failures: int, window: float, cooldown: float) -> None:
        self.failures = failures
        self.window = window
        self.cooldown = cooldown
        self._recent: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}
        #: A stream's labels -> the identities counted (empty: labels are identities).
        self._identities: Mapping[str, str] = {}

    def for_route(self, identities: Mapping[str, str]) -> CoolDown:
        """This breaker as one stream uses it: the upstreams it names by label (``label ->
        identity``) counted by identity, with every other stream's counts."""
        view = copy.copy(self)  # shares the counts: a shallow copy keeps the same dicts
        view._identities = identities
        return view

    def _key(self, label: str) -> str:
        return self._identities.get(label, label)

    def cooling(self, label: str, now: float) -> bool:
        """Whether ``label`` is to be skipped at ``now``."""
        key = self._key(label)
        until = self._until.get(key)
        if until is None:
            return False
        if now >= until:
            del self._until[key]
            return False
        return True

    def failed(self, label: str, now: float) -> None:
        """``label`` failed at ``now``; past the threshold it cools down."""
        key = self._key(label)
        recent = self._recent.get(key)
        if recent is None:
            recent = self._recent[key] = deque()
            _bound(self._recent)
        recent.append(now)
        while recent and now - recent[0] > self.window:
            recent.popleft()
        if len(recent) >= self.failures:
            del self._recent[key]
            self._until[key] = now + self.cooldown
            _bound(self._until)
            logger.warning(
                "upstream %s failed %d times within %.0fs: skipped for %.0fs",
                label, self.failures, self.window, self.cooldown,
            )

    def succeeded(self, label: str) -> None:
        """``label`` delivered content: its count starts over."""
        self._recent.pop(self._key(label), None)


def _bound(entries: dict[str, Any]) -> None:
    """At most :data:`MAX_ENTRIES` entries: the first known goes (dicts keep their order)."""
    while len(entries) > MAX_ENTRIES:
        del entries[next(iter(entries))]
