"""The circuit breaker of failover, sans-IO: which upstreams to skip for a while.

An upstream that keeps failing costs every stream its retries and its timeouts before the
stream moves on. :class:`CoolDown` (one per client, shared by its streams) counts each
upstream's failures and, after ``failures`` of them within ``window`` seconds, says to skip it
for ``cooldown`` seconds; the first stream after that tries it again (half-open), and one more
failure starts a new cool-down. ``now`` is passed in, so the rules are tested without clocks.
"""

from __future__ import annotations

import logging
from collections import deque

__all__ = ["CoolDown"]

logger = logging.getLogger("fluxstream")


class CoolDown:
    """Failures per upstream label, and until when each one is skipped."""

    def __init__(self, failures: int, window: float, cooldown: float) -> None:
        self.failures = failures
        self.window = window
        self.cooldown = cooldown
        self._recent: dict[str, deque[float]] = {}
        self._until: dict[str, float] = {}

    def cooling(self, label: str, now: float) -> bool:
        """Whether ``label`` is to be skipped at ``now``."""
        until = self._until.get(label)
        if until is None:
            return False
        if now >= until:
            del self._until[label]
            return False
        return True

    def failed(self, label: str, now: float) -> None:
        """``label`` failed at ``now``; past the threshold it cools down."""
        recent = self._recent.setdefault(label, deque())
        recent.append(now)
        while recent and now - recent[0] > self.window:
            recent.popleft()
        if len(recent) >= self.failures:
            recent.clear()
            self._until[label] = now + self.cooldown
            logger.warning(
                "upstream %s failed %d times within %.0fs: skipped for %.0fs",
                label, self.failures, self.window, self.cooldown,
            )

    def succeeded(self, label: str) -> None:
        """``label`` delivered content: its count starts over."""
        self._recent.pop(label, None)
