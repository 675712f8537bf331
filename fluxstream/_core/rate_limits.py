"""What a provider says in a response's headers: its rate limits, when to try again, its id
for the request. Sans-IO: a mapping of headers in, typed values out.

Why it looks the way it does:

* **Read on first use.** Every response gets a :class:`RateLimits` (a reference to its
  headers and the time it arrived: nothing parsed), so a stream that never asks costs one
  small object per request; the first question parses what it needs and keeps it.
* **Every provider's names, one vocabulary.** OpenAI sends ``x-ratelimit-limit-requests``,
  ``x-ratelimit-remaining-tokens``, ``x-ratelimit-reset-requests`` (a duration: ``6m0s``,
  ``20ms``); Anthropic ``anthropic-ratelimit-requests-limit``, ``-remaining`` and ``-reset``
  (an RFC 3339 time) for requests, tokens, input and output tokens. Each kind becomes one
  :class:`RateLimit` (limit, remaining, reset as a UTC time); the raw headers stay
  reachable (:attr:`RateLimits.headers`).
* **A malformed value is skipped, never raised.** Headers are data from the network: a
  count that is no count, a date that is no date, a value too long to be one, is ``None``.
* **Headers decide nothing about where a request goes.** They say when to retry the same
  request (``retry-after-ms``, ``retry-after``, ``x-should-retry``, as the official SDKs
  read them) and what a caller may want to know; the choice of upstream is never theirs.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["RATE_LIMIT_KINDS", "RateLimit", "RateLimits", "parse_duration", "retry_after_of"]

#: The kinds of limit a provider may state, as :class:`RateLimits` names them.
RATE_LIMIT_KINDS = ("requests", "tokens", "input_tokens", "output_tokens")

#: Longer values are no value any provider sends: skipped unread.
_MAX_VALUE = 64
#: A request id longer than this, or with characters outside printable ASCII, is not kept
#: (it goes into log lines and error messages).
_MAX_ID = 200
_PRINTABLE = re.compile(r"[!-~]+")
# OpenAI's reset durations: "1s", "6m0s", "1h2m3.5s", "20ms", "0.5s".
_DURATION = re.compile(
    r"(?:(\d{1,9}(?:\.\d{1,9})?)h)?(?:(\d{1,9}(?:\.\d{1,9})?)m(?!s))?"
    r"(?:(\d{1,9}(?:\.\d{1,9})?)s)?(?:(\d{1,9}(?:\.\d{1,9})?)ms)?"
)
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: A plain number of seconds this large is a Unix time (2001 on), not a duration.
_UNIX_TIME = 1e9


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One kind of limit as the provider stated it (``None``: not stated, or malformed).

    ``reset`` is when it is full again, a UTC time (from a duration, counted from when the
    response arrived, or from the time the provider gave)."""

    limit: int | None = None
    remaining: int | None = None
    reset: datetime | None = None

    def reset_after(self, now: float | None = None) -> float | None:
        """Seconds from ``now`` (``time.time()``) until the reset (``0.0`` once past it)."""
        if self.reset is None:
            return None
        now = time.time() if now is None else now
        return max(0.0, self.reset.timestamp() - now)


class RateLimits:
    """The rate limits, retry advice and request id of one response, parsed on first use.

    :param headers: the response's headers: any mapping with ``get`` and ``items`` whose
        ``get`` finds a lower-case name (httpx's, aiohttp's and a plain dict with lower-case
        names all do).
    :param received: when the response arrived (``time.time()``): a duration is counted
        from it.
    """

    __slots__ = ("_headers", "_id", "_kinds", "_raw", "received")

    def __init__(self, headers: Any, received: float | None = None) -> None:
        self._headers = headers
        self.received = time.time() if received is None else received
        self._kinds: dict[str, RateLimit | None] | None = None
        self._raw: dict[str, str] | None = None
        self._id: str | bool | None = False  # False: not read yet

    def __repr__(self) -> str:
        stated = ", ".join(
            f"{kind}={limit.remaining}/{limit.limit}"
            for kind in RATE_LIMIT_KINDS if (limit := self.of(kind)) is not None
        )
        return f"<RateLimits {stated or 'none stated'} request_id={self.request_id!r}>"

    # ------------------------------------------------------------------ the raw headers

    @property
    def headers(self) -> Mapping[str, str]:
        """Every header of the response, names in lower case (a copy, made on first use)."""
        raw = self._raw
        if raw is None:
            raw = self._raw = {}
            try:
                for name, value in self._headers.items():
                    raw[str(name).lower()] = str(value)
            except (AttributeError, TypeError, ValueError):
                pass
        return raw

    def _get(self, name: str) -> str | None:
        try:
            value = self._headers.get(name)
        except (AttributeError, TypeError, ValueError):
            return None
        if not isinstance(value, str) or len(value) > _MAX_VALUE:
            return None
        return value.strip()

    # ------------------------------------------------------------------ limits

    def of(self, kind: str) -> RateLimit | None:
        """The limit of ``kind`` (one of :data:`RATE_LIMIT_KINDS`), ``None`` if none stated."""
        kinds = self._kinds
        if kinds is None:
            kinds = self._kinds = {}
        if kind not in kinds:
            if kind not in RATE_LIMIT_KINDS:
                raise ValueError(f"unknown rate limit kind {kind!r}; known: {RATE_LIMIT_KINDS}")
            kinds[kind] = self._parse(kind)
        return kinds[kind]

    @property
    def requests(self) -> RateLimit | None:
        """Requests per window (OpenAI's and Anthropic's)."""
        return self.of("requests")

    @property
    def tokens(self) -> RateLimit | None:
        """Tokens per window (OpenAI's; Anthropic's most restrictive of the two below)."""
        return self.of("tokens")

    @property
    def input_tokens(self) -> RateLimit | None:
        """Input tokens per window (Anthropic's)."""
        return self.of("input_tokens")

    @property
    def output_tokens(self) -> RateLimit | None:
        """Output tokens per window (Anthropic's)."""
        return self.of("output_tokens")

    def _parse(self, kind: str) -> RateLimit | None:
        dashed = kind.replace("_", "-")
        get = self._get
        anthropic = f"anthropic-ratelimit-{dashed}-"
        limit = _count(get(anthropic + "limit"))
        remaining = _count(get(anthropic + "remaining"))
        reset = _time(get(anthropic + "reset"), self.received)
        if limit is None:
            limit = _count(get(f"x-ratelimit-limit-{dashed}"))
        if remaining is None:
            remaining = _count(get(f"x-ratelimit-remaining-{dashed}"))
        if reset is None:
            reset = _time(get(f"x-ratelimit-reset-{dashed}"), self.received)
        if limit is None and remaining is None and reset is None:
            return None
        return RateLimit(limit, remaining, reset)

    def exhausted(self, now: float | None = None) -> datetime | None:
        """The latest reset of a kind whose ``remaining`` is 0 and whose reset is still to
        come at ``now`` (``None``: nothing stated is used up)."""
        now = time.time() if now is None else now
        until: datetime | None = None
        for kind in RATE_LIMIT_KINDS:
            limit = self.of(kind)
            if limit is None or limit.remaining != 0 or limit.reset is None:
                continue
            if limit.reset.timestamp() > now and (until is None or limit.reset > until):
                until = limit.reset
        return until

    # ------------------------------------------------------------------ retry advice, id

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before trying again: ``retry-after-ms``, else ``retry-after``
        (seconds or an HTTP date), as the official SDKs read them; ``None`` if neither."""
        return retry_after_of(self._get, self.received)

    @property
    def should_retry(self) -> bool | None:
        """The provider's ``x-should-retry``: ``True``/``False`` when it says exactly
        ``true``/``false`` (the official SDKs obey it over the status), else ``None``."""
        value = self._get("x-should-retry")
        return True if value == "true" else False if value == "false" else None

    @property
    def request_id(self) -> str | None:
        """The provider's id of the request (``x-request-id``, Anthropic's ``request-id``),
        when it is printable ASCII of a sane length."""
        found = self._id
        if found is False:
            found = self._id = self._find_id()
        return found  # type: ignore[return-value]

    def _find_id(self) -> str | None:
        for name in ("x-request-id", "request-id"):
            try:
                value = self._headers.get(name)
            except (AttributeError, TypeError, ValueError):
                return None
            if isinstance(value, str) and len(value) <= _MAX_ID and _PRINTABLE.fullmatch(value):
                return value
        return None


def retry_after_of(get: Any, received: float) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after`` (seconds or
    an HTTP date, counted from ``received``); ``get`` reads one header. A value that is not
    a finite number is skipped; a negative one is 0."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = get(name)
        if not value:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        if math.isnan(seconds):
            continue
        return max(0.0, seconds / divisor)
    value = get("retry-after")
    if not value:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - received)


def parse_duration(value: str) -> float | None:
    """OpenAI's reset durations (``6m0s``, ``1h2m3.5s``, ``20ms``, a plain number of
    seconds) in seconds; ``None`` for anything else. (A plain number of a Unix time's size
    is a time, not a duration: :func:`_time` reads it so.)"""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    found = _DURATION.fullmatch(value)
    if found is None or not any(found.groups()):
        return None
    hours, minutes, secs, millis = (float(part) if part else 0.0 for part in found.groups())
    return hours * 3600 + minutes * 60 + secs + millis / 1000


def _count(value: str | None) -> int | None:
    if value is None or not value.isdigit() or not value.isascii():
        return None
    return int(value)


def _time(value: str | None, received: float) -> datetime | None:
    """A reset: an RFC 3339 time (Anthropic's), or a duration from ``received``."""
    if not value:
        return None
    if "T" in value or value.count("-") >= 2:
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return when.astimezone(timezone.utc)
    seconds = parse_duration(value)
    if seconds is None:
        return None
    if seconds >= _UNIX_TIME:  # a plain Unix time, as some gateways send
        received = 0.0
    try:
        return _UNIX_EPOCH + timedelta(seconds=received + seconds)
    except OverflowError:
        return None
