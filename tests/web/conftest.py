"""Fixtures of the web suite: the embedded server as the upstream. Every test here runs on
asyncio (uvicorn, and hypercorn's asyncio worker)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fluxstream.server import ServerThread


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Every test module of the web suite runs on asyncio alone."""
    if isinstance(collector, pytest.Module):
        collector.add_marker(pytest.mark.asyncio_only)


@pytest.fixture
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running
