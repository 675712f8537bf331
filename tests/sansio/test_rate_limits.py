"""What a response's headers say, read by ``RateLimits``: every provider's names, resets as
times, retry advice as the official SDKs read it, and malformed values skipped, never raised."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxstream import RateLimit, RateLimits, RetryPolicy
from fluxstream._core.rate_limits import RATE_LIMIT_KINDS, parse_duration

T0 = 1_765_000_000.0  # the time the response arrived, in every test
AT_T0 = datetime.fromtimestamp(T0, timezone.utc)

OPENAI = {
    "x-ratelimit-limit-requests": "60",
    "x-ratelimit-remaining-requests": "59",
    "x-ratelimit-reset-requests": "1s",
    "x-ratelimit-limit-tokens": "150000",
    "x-ratelimit-remaining-tokens": "149984",
    "x-ratelimit-reset-tokens": "6m0s",
    "x-request-id": "req_abc123",
}
ANTHROPIC = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "0",
    "anthropic-ratelimit-requests-reset": "2025-12-06T05:33:40Z",
    "anthropic-ratelimit-input-tokens-limit": "30000",
    "anthropic-ratelimit-input-tokens-remaining": "29000",
    "anthropic-ratelimit-input-tokens-reset": "2025-12-06T05:33:20.5+00:00",
    "anthropic-ratelimit-output-tokens-limit": "8000",
    "anthropic-ratelimit-output-tokens-remaining": "7000",
    "anthropic-ratelimit-output-tokens-reset": "2025-12-06T05:33:21Z",
    "request-id": "req_011CV",
}


def seconds(after: float) -> datetime:
    return datetime.fromtimestamp(T0 + after, timezone.utc)


def test_openai_s_headers_per_kind_with_resets_as_times() -> None:
    limits = RateLimits(httpx.Headers(OPENAI), T0)
    assert limits.requests == RateLimit(60, 59, seconds(1))
    assert limits.tokens == RateLimit(150000, 149984, seconds(360))
    assert limits.input_tokens is None and limits.output_tokens is None
    assert limits.request_id == "req_abc123"
    assert limits.requests is not None and limits.requests.reset_after(T0 + 0.25) == 0.75


def test_anthropic_s_headers_per_kind_with_resets_as_times() -> None:
    limits = RateLimits(httpx.Headers(ANTHROPIC), T0)
    assert limits.requests == RateLimit(
        50, 0, datetime(2025, 12, 6, 5, 33, 40, tzinfo=timezone.utc))
    assert limits.input_tokens == RateLimit(
        30000, 29000, datetime(2025, 12, 6, 5, 33, 20, 500000, tzinfo=timezone.utc))
    assert limits.output_tokens is not None and limits.output_tokens.remaining == 7000
    assert limits.tokens is None
    assert limits.request_id == "req_011CV"


def test_the_raw_headers_stay_reachable_names_in_lower_case() -> None:
    limits = RateLimits(httpx.Headers({"X-RateLimit-Limit-Requests": "5", "Server": "x"}), T0)
    assert limits.headers["x-ratelimit-limit-requests"] == "5"
    assert limits.headers["server"] == "x"
    assert limits.requests == RateLimit(5, None, None)


@pytest.mark.parametrize(("value", "expected"), [
    ("1s", 1.0), ("6m0s", 360.0), ("1h2m3.5s", 3723.5), ("20ms", 0.02), ("0.5s", 0.5),
    ("7.66s", 7.66), ("2m", 120.0), ("1m30ms", 60.03), ("12", 12.0),
    ("", None), ("s", None), ("1x", None), ("-1s", None), ("-3", None), ("inf", None),
    ("nan", None), ("1s1s", None), ("1e400", None),
])
def test_openai_s_durations(value: str, expected: float | None) -> None:
    got = parse_duration(value)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_plain_unix_time_is_a_time_not_a_duration() -> None:
    limits = RateLimits({"x-ratelimit-reset-requests": "1765000100"}, T0)
    assert limits.requests == RateLimit(None, None, seconds(100))


class Counting(dict[str, str]):
    """Headers that count what is read of them."""

    reads = 0

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        Counting.reads += 1
        return super().get(name, default)

    def items(self) -> Any:
        Counting.reads += 1
        return super().items()


def test_nothing_is_read_until_asked_and_nothing_twice() -> None:
    Counting.reads = 0
    limits = RateLimits(Counting(OPENAI), T0)
    assert Counting.reads == 0
    assert limits.request_id == "req_abc123"
    read = Counting.reads
    assert limits.request_id == "req_abc123" and Counting.reads == read
    assert limits.requests is not None
    read = Counting.reads
    assert limits.requests is not None and Counting.reads == read


@pytest.mark.parametrize(("headers", "expected"), [
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # milliseconds first
    ({"retry-after": "2"}, 2.0),
    ({"retry-after": "0.25"}, 0.25),
    ({"retry-after-ms": "soon", "retry-after": "3"}, 3.0),  # a bad one is skipped
    ({"retry-after-ms": "nan"}, None),
    ({"retry-after": "-4"}, 0.0),
    ({"retry-after": "Sat, 06 Dec 2025 05:33:40 GMT"}, None),  # in the past of T0: 0 below
    ({"retry-after": "not a date"}, None),
    ({}, None),
])
def test_retry_after_as_the_official_sdks_read_it(
    headers: dict[str, str], expected: float | None
) -> None:
    got = RateLimits(headers, T0).retry_after
    if "GMT" in headers.get("retry-after", ""):
        assert got == 0.0
    else:
        assert got == expected


def test_an_http_date_counts_from_the_response() -> None:
    stamp = "Sat, 06 Dec 2025 05:46:50 GMT"  # T0 + 10
    assert RateLimits({"retry-after": stamp}, T0).retry_after == pytest.approx(10.0)


@pytest.mark.parametrize(("value", "expected"), [
    ("true", True), ("false", False), (" true ", True), ("True", None), ("1", None),
    ("", None), (None, None),
])
def test_x_should_retry_only_when_it_says_exactly(value: str | None, expected: bool | None) -> None:
    headers = {} if value is None else {"x-should-retry": value}
    assert RateLimits(headers, T0).should_retry is expected


@pytest.mark.parametrize(("status", "should", "expected"), [
    (429, None, True), (400, None, False), (400, True, True), (503, False, False),
    (429, False, False), (409, True, True),
])
def test_the_retry_policy_obeys_x_should_retry_over_the_status(
    status: int, should: bool | None, expected: bool
) -> None:
    assert RetryPolicy().retryable(status, should) is expected


@pytest.mark.parametrize("value", [
    "req\r\nX-Injected: 1", "req id", "é", "x" * 201, "",
])
def test_a_request_id_that_could_forge_a_log_line_is_not_kept(value: str) -> None:
    assert RateLimits({"x-request-id": value}, T0).request_id is None
    assert RateLimits({"request-id": value, "x-request-id": value}, T0).request_id is None


def test_exhausted_is_the_latest_reset_of_a_used_up_kind_still_to_come() -> None:
    headers = {**OPENAI, "x-ratelimit-remaining-requests": "0",
               "x-ratelimit-remaining-tokens": "0"}
    limits = RateLimits(headers, T0)
    assert limits.exhausted(T0) == seconds(360)
    assert limits.exhausted(T0 + 400) is None
    assert RateLimits(OPENAI, T0).exhausted(T0) is None


def test_an_unknown_kind_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="kind"):
        RateLimits({}, T0).of("minutes")


HEADER_NAMES = st.sampled_from([
    *(f"x-ratelimit-{part}-{kind.replace('_', '-')}" for part in ("limit", "remaining", "reset")
      for kind in RATE_LIMIT_KINDS),
    *(f"anthropic-ratelimit-{kind.replace('_', '-')}-{part}"
      for part in ("limit", "remaining", "reset") for kind in RATE_LIMIT_KINDS),
    "retry-after", "retry-after-ms", "x-should-retry", "x-request-id", "request-id",
])
VALUES = st.one_of(
    st.text(max_size=80),
    st.sampled_from(["9" * 5000, "1e999", "-0", "99999999999999999999999", "2025-13-45T99:99Z",
                     "Mon, 99 Foo 9999", "0x10", "١٢٣", "²", "9999-12-31T23:59:59Z"]),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(headers=st.dictionaries(HEADER_NAMES, VALUES, max_size=12))
def test_malformed_values_are_skipped_never_raised(headers: dict[str, str]) -> None:
    limits = RateLimits(headers, T0)
    for kind in RATE_LIMIT_KINDS:
        stated = limits.of(kind)
        if stated is not None:
            assert stated.limit is None or stated.limit >= 0
            assert stated.remaining is None or stated.remaining >= 0
            assert stated.reset is None or stated.reset.tzinfo is not None
    after = limits.retry_after
    assert after is None or after >= 0
    assert limits.should_retry in (True, False, None)
    assert limits.request_id is None or limits.request_id.isprintable()
    limits.exhausted(T0)
    repr(limits)
