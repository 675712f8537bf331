"""The test command runs on several xdist workers; a costly session server is started once.

``tests/conftest.py`` puts every test that uses one of ``SHARED_SESSION_FIXTURES`` (the llama.cpp
server on a real model, the six-node Redis Cluster) into that fixture's ``xdist_group``, and the
test command's ``--dist loadgroup`` (pyproject.toml's addopts) sends a group to one worker. The
check runs a probe suite with this suite's conftest and the test command's own options on two
workers: each shared fixture is set up by one worker alone, while the other tests spread.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fluxstream

TESTS = Path(__file__).resolve().parent

PROBE = '''
import os
import time
from pathlib import Path

import pytest

OUT = Path(os.environ["PROBE_OUT"])


def note(name):
    with (OUT / name).open("a", encoding="utf-8") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")


@pytest.fixture(scope="session")
def llama_server():
    note("llama_server")
    return "llama"


@pytest.fixture(scope="session")
def redis_cluster():
    note("redis_cluster")
    return "cluster"


@pytest.fixture
def cluster_log(redis_cluster):  # a test reaches the cluster through another fixture
    return redis_cluster


@pytest.mark.parametrize("n", range(6))
def test_model(llama_server, n):
    time.sleep(0.05)


@pytest.mark.parametrize("n", range(6))
def test_cluster(cluster_log, n):
    time.sleep(0.05)


@pytest.mark.parametrize("n", range(12))
def test_plain(n):
    note("plain")
    time.sleep(0.05)
'''


def test_each_shared_session_fixture_is_set_up_by_one_worker(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    for name in ("conftest.py", "kit_plugin.py"):  # the suite's conftest and what it imports
        (tmp_path / name).write_text((TESTS / name).read_text(encoding="utf-8"))
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    addopts = list(pytestconfig.getini("addopts"))  # pyproject.toml's, as this run read them
    assert "loadgroup" in " ".join(addopts)  # the test command honours the groups
    env = {**os.environ, "PYTHONPATH": str(Path(fluxstream.__file__).parents[1]),
           "PROBE_OUT": str(out)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), *addopts, "-n", "2", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == pytest.ExitCode.OK, run.stdout + run.stderr
    for fixture in ("llama_server", "redis_cluster"):
        set_up_by = (out / fixture).read_text(encoding="utf-8").split()
        assert len(set_up_by) == 1 and set_up_by[0].startswith("gw"), (fixture, set_up_by)
    assert set((out / "plain").read_text(encoding="utf-8").split()) == {"gw0", "gw1"}
