"""fluxstream's pytest plugin, as pytest loads it (the ``pytest11`` entry point ``fluxstream``).

pytest imports every installed plugin at every start, and importing anything under
``fluxstream`` runs the package's ``__init__`` (the client, the formats, pydantic: a few
hundred milliseconds). So what pytest loads is this small module outside the package: the
option, the marker and the fixtures' names, each fixture importing the kit
(:mod:`fluxstream.testing._plugin`) when a test first asks for it. A suite that never does
pays for this file alone (``benchmarks/README.md``, "Testing kit").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fluxstream.testing import Upstream

MARKER = "fluxstream"
RECORD_MODES = ("none", "missing", "all")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fluxstream", "fluxstream testing kit")
    group.addoption(
        "--fluxstream-record", choices=RECORD_MODES, default="none",
        help="record cassettes from their real upstream: 'missing' ones, or 'all' again "
             "(default 'none': replay only)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(reply=None, faults=None, profile='openai', api_key=None): script the "
        "fluxstream_upstream of this test (its reply, a schedule of faults, its quirks)",
    )


@pytest.fixture
def fluxstream_upstream(request: pytest.FixtureRequest) -> Iterator[Upstream]:
    """The embedded server for this test, on 127.0.0.1: script it, point clients at it
    (see :mod:`fluxstream.testing`)."""
    from fluxstream.testing._plugin import upstream_for

    yield from upstream_for(request)


@pytest.fixture
def fluxstream_cassette(request: pytest.FixtureRequest) -> Iterator[Callable[..., Upstream]]:
    """``fluxstream_cassette(name, record_from=None, pace=False)`` -> an upstream that
    replays the cassette ``name`` (recording it with ``--fluxstream-record``)."""
    from fluxstream.testing._plugin import cassettes_for

    yield from cassettes_for(request)
