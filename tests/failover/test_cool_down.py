"""The circuit breaker's rules, sans-IO (``now`` is passed in): counted per upstream identity,
read by each stream through its own labels, and bounded in memory however many upstreams
requests name."""

from __future__ import annotations

import logging

import pytest

from fluxstream._core import failover
from fluxstream._core.failover import CoolDown


def test_a_route_reads_the_counts_of_its_upstreams_identities() -> None:
    breaker = CoolDown(failures=2, window=30, cooldown=60)
    first = breaker.for_route({"up": "up#account-a"})
    second = breaker.for_route({"up": "up#account-b"})
    again = breaker.for_route({"renamed": "up#account-a"})
    first.failed("up", 0)
    second.succeeded("up")  # another account's success resets nothing of this one's
    first.failed("up", 1)
    assert first.cooling("up", 2) and again.cooling("renamed", 2)
    assert not second.cooling("up", 2)
    assert not first.cooling("up", 61)  # half-open after the cool-down


def test_a_failure_is_logged_by_label_never_by_identity(caplog: pytest.LogCaptureFixture) -> None:
    view = CoolDown(failures=1, window=30, cooldown=5).for_route({"up": "up#fingerprint"})
    with caplog.at_level(logging.WARNING, logger="fluxstream"):
        view.failed("up", 0)
    assert "upstream up failed" in caplog.text and "fingerprint" not in caplog.text


def test_old_failures_leave_the_window() -> None:
    breaker = CoolDown(failures=2, window=10, cooldown=60)
    breaker.failed("a", 0)
    breaker.failed("a", 11)
    assert not breaker.cooling("a", 11)
    breaker.failed("a", 12)
    assert breaker.cooling("a", 12)


def test_memory_is_bounded_whatever_the_number_of_upstreams(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(failover, "MAX_ENTRIES", 8)
    breaker = CoolDown(failures=2, window=30, cooldown=60)
    for i in range(100):
        breaker.failed(f"once-{i}", 0)  # counted, never cooled
    cooled = CoolDown(failures=1, window=30, cooldown=60)
    for i in range(100):
        cooled.failed(f"cooled-{i}", 0)
    assert len(breaker._recent) == 8 and len(cooled._until) == 8
    assert cooled.cooling("cooled-99", 1) and not cooled.cooling("cooled-0", 1)
