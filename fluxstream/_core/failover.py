"""The circuit breaker of failover, sans-IO: which upstreams to skip for a while.

An upstream that keeps failing costs every stream its retries and its timeouts before the
stream moves on. :class:`CoolDown` (one per client, shared by its streams) counts each
upstream's failures and, after ``failures`` of them within ``window`` seconds, says to skip it
for ``cooldown`` seconds; the first stream after that tries it again (half-open), and one more
failure starts a new cool-down. ``now`` is passed in, so the rules are tested without clocks.

An upstream is counted by its identity, its label and a fingerprint of its credentials
(:attr:`fluxstream.upstream.Upstream.identity`), not by its label alone: two accounts of one
provider given in two requests share a label, and one account's failures must neither skip
the other nor be forgotten on the other's successes. A stream names its upstreams by label
(unique within it), so it is given :meth:`CoolDown.for_route`: the same counts, read through
its own labels.
"""

from __future__ import annotations

import copy
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["CoolDown"]

logger = logging.getLogger("fluxstream")


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
