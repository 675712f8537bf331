"""The markers that say which backends an anyio test runs on (``tests/conftest.py``) do that:
the test runs on exactly those, its id naming the backend when there are several."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sniffio

import fluxstream

pytestmark = pytest.mark.anyio


async def test_an_unmarked_test_runs_on_each_backend(
    anyio_backend: str, request: pytest.FixtureRequest
) -> None:
    assert sniffio.current_async_library() == anyio_backend
    assert request.node.name == f"{request.node.originalname}[{anyio_backend}]"


def ran_alone_on(backend: str, anyio_backend: str, request: pytest.FixtureRequest) -> None:
    assert sniffio.current_async_library() == anyio_backend == backend
    assert request.node.name == request.node.originalname  # one run: no backend in its id


@pytest.mark.asyncio_only
async def test_asyncio_only_runs_on_asyncio_alone(
    anyio_backend: str, request: pytest.FixtureRequest
) -> None:
    ran_alone_on("asyncio", anyio_backend, request)


@pytest.mark.trio_only
async def test_trio_only_runs_on_trio_alone(
    anyio_backend: str, request: pytest.FixtureRequest
) -> None:
    ran_alone_on("trio", anyio_backend, request)


@pytest.mark.asyncio_only
class TestTheClosestMarkerWins:
    async def test_the_class_marker(self, anyio_backend: str) -> None:
        assert sniffio.current_async_library() == anyio_backend == "asyncio"

    @pytest.mark.trio_only
    async def test_over_the_class_marker(self, anyio_backend: str) -> None:
        assert sniffio.current_async_library() == anyio_backend == "trio"


@pytest.mark.flavours
async def test_flavours_run_httpx_on_both_backends_and_aiohttp_on_asyncio(
    anyio_backend: str, flavour: str, request: pytest.FixtureRequest
) -> None:
    assert flavour in ("asyncio", "asyncio+aiohttp", "trio")
    assert sniffio.current_async_library() == anyio_backend == flavour.partition("+")[0]
    assert request.node.name == f"{request.node.originalname}[{flavour}]"


def test_a_modules_own_anyio_backend_fixture_is_refused_by_name(tmp_path: Path) -> None:
    """The fixture a module used to override would be parametrised past silently (the test
    would run on both backends): collection fails instead, saying what to write."""
    for name in ("conftest.py", "kit_plugin.py"):  # the suite's conftest and what it imports
        (tmp_path / name).write_text((Path(__file__).parent / name).read_text())
    (tmp_path / "test_overrides.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.anyio\n\n\n"
        "@pytest.fixture\ndef anyio_backend() -> str:\n    return 'asyncio'\n\n\n"
        "async def test_it(anyio_backend: str) -> None:\n    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(fluxstream.__file__).parents[1])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )
    assert run.returncode == pytest.ExitCode.INTERRUPTED, run.stdout + run.stderr
    assert "test_overrides.py::test_it: its own anyio_backend fixture" in run.stdout
    assert "asyncio_only, trio_only or flavours" in run.stdout
