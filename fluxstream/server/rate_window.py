"""A rate limit the embedded server enforces (the ``rate-limit=N`` fault), and the headers
in which it states it, as OpenAI or Anthropic do.

One fixed window per server: the first request opens it, ``N`` requests fit in it, the
next ones are answered ``429`` (with ``retry-after-ms`` the time left and
``x-should-retry: true``) until it closes. Every answer while the fault is on states the
limit in the chosen provider's headers (``rate-headers=openai`` or ``anthropic``), with
fixed token limits beside the request limit, so a client reads both kinds of names over a
real socket. Time comes from the caller (``now``), so the rules are tested without sleeping.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["RateWindow", "rate_headers"]

#: Token limits stated beside the request limit (not enforced): every kind has a value.
TOKENS = (100_000, 99_000)
INPUT_TOKENS = (80_000, 79_500)
OUTPUT_TOKENS = (20_000, 19_500)
TOKEN_RESET = 360.0  # seconds, "6m0s"


class RateWindow:
    """The requests counted in the current window (one per server)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.count = 0

    def take(self, limit: int, window: float, now: float) -> tuple[bool, int, float]:
        """Count one request at ``now`` (wall clock seconds): whether it fits, the requests
        left after it, and the seconds until the window closes."""
        if self.start is None or now - self.start >= window:
            self.start, self.count = now, 0
        left = window - (now - self.start)
        if self.count >= limit:
            return False, 0, left
        self.count += 1
        return True, limit - self.count, left


def _duration(seconds: float) -> str:
    """OpenAI's form of a reset: ``6m0s``, ``1.5s``, ``20ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:g}s" if minutes else f"{rest:g}s"


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def rate_headers(
    style: str, limit: int, remaining: int, reset_in: float, now: float, request_id: str
) -> list[tuple[str, str]]:
    """The headers stating a request limit (and the fixed token limits) in ``style``."""
    if style == "anthropic":
        kinds = {"requests": (limit, remaining, reset_in), "tokens": (*TOKENS, TOKEN_RESET),
                 "input-tokens": (*INPUT_TOKENS, TOKEN_RESET),
                 "output-tokens": (*OUTPUT_TOKENS, TOKEN_RESET)}
        out = [("request-id", request_id)]
        for kind, (most, left, reset) in kinds.items():
            out += [(f"anthropic-ratelimit-{kind}-limit", str(most)),
                    (f"anthropic-ratelimit-{kind}-remaining", str(left)),
                    (f"anthropic-ratelimit-{kind}-reset", _stamp(now + reset))]
        return out
    return [
        ("x-ratelimit-limit-requests", str(limit)),
        ("x-ratelimit-remaining-requests", str(remaining)),
        ("x-ratelimit-reset-requests", _duration(reset_in)),
        ("x-ratelimit-limit-tokens", str(TOKENS[0])),
        ("x-ratelimit-remaining-tokens", str(TOKENS[1])),
        ("x-ratelimit-reset-tokens", _duration(TOKEN_RESET)),
    ]
