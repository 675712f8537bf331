"""The plugin as a user's pytest meets it: loaded by its entry point, fixtures found by name in
sync, asyncio and trio tests, a marker checked at set-up, cassettes recorded and replayed, no
port shared between xdist workers, and nothing imported by fluxstream itself."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from kit_plugin import PLUGIN

import fluxstream
from fluxstream.testing import Upstream

ROOT = Path(fluxstream.__file__).resolve().parents[1]


@pytest.fixture
def kit(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A user's project: this checkout's fluxstream importable, plugins loaded as named (so
    the plugin is loaded once, installed or not)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(pytester.path)]))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", PLUGIN, "-p", "anyio", "-p", "no:cacheprovider",
                                         *args, timeout=120)


USER_TESTS = '''
import anyio, httpx, pytest

def ask(url):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(url + "/chat/completions", json=body).json()["choices"][0]["message"]

def test_sync(fluxstream_upstream):
    fluxstream_upstream.reply(text="sync words")
    assert ask(fluxstream_upstream.base_url)["content"] == "sync words"

@pytest.mark.fluxstream(reply={"text": "from the marker"})
def test_marker(fluxstream_upstream):
    assert ask(fluxstream_upstream.base_url)["content"] == "from the marker"

@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_async(fluxstream_upstream, anyio_backend):
    fluxstream_upstream.reply(text=anyio_backend)
    async with httpx.AsyncClient() as client:
        body = {"model": "m", "messages": [], "stream": False}
        answer = await client.post(fluxstream_upstream.base_url + "/chat/completions", json=body)
    assert answer.json()["choices"][0]["message"]["content"] == anyio_backend
'''


def test_a_users_tests_find_the_fixtures_sync_asyncio_and_trio(kit: pytest.Pytester) -> None:
    kit.makepyfile(test_user=USER_TESTS)
    run(kit).assert_outcomes(passed=4)


def test_a_malformed_marker_fails_the_set_up_naming_the_field(kit: pytest.Pytester) -> None:
    kit.makepyfile(test_bad='''
        import pytest
        ran = []

        @pytest.mark.fluxstream(reply={"text": "x", "tool_calls": [{"name": "f", "args": {}}]})
        def test_bad_reply(fluxstream_upstream):
            ran.append(1)

        @pytest.mark.fluxstream(faults=[{"kind": "drop", "after_event": 3}])
        def test_bad_fault(fluxstream_upstream):
            ran.append(1)

        @pytest.mark.fluxstream(replies={"text": "x"})
        def test_bad_marker(fluxstream_upstream):
            ran.append(1)

        def test_none_ran():
            assert ran == []
    ''')
    result = run(kit)
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines([
        "*@pytest.mark.fluxstream: reply field 'tool_calls[[]0[]].args' is unknown*",
        "*@pytest.mark.fluxstream: faults[[]0[]]: fault 'drop' field 'after_event' is unknown*",
        "*@pytest.mark.fluxstream: field 'replies' is unknown*",
    ])


CASSETTE_TEST = '''
import os, httpx

def test_recorded(fluxstream_cassette):
    upstream = fluxstream_cassette("hello.json", record_from=os.environ["REAL_URL"])
    body = {"model": "m", "messages": [{"role": "user", "content": os.environ["ASK"]}]}
    answer = httpx.post(upstream.base_url + "/chat/completions", json=body,
                        headers={"Authorization": "Bearer sk-real-0123456789"})
    assert answer.json()["choices"][0]["message"]["content"] == "Recorded words."
'''


def test_a_cassette_is_recorded_once_then_replayed_and_a_change_fails(
    kit: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    kit.makepyfile(test_cassette=CASSETTE_TEST)
    monkeypatch.setenv("ASK", "hi")
    with Upstream() as real:
        real.reply(text="Recorded words.")
        monkeypatch.setenv("REAL_URL", real.url)
        missing = run(kit)
        missing.assert_outcomes(failed=1)
        missing.stdout.fnmatch_lines(["*hello.json: not found (run pytest with "
                                      "--fluxstream-record=missing to record it)*"])
        run(kit, "--fluxstream-record=missing").assert_outcomes(passed=1)
        assert len(real.requests) == 1
    cassette = kit.path / "cassettes" / "hello.json"
    assert "sk-real-0123456789" not in cassette.read_text(encoding="utf-8")
    monkeypatch.setenv("REAL_URL", "http://127.0.0.1:9")  # nothing there: replayed only
    run(kit).assert_outcomes(passed=1)
    monkeypatch.setenv("ASK", "hello")
    changed = run(kit)
    changed.assert_outcomes(failed=1, errors=1)  # the client's 400, and the fixture's verdict
    changed.stdout.fnmatch_lines([
        "*fluxstream cassette hello.json: request 1 (POST /v1/chat/completions) does not match "
        "the recording: 'messages[[]0[]].content' is \"hi\" in the cassette, \"hello\" in the "
        "request*",
    ])


def test_a_newer_cassette_fails_the_test_with_its_path_and_reason(
    kit: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
) -> None:
    kit.makepyfile(test_cassette=CASSETTE_TEST)
    monkeypatch.setenv("REAL_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ASK", "hi")
    (kit.path / "cassettes").mkdir()
    (kit.path / "cassettes" / "hello.json").write_text(
        '{"format": "fluxstream-cassette/2", "interactions": []}', encoding="utf-8")
    result = run(kit)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cassettes/hello.json: format 'fluxstream-cassette/2' is not "
                                 "one this fluxstream reads*"])


def test_xdist_workers_never_share_a_port(kit: pytest.Pytester) -> None:
    kit.makepyfile(test_ports='''
        import pytest

        @pytest.mark.parametrize("n", range(8))
        def test_port(fluxstream_upstream, n, tmp_path_factory):
            root = tmp_path_factory.getbasetemp().parent
            (root / f"port-{fluxstream_upstream.port}-{n}").touch()
            assert fluxstream_upstream.host == "127.0.0.1"
    ''')
    result = run(kit, "-p", "xdist", "-n", "2")
    result.assert_outcomes(passed=8)


def test_importing_fluxstream_or_its_kit_imports_no_pytest() -> None:
    code = ("import sys, fluxstream, fluxstream.testing, fluxstream.server; "
            "assert 'pytest' not in sys.modules and '_pytest' not in sys.modules, "
            "sorted(m for m in sys.modules if 'pytest' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_installed_distribution_declares_the_plugin() -> None:
    """``pip install fluxstream`` then ``pytest`` finds the fixtures: the ``pytest11`` entry
    point. An install made before the entry point existed (an editable install's metadata is
    written when installed, not when the checkout changes) is skipped, saying so."""
    declared = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'[project.entry-points.pytest11]\nfluxstream = "{PLUGIN}"' in declared
    try:
        entry_points = distribution("fluxstream").entry_points
    except PackageNotFoundError:
        pytest.skip("fluxstream is not installed (run from a checkout only)")
    if not any(ep.group == "pytest11" for ep in entry_points):
        pytest.skip("the installed fluxstream's metadata predates its pytest11 entry point: "
                    "reinstall it (pip install -e .) to check")
    (plugin,) = [ep for ep in entry_points if ep.group == "pytest11"]
    assert (plugin.name, plugin.value) == ("fluxstream", PLUGIN)


def test_the_example_app_tests_pass(kit: pytest.Pytester) -> None:
    """examples/testing: the docs' example of testing an app built on openai-python."""
    example = ROOT / "examples" / "testing"
    for path in example.glob("*.py"):
        kit.path.joinpath(path.name).write_text(path.read_text(encoding="utf-8"),
                                                encoding="utf-8")
    run(kit).assert_outcomes(passed=4)
