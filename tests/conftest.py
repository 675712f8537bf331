"""Shared fixtures: a running embedded server for client and server tests.

The ``server`` fixtures run the server on its own event loop in a background thread
(:class:`fluxstream.server.ServerThread`), so they work for every kind of test: anyio tests on
asyncio and trio, pytest-asyncio tests, and plain synchronous tests. Tests that want the server
in their own event loop use ``aserver`` (anyio tests only) or ``fluxstream.server.serve``.

``anyio_backend`` is parametrised over asyncio and trio, so every ``@pytest.mark.anyio`` test
runs on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fluxstream.server import Server, ServerThread, serve

#: The API key of the ``keyed_server`` fixture.
TEST_API_KEY = "sk-fluxstream-test"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    """The reference (``openai`` profile) server, no API key, in a background thread."""
    with ServerThread(profile="openai") as running:
        yield running


@pytest.fixture
def test_api_key() -> str:
    """The key ``keyed_server`` requires. A fixture, not an import: ``from conftest import``
    breaks as soon as another test directory has its own ``conftest.py`` (tests/relay does)."""
    return TEST_API_KEY


@pytest.fixture
def keyed_server() -> Iterator[ServerThread]:
    """A server that requires ``Authorization: Bearer sk-fluxstream-test``."""
    with ServerThread(profile="openai", api_key=TEST_API_KEY) as running:
        yield running


@pytest.fixture
def server_factory() -> Iterator[Callable[..., ServerThread]]:
    """``server_factory(profile=..., api_key=..., faults=...)`` -> a started ServerThread.

    Every server made is stopped at teardown.
    """
    made: list[ServerThread] = []

    def make(**options: Any) -> ServerThread:
        running = ServerThread(**options).start()
        made.append(running)
        return running

    yield make
    for running in made:
        running.stop()


@pytest.fixture
async def aserver(anyio_backend: str) -> AsyncIterator[Server]:
    """The reference server in the test's own event loop (anyio tests: asyncio and trio)."""
    async with serve(port=0, profile="openai") as running:
        yield running


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--transport",
        choices=("auto", "httpx"),
        default="auto",
        help="the transport of every client fluxstream creates with transport='auto' "
        "(httpx: the whole suite on httpx under asyncio too, as .ci/run does for the "
        "transport-sensitive tests)",
    )


@pytest.fixture(autouse=True)
def _forced_transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``--transport httpx``, ``AsyncClient()`` builds the client it would have built
    with ``transport="httpx"``: every guarantee is checked on each transport it supports."""
    forced = request.config.getoption("--transport")
    if forced == "auto" or request.node.get_closest_marker("auto_transport") is not None:
        return
    import fluxstream.client

    make = fluxstream.client.make_http_client

    def make_forced(transport: str, *args: Any) -> Any:
        return make(forced if transport == "auto" else transport, *args)

    monkeypatch.setattr(fluxstream.client, "make_http_client", make_forced)
