"""The testing kit's cost in a user's suite, against respx and pytest-httpx.

Three measures (benchmarks/README.md, "Testing kit"):

1. **Fixture set-up and teardown per test**, the median of 200 tests: pytest's own set-up and
   teardown phases of each test, timed by a hook wrapper (the test body not included). Each
   test asks its contender's fixture and scripts one streamed reply (the kit: ``reply(text=)``
   on ``fluxstream_upstream``; respx: a route on ``respx_mock``; pytest-httpx: ``add_response``
   on ``httpx_mock``).
2. **A whole test with one streamed reply**: set-up, body and teardown of a test that scripts
   the reply and reads it as an event stream with ``httpx.Client`` (the kit over a real socket,
   the mocks through their transports).
3. **Import cost when loaded but unused**: what loading the plugin adds to a pytest start (the
   entry module's import time after pytest's, median of 15 processes), the wall time of a
   suite of 200 trivial tests with and without the plugin (median of 9 alternating runs), and, for
   reference, what the first test that asks for a fixture pays (``import fluxstream.testing``).

pytest-httpx pins the httpx it supports, which is not the shared environment's: it runs in a
venv of its own (``--httpx-venv``, with pytest, pytest-httpx and respx installed), where respx
runs again, so the two environments can be compared through it.

Run: ``python benchmarks/bench_testing_kit.py --httpx-venv /tmp/kitbench-venv`` (about two
minutes; ``--tests N`` for fewer tests per run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = "one two three four five six seven eight nine ten"

TIMING_CONFTEST = '''
import json, os, time
import pytest

_times = {}

def _timed(phase):
    @pytest.hookimpl(wrapper=True)
    def hook(item):
        start = time.perf_counter()
        try:
            return (yield)
        finally:
            _times.setdefault(item.nodeid, {})[phase] = time.perf_counter() - start
    return hook

pytest_runtest_setup = _timed("setup")
pytest_runtest_call = _timed("call")
pytest_runtest_teardown = _timed("teardown")

def pytest_sessionfinish(session):
    with open(os.environ["BENCH_TIMES"], "w") as out:
        json.dump(_times, out)
'''

SSE = "".join(
    f'data: {{"choices":[{{"index":0,"delta":{{"content":"{w} "}}}}]}}\\n\\n'
    for w in TEXT.split()
) + "data: [DONE]\\n\\n"

READ = '''
CLIENT = httpx.Client()  # one for the module: a client's own set-up (its TLS context) is not timed

def read(url):
    with CLIENT.stream(
            "POST", url, json={"model": "m", "messages": [], "stream": True}) as response:
        lines = [line for line in response.iter_lines()
                 if '"content":"' in line and '"content":""' not in line]
    assert len(lines) == 10, len(lines)
'''

CONTENDERS = {
    "fluxstream kit": ("_fluxstream_pytest_plugin", '''
import httpx, pytest
TEXT = %r
%s
@pytest.mark.parametrize("n", range(%d))
def test_one(fluxstream_upstream, n):
    fluxstream_upstream.reply(text=TEXT)
    if STREAM:
        read(fluxstream_upstream.base_url + "/chat/completions")
'''),
    "respx": ("respx.plugin", '''
import httpx, pytest
TEXT = %r
SSE = ''' + repr(SSE.replace("\\n", "\n")) + '''
%s
@pytest.mark.parametrize("n", range(%d))
def test_one(respx_mock, n):
    respx_mock.post("http://llm.test/v1/chat/completions").mock(return_value=httpx.Response(
        200, text=SSE, headers={"content-type": "text/event-stream"}))
    if STREAM:
        read("http://llm.test/v1/chat/completions")
'''),
    "pytest-httpx": ("pytest_httpx", '''
import httpx, pytest
TEXT = %r
SSE = ''' + repr(SSE.replace("\\n", "\n")) + '''
%s
@pytest.mark.httpx_mock(assert_all_responses_were_requested=False)  # as the others
@pytest.mark.parametrize("n", range(%d))
def test_one(httpx_mock, n):
    httpx_mock.add_response(url="http://llm.test/v1/chat/completions", method="POST",
                            text=SSE, headers={"content-type": "text/event-stream"})
    if STREAM:
        read("http://llm.test/v1/chat/completions")
'''),
}


def run_suite(python: str, plugin: str | None, code: str, workdir: Path) -> dict[str, dict[str, float]]:
    """Run one generated test file under pytest; per-test phase times."""
    (workdir / "conftest.py").write_text(TIMING_CONFTEST)
    (workdir / "test_bench.py").write_text(code)
    times = workdir / "times.json"
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "BENCH_TIMES": str(times),
           "PYTHONPATH": str(ROOT)}
    args = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    if plugin:
        args += ["-p", plugin]
    result = subprocess.run([*args, "test_bench.py"], cwd=workdir, env=env,
                            capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"{plugin}: pytest failed\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}")
    return json.loads(times.read_text())


def medians(times: dict[str, dict[str, float]]) -> tuple[float, float]:
    """Median set-up + teardown, median whole test (ms); the first test (imports) left out."""
    rows = list(times.values())[1:]
    fixture = statistics.median(r["setup"] + r["teardown"] for r in rows) * 1000
    whole = statistics.median(r["setup"] + r["call"] + r["teardown"] for r in rows) * 1000
    return fixture, whole


def measure(python: str, name: str, tests: int) -> tuple[float, float]:
    plugin, template = CONTENDERS[name]
    out = []
    for stream in (False, True):
        code = template % (TEXT, READ + f"\nSTREAM = {stream}\n", tests)
        with tempfile.TemporaryDirectory() as tmp:
            times = run_suite(python, plugin, code, Path(tmp))
        out.append(medians(times)[0 if not stream else 1])
    return out[0], out[1]


def import_cost(python: str) -> dict[str, float]:
    """The plugin's import after pytest's, and fluxstream.testing's (ms, median of 15)."""
    results: dict[str, list[float]] = {"plugin": [], "kit": []}
    code = ("import pytest, time\nt = time.perf_counter()\nimport %s\n"
            "print((time.perf_counter() - t) * 1000)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(15):
        for key, module in (("plugin", "_fluxstream_pytest_plugin"),
                            ("kit", "fluxstream.testing")):
            out = subprocess.run([python, "-c", code % module], env=env, capture_output=True,
                                 text=True, check=True).stdout
            results[key].append(float(out))
    return {key: statistics.median(values) for key, values in results.items()}


def unused_suites(python: str, tests: int, runs: int = 9) -> tuple[float, float]:
    """Wall time (s, median of ``runs``) of ``tests`` trivial tests without the plugin and
    with it loaded, the two runs alternating so that the machine's load falls on both."""
    code = f"import pytest\n@pytest.mark.parametrize('n', range({tests}))\ndef test_x(n):\n    pass\n"
    walls: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_plain.py").write_text(code)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)}
        for _ in range(runs):
            for loaded in (False, True):
                args = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
                if loaded:
                    args += ["-p", "_fluxstream_pytest_plugin"]
                start = time.perf_counter()
                subprocess.run([*args, "test_plain.py"], cwd=tmp, env=env, capture_output=True,
                               check=True)
                walls[loaded].append(time.perf_counter() - start)
    return statistics.median(walls[False]), statistics.median(walls[True])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--httpx-venv", type=Path, help="a venv with pytest-httpx and respx")
    parser.add_argument("--tests", type=int, default=200)
    args = parser.parse_args()
    rows = [("fluxstream kit", sys.executable, "shared venv"), ("respx", sys.executable,
                                                                 "shared venv")]
    if args.httpx_venv is not None:
        other = str(args.httpx_venv / "bin" / "python")
        rows += [("respx", other, "pytest-httpx venv"), ("pytest-httpx", other,
                                                          "pytest-httpx venv")]
    else:
        print("pytest-httpx skipped: give --httpx-venv")
    print(f"{'contender':<16} {'environment':<18} {'set-up+teardown ms':>19} "
          f"{'whole test, one streamed reply ms':>34}")
    for name, python, where in rows:
        fixture, whole = measure(python, name, args.tests)
        print(f"{name:<16} {where:<18} {fixture:>19.2f} {whole:>34.2f}")
    costs = import_cost(sys.executable)
    print(f"\nplugin loaded, unused: its import after pytest's {costs['plugin']:.1f} ms "
          f"(median of 15); the kit's first use imports fluxstream.testing: "
          f"{costs['kit']:.0f} ms")
    without, loaded = unused_suites(sys.executable, args.tests)
    print(f"{args.tests} trivial tests: {without:.3f} s without the plugin, {loaded:.3f} s "
          f"with it loaded (median of 9 alternating runs; "
          f"{100 * (loaded - without) / without:+.1f}%)")


if __name__ == "__main__":
    main()
