"""The kit's fixtures, as the plugin pytest loads (``_fluxstream_pytest_plugin``, outside
the package so that loading it costs nothing) runs them on first use:

* ``fluxstream_upstream``: an :class:`~fluxstream.testing.Upstream` for this test alone,
  started on 127.0.0.1 at a port the OS picks (no collision between xdist workers) and
  stopped after it. A sync fixture: its server runs on its own loop in a thread, so sync,
  asyncio and trio tests share it.
* ``@pytest.mark.fluxstream(reply={...}, faults=[{"kind": ..., ...}], profile=..., api_key=...)``
  sets that upstream up before the test runs; a malformed field fails the set-up, naming it.
* ``fluxstream_cassette(name, record_from=None, pace=False)``: an upstream that replays a
  cassette (under ``cassettes/`` beside the test file, unless ``name`` is absolute), or with
  ``--fluxstream-record=missing|all`` records it from ``record_from``.

The fixtures' names start with ``fluxstream_`` so that they never shadow a project's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ._cassette import CassetteError, CassetteRecorder, CassetteReplay, load_cassette
from ._spec import ScriptError, faults_from, reply_from
from ._upstream import Upstream, configure

__all__ = ["cassettes_for", "upstream_for"]

MARKER = "fluxstream"
_MARKER_FIELDS = ("reply", "faults", "profile", "api_key")
def _upstream_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The marker's fields, checked: a bad one fails the set-up with its name."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return {}
    if marker.args:
        pytest.fail(f"@pytest.mark.{MARKER} takes keywords ({', '.join(_MARKER_FIELDS)})",
                    pytrace=False)
    options = dict(marker.kwargs)
    try:
        for key in options:
            if key not in _MARKER_FIELDS:
                raise ScriptError(f"field {key!r} is unknown (known: {', '.join(_MARKER_FIELDS)})")
        if options.get("reply") is not None:
            reply_from(options["reply"])
        options["faults"] = faults_from(options.get("faults") or [])
    except ScriptError as exc:
        pytest.fail(f"@pytest.mark.{MARKER}: {exc}", pytrace=False)
    return options


def upstream_for(request: pytest.FixtureRequest) -> Iterator[Upstream]:
    """The ``fluxstream_upstream`` fixture: this test's upstream, set up by its marker."""
    options = _upstream_options(request)
    upstream = Upstream(profile=options.get("profile", "openai"),
                        api_key=options.get("api_key"))
    configure(upstream, options.get("reply"), options.get("faults", ()))
    with upstream:
        yield upstream


def cassettes_for(request: pytest.FixtureRequest) -> Iterator[Callable[..., Upstream]]:
    """The ``fluxstream_cassette`` fixture: upstreams replaying (or recording) cassettes,
    checked at teardown (a request that did not match fails the test)."""
    mode = request.config.getoption("--fluxstream-record", "none")
    made: list[tuple[Upstream, CassetteReplay | CassetteRecorder]] = []

    def use(name: str | Path, *, record_from: str | None = None, pace: bool = False,
            profile: str | None = "openai") -> Upstream:
        path = Path(name)
        if not path.is_absolute():
            path = Path(request.node.path).parent / "cassettes" / path
        source: CassetteReplay | CassetteRecorder
        if mode == "all" or (mode == "missing" and not path.exists()):
            if record_from is None:
                pytest.fail(f"cassette {path}: recording needs record_from= (the real "
                            "server's origin, e.g. 'https://api.openai.com')", pytrace=False)
            source = CassetteRecorder(path, record_from)
        elif not path.exists():
            pytest.fail(f"cassette {path}: not found (run pytest with "
                        "--fluxstream-record=missing to record it)", pytrace=False)
        else:
            try:
                source = CassetteReplay(load_cassette(path), pace=pace)
            except CassetteError as exc:
                pytest.fail(str(exc), pytrace=False)
        upstream = Upstream(profile=profile)
        upstream.serve_from(source)
        made.append((upstream.start(), source))
        return upstream

    yield use
    problems = []
    for upstream, source in made:
        upstream.stop()
        if isinstance(source, CassetteRecorder):
            source.save()
        else:
            problems += source.mismatches
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
