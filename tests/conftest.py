"""Shared fixtures: a running embedded server for client and server tests.

The ``server`` fixtures run the server on its own event loop in a background thread
(:class:`fluxstream.server.ServerThread`), so they work for every kind of test: anyio tests on
asyncio and trio, pytest-asyncio tests, and plain synchronous tests. Tests that want the server
in their own event loop use ``aserver`` (anyio tests only) or ``fluxstream.server.serve``.

Every ``@pytest.mark.anyio`` test runs on asyncio and trio, unless a marker says otherwise:
``asyncio_only``, ``trio_only``, or ``flavours`` (httpx on both, and aiohttp on asyncio).

Hypothesis runs under the ``deterministic`` profile unless told otherwise, so the README's test
command gives the same result on every run and machine; ``--hypothesis-profile=explore`` (or
``HYPOTHESIS_PROFILE=explore``) is the wide random search for longer runs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, is_hypothesis_test, settings
from kit_plugin import PLUGIN, autoloaded

from fluxstream.server import Server, ServerThread, serve

# The testing kit's plugin, unless pytest loads it by its entry point already; its fixtures
# are named fluxstream_*, so they never shadow the suite's own below.
pytest_plugins = ["pytester"] + ([] if autoloaded() else [PLUGIN])

# ----------------------------------------------------------------------- Hypothesis profiles
# The README's test command must pass or fail the same way on every run and every machine: a
# random search that finds a bug once in ten runs makes CI fail now and then, and a
# `.hypothesis/` directory left behind by one failing run would replay that failure in every
# later local run. So the default profile draws the same examples every time (seeded from each
# test's own code), reads and writes no example database, and has no timing-based failures
# (deadline, too_slow), which a loaded machine would turn into flakes. A failure it finds
# prints its reproduction blob; a failure the wide search finds becomes an explicit @example.
# Tests' own @settings(max_examples=..., deadline=...) still apply; these fill in the rest.
settings.register_profile(
    "deterministic",
    parent=settings.get_profile("default"),
    derandomize=True,
    database=None,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
# The wide search: fresh random examples on every run, EXPLORE_FACTOR times as many for every
# test (pytest_collection_modifyitems below), failures kept in `.hypothesis/` and replayed first.
settings.register_profile(
    "explore",
    parent=settings.get_profile("default"),  # its database: `.hypothesis/` in the working dir
    derandomize=False,
    max_examples=100,  # times EXPLORE_FACTOR, as for every test
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))

#: How many times its own ``max_examples`` each Hypothesis test runs under ``explore``.
EXPLORE_FACTOR = 10


def scale_hypothesis_examples(items: list[pytest.Item]) -> None:
    """Under ``explore``, every Hypothesis test draws ``EXPLORE_FACTOR`` times its examples.

    Most tests here pin ``max_examples`` with their own ``@settings`` (sized for the test
    command's time budget), which a profile cannot raise; the wide search scales them instead.
    Hypothesis reads a test's settings from the attribute ``@settings`` sets, at call time.
    """
    if settings.get_current_profile_name() != "explore":
        return
    scaled: set[int] = set()
    for item in items:
        test = getattr(item, "obj", None)
        test = getattr(test, "__func__", test)  # a method's function, shared by its instances
        if test is None or id(test) in scaled or not is_hypothesis_test(test):
            continue
        scaled.add(id(test))
        own = test._hypothesis_internal_use_settings
        test._hypothesis_internal_use_settings = settings(
            own, max_examples=own.max_examples * EXPLORE_FACTOR
        )


# ----------------------------------------------------------------------- worker processes
#: Session fixtures too costly to run once per xdist worker, and the ``xdist_group`` of the
#: tests that use them: the test command runs with ``--dist loadgroup`` (pyproject.toml), which
#: sends a group to one worker, so that worker alone starts the server. llama.cpp's server on a
#: real model takes seconds and most of a core to start and every core it can get to answer (a
#: second one would halve the first's speed, and the integration suite's timing checks assume
#: one); the Redis Cluster is six redis-servers, and its tests kill and migrate its nodes.
SHARED_SESSION_FIXTURES: dict[str, str] = {
    "llama_server": "llama_server",
    "redis_cluster": "redis_cluster",
}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups from the markers
def pytest_itemcollected(item: pytest.Item) -> None:
    """A test that uses one of ``SHARED_SESSION_FIXTURES`` (itself or through another fixture)
    joins that fixture's ``xdist_group``; a test may name its group itself."""
    if item.get_closest_marker("xdist_group") is not None:
        return
    for fixture, group in SHARED_SESSION_FIXTURES.items():
        if fixture in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(group))
            return


@pytest.hookimpl(trylast=True)  # after xdist's own hook, which may have named the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scale_hypothesis_examples(items)
    name_worker_groups(config, items)


def name_worker_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker under ``--dist loadgroup``, a grouped test's id ends in ``@<group>``: that
    suffix is all the scheduler sees of a group. xdist 3.8 writes it to ``item._nodeid``, which
    pytest 9.2 no longer reads (pytest-dev/pytest-xdist#1386): every group was spread over all
    workers without a word, each starting its own llama.cpp server. Where the suffix is missing
    it is set here, as xdist does, on the structured id pytest 9.2 reads."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                         for mark in item.iter_markers("xdist_group")})
        suffix = f"@{'_'.join(groups)}"
        if not groups or item.nodeid.endswith(suffix):
            continue
        node_id = getattr(item, "_id", None)
        if node_id is None:  # a pytest before 9.2 (xdist sets ``_nodeid`` there)
            item._nodeid = item.nodeid + suffix  # type: ignore[attr-defined]
        else:
            item._id = type(node_id).parse(item.nodeid + suffix)  # type: ignore[attr-defined]


#: The API key of the ``keyed_server`` fixture.
TEST_API_KEY = "sk-fluxstream-test"


# ----------------------------------------------------------------------- anyio backends
#: Markers that choose the backends an anyio test runs on (pyproject.toml registers them). The
#: closest one wins: a test's own over its class's, its class's over its module's.
BACKEND_MARKERS: dict[str, tuple[str, ...]] = {
    "asyncio_only": ("asyncio",),
    "trio_only": ("trio",),
}
#: The backends of an unmarked anyio test.
BOTH_BACKENDS = ("asyncio", "trio")
#: The runs of a test marked ``flavours``: httpx on asyncio and on trio, aiohttp on asyncio.
FLAVOURS = ("asyncio", "asyncio+aiohttp", "trio")


def backends_of(node: pytest.Item | pytest.Collector) -> tuple[str, ...]:
    """The backends the closest backend marker names; both when there is none."""
    for mark in node.iter_markers():
        if mark.name in BACKEND_MARKERS:
            return BACKEND_MARKERS[mark.name]
    return BOTH_BACKENDS


def _parametrizes_backend(metafunc: pytest.Metafunc) -> bool:
    """Whether the test parametrises ``anyio_backend`` itself (with another argument: the
    integration suite pairs backends with modes)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs["argnames"]
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if "anyio_backend" in names:
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """An anyio test runs once per backend its markers allow, its id naming the backend when
    there are several; ``flavours`` also gives it ``flavour``: ``asyncio``, ``asyncio+aiohttp``
    or ``trio``. A suite on one backend marks its modules from its ``conftest.py`` (relay,
    integration). A test that parametrises ``anyio_backend`` with another argument keeps it; a
    module's or class's own ``anyio_backend`` fixture is refused, since the parametrisation here
    would override it without a word."""
    if metafunc.definition.get_closest_marker("flavours") is not None:
        if "anyio_backend" in metafunc.fixturenames:
            runs = [(flavour.partition("+")[0], flavour) for flavour in FLAVOURS]
            metafunc.parametrize(("anyio_backend", "flavour"), runs, ids=FLAVOURS)
        elif "flavour" in metafunc.fixturenames:  # a plain test of the module: each transport
            metafunc.parametrize("flavour", FLAVOURS)
        return
    if "anyio_backend" not in metafunc.fixturenames or _parametrizes_backend(metafunc):
        return
    for owner in (metafunc.module, metafunc.cls):
        if owner is not None and "anyio_backend" in vars(owner):
            pytest.fail(
                f"{metafunc.definition.nodeid}: its own anyio_backend fixture would be ignored;"
                " mark the test, class or module asyncio_only, trio_only or flavours instead",
                pytrace=False,
            )
    backends = backends_of(metafunc.definition)
    if len(backends) > 1:
        metafunc.parametrize("anyio_backend", backends)


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """The one backend a test marked ``asyncio_only`` or ``trio_only`` runs on (a test that runs
    on several is parametrised over them by :func:`pytest_generate_tests`)."""
    return backends_of(request.node)[0]


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
    import fluxstream._client

    make = fluxstream._client.make_http_client

    def make_forced(transport: str, *args: Any) -> Any:
        return make(forced if transport == "auto" else transport, *args)

    monkeypatch.setattr(fluxstream._client, "make_http_client", make_forced)
