"""The README's test command draws the same Hypothesis examples on every run; ``explore`` does not.

Each check runs a small probe test file in its own working directory through a fresh pytest
process that loads this suite's ``tests/conftest.py`` (where the profiles live), exactly as the
suite's own tests see them; the probe writes down every example it is called with.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

PROBE = '''
import os
from pathlib import Path

from hypothesis import given, settings, strategies as st

OUT = Path(os.environ["PROBE_OUT"])


def record(name, value):
    with (OUT / name).open("a", encoding="utf-8") as f:
        f.write(repr(value) + "\\n")
    with (OUT / f"worker-{name}").open("a", encoding="utf-8") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")


@given(st.integers())
def test_profile_examples(number):
    record("profile", number)
    # a failure a wide search finds (and stores in .hypothesis/), switched on by the check
    assert not os.environ.get("PROBE_FAIL") or number < 1000


@settings(max_examples=5)
@given(st.integers())
def test_own_max_examples(number):
    record("own", number)
'''

PIN = 5  # the probe's own max_examples


class Probe:
    """One pytest process running the probe in ``workdir`` (which keeps its ``.hypothesis/``)."""

    def __init__(
        self, workdir: Path, profile: str | None = None, *options: str, fail: bool = False
    ) -> None:
        workdir.mkdir(exist_ok=True)
        (workdir / "test_probe.py").write_text(PROBE, encoding="utf-8")
        self.out = workdir / f"out-{len(list(workdir.glob('out-*')))}"
        self.out.mkdir()
        self.fail = fail
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPOTHESIS", "PROBE_"))}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        env["PROBE_OUT"] = str(self.out)
        if fail:
            env["PROBE_FAIL"] = "1"
        # --assert=plain: nothing to rewrite in the probe, and rewriting the plugins' modules
        # costs seconds at start-up where bytecode is not cached
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--assert=plain"]
        command += ["-p", "conftest"]
        if profile is not None:
            command.append(f"--hypothesis-profile={profile}")
        command += options
        # started at once: the checks below run a few of these side by side
        self.process = subprocess.Popen(
            [*command, "test_probe.py"], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )

    def drawn(self) -> dict[str, list[str]]:
        """The examples each probe test was called with, once the process passed (or failed,
        when asked to)."""
        try:
            output, _ = self.process.communicate(timeout=300)
        finally:
            self.process.kill()
        assert self.process.returncode == (1 if self.fail else 0), output
        return {
            name: (self.out / name).read_text(encoding="utf-8").splitlines()
            for name in ("profile", "own")
            if (self.out / name).exists()
        }


def test_the_test_command_draws_the_same_examples_every_run_whatever_hypothesis_kept(
    tmp_path: Path,
) -> None:
    carried = tmp_path / "carried"
    search = Probe(carried, "explore", fail=True)  # leaves a failing example in .hypothesis/
    fresh = Probe(tmp_path / "fresh")
    search.drawn()
    assert any((carried / ".hypothesis").rglob("*")), "the wide search kept nothing"
    first = fresh.drawn()
    assert len(first["profile"]) >= 50 and len(first["own"]) == PIN
    assert Probe(carried).drawn() == first  # the stored failure was not replayed


def test_the_explore_profile_draws_fresh_examples_and_more_of_them(tmp_path: Path) -> None:
    probes = [Probe(tmp_path / name, "explore") for name in ("one", "two")]
    one, two = (probe.drawn() for probe in probes)
    assert one["profile"] != two["profile"]
    # a test's own max_examples is scaled up too (conftest.EXPLORE_FACTOR), not kept
    assert len(one["own"]) == len(two["own"]) > 2 * PIN
    assert len(one["profile"]) > 100


def test_worker_processes_draw_the_examples_one_process_draws(tmp_path: Path) -> None:
    """The test command runs on several xdist workers (pyproject.toml's addopts): each probe test
    draws the same examples on whichever worker runs it as in a single process, since the
    examples are seeded from the test itself, never from the process or the run."""
    single = Probe(tmp_path / "single", None, "-n", "0")
    workers = Probe(tmp_path / "workers", None, "-n", "2")
    first = single.drawn()
    assert len(first["profile"]) >= 50 and len(first["own"]) == PIN
    assert workers.drawn() == first
    ran_on = {(workers.out / f"worker-{name}").read_text(encoding="utf-8") for name in first}
    assert all(text.startswith("gw") for text in ran_on), ran_on  # in worker processes
