"""A missing optional dependency is a message naming the extra that installs it, never a bare
``ModuleNotFoundError`` from deep inside the package (a user who installed ``fluxstream`` and
reached for the relay or tracing must learn what to install, in one line).

The dependency is made missing in a child process (``sys.modules[name] = None`` makes its
import fail as an absent package does), so the suite's own imports are untouched.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "relay-redis-lazily": ("redis", "from fluxstream.relay import RedisReplyLog",
                           "fluxstream[redis]"),
    "relay-redis-module": ("redis", "import fluxstream.relay.redis_log", "fluxstream[redis]"),
    "redis-asyncio": ("redis.asyncio", "from fluxstream.relay import RedisReplyLog",
                      "fluxstream[redis]"),
    "otel-api": ("opentelemetry", "import fluxstream.otel", "fluxstream[otel]"),
    "otel-sdk-example": (
        "opentelemetry.sdk",
        "import runpy; runpy.run_path('examples/otel_console.py', run_name='example')",
        "fluxstream[examples]",
    ),
    "starlette-example": (
        "starlette",
        "import runpy; runpy.run_path('examples/relay_app.py', run_name='example')",
        "fluxstream[examples]",
    ),
}


def _run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys; sys.modules[{module!r}] = None\n{code}\n"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_missing_dependency_names_the_extra_to_install(case: str) -> None:
    module, code, extra = CASES[case]
    done = _run_without(module, code)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert f"pip install '{extra}'" in last, done.stderr
    assert module.partition(".")[0] in last  # which package is missing, by name
    assert "halted; None in sys.modules" not in last  # not the bare import error


def test_the_extras_named_exist() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for name in {extra.partition("[")[2].rstrip("]") for _, _, extra in CASES.values()}:
        assert f"\n{name} = [" in text
