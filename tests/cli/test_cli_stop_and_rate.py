"""The summary says how each choice stopped in one vocabulary for every API, and a
tokens-per-second rate only when there were enough tokens over enough time to measure one."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import run_cli

from fluxstream.cli.render import MIN_RATE_SECONDS, _rate
from fluxstream.server import ServerThread

STOP = re.compile(r"^stop:\s+(\S+) \(choice (\d+)(?:, finish reason (.+))?\)$", re.M)


@pytest.fixture
def server() -> Iterator[Any]:
    with ServerThread(port=0) as srv:
        yield srv


@pytest.mark.parametrize(
    ("fmt", "raw"),
    [("responses", '"incomplete"'), ("anthropic_messages", '"max_tokens"')],
)
def test_a_reply_cut_by_max_tokens_stops_for_length_in_every_format(
    server: Any, fmt: str, raw: str
) -> None:
    result = run_cli("chat", "--base-url", server.base_url, "--format", fmt, "--max-tokens",
                     "5", "rain")
    assert result.returncode == 0, result.stdout + result.stderr
    assert STOP.findall(result.stdout) == [("length", "0", raw)]
    assert "finish reason:" not in result.stdout  # no raw-only line any more


def test_a_plain_stop_is_said_once(server: Any) -> None:
    result = run_cli("chat", "--base-url", server.base_url, "rain")
    assert result.returncode == 0, result.stdout + result.stderr
    assert STOP.findall(result.stdout) == [("stop", "0", "")]


def test_no_rate_for_a_reply_too_fast_to_measure(server: Any) -> None:
    """30 tokens from a local server arrive within milliseconds: a rate computed from them
    is noise (hundreds of thousands of tokens/s), so the summary says the span was too short
    to measure. (On a
    loaded machine the client may be descheduled long enough between two reads to make the
    span measurable: then a rate is shown, but over at least MIN_RATE_SECONDS, so a small
    one.)"""
    result = run_cli("chat", "--base-url", server.base_url, "rain")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("tokens/s:")]
    if re.fullmatch(r"tokens/s:\s+- \(30 tokens in [\d.]+ ms: too short to measure\)", line):
        return
    rate = float(line.split()[1])
    assert rate <= 30 / MIN_RATE_SECONDS, line


def test_a_rate_for_a_reply_that_took_its_time(server: Any) -> None:
    result = run_cli("chat", "--base-url", server.base_url, "--header",
                     "X-Fluxstream-Fault: drip=0.1", "rain")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith("tokens/s:")]
    rate = float(line.split()[1])
    # 30 tokens 100 ms apart: ~10/s. A loaded machine mostly makes it slower; a client held
    # up after the first token catches up in a burst and measures faster, but a stall of
    # over 2 s would be needed to pass 40/s (or to fall under MIN_RATE_SECONDS).
    assert 1 <= rate <= 40, line


@pytest.mark.parametrize(("count", "span"), [(30, 0.2935), (30, 0.15), (10, 0.1), (200, 2.0)])
def test_a_rate_is_shown_for_a_model_at_a_hundred_tokens_a_second(count: int, span: float) -> None:
    """30 tokens in 293.5 ms is ~100 tokens/s, a rate any user can read off a model: it was
    worded "too fast to measure" (the span threshold was 0.5 s)."""
    assert _rate(count, span) == f"{count / span:.0f}"


@pytest.mark.parametrize(("count", "span"), [(30, 0.00005), (30, 0.05), (5, 2.0), (9, 0.3)])
def test_no_rate_says_what_was_too_little_without_calling_it_fast(count: int, span: float) -> None:
    text = _rate(count, span)
    assert text.startswith("- (") and "fast" not in text
    assert ("too short" in text) == (span < MIN_RATE_SECONDS)
