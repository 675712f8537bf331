"""``retry:`` is read as the base-ten integer the spec says, whatever its length in digits.

Values longer than ten digits are clamped to ``MAX_RETRY_MS`` without building a huge int,
but the length was taken before leading zeros were dropped: ``retry: 00000000001000`` (one
second) became 2**31-1 ms (24.8 days)."""

from __future__ import annotations

import pytest

from fluxstream.sse import MAX_RETRY_MS, SSEDecoder


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"1000", 1000),
        (b"00000000001000", 1000),
        (b"0" * 5000 + b"7", 7),
        (b"0" * 20, 0),
        (b"0", 0),
        (b"2147483647", MAX_RETRY_MS),
        (b"2147483648", MAX_RETRY_MS),
        (b"0002147483648", MAX_RETRY_MS),
        (b"9" * 5000, MAX_RETRY_MS),
        (b"99999999999", MAX_RETRY_MS),
    ],
)
def test_retry_is_the_integer_value_clamped(value: bytes, expected: int) -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"retry: " + value + b"\ndata: x\n\n")
    assert decoder.reconnection_time == expected
    assert events[0].retry == expected
    events = SSEDecoder().feed(b"retry:" + value + b"\r\ndata: x\r\n\r\n")
    assert events[0].retry == expected
