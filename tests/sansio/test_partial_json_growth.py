"""A number (or literal-like token) that arrives in many small fragments is read in linear
time. It was kept as a ``str`` grown by ``+=`` once per fragment: each step copied the whole
token, so a 400k-digit number in 1-character fragments took seconds (4x the digits, ~15x
the time). Timing ratio at n and 4n, best of three each (shared machine: generous margin;
linear is ~4x, the old code ~15x)."""

from __future__ import annotations

import time

import pytest

from fluxstream._partial_json import PartialJSON


def _feed_time(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        parser = PartialJSON()
        start = time.process_time()  # CPU time: other processes on a loaded machine do not count
        for char in text:
            parser.feed(char)
        parser.value()
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("make", [lambda n: "[1." + "5" * n + "]", lambda n: "[-" + "7" * n])
def test_long_number_in_small_fragments_is_linear(make: object) -> None:
    assert callable(make)
    small = _feed_time(make(100_000))
    large = _feed_time(make(400_000))
    assert large < 8 * small, (small, large)


def test_long_number_value_is_right() -> None:
    parser = PartialJSON()
    text = "[1." + "25" * 1000 + "e1, 2]"
    for char in text:
        parser.feed(char)
        parser.value()
    assert parser.value() == [float("1." + "25" * 1000 + "e1"), 2]
    parser = PartialJSON()
    for char in "[12":
        parser.feed(char)
    assert parser.value() == [12]
    parser.feed("3")
    assert parser.value() == [123]
    parser.feed(",")
    assert parser.value() == [123]
