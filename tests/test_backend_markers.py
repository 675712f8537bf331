"""The markers that say which backends an anyio test runs on (``tests/conftest.py``) do that:
the test runs on exactly those, its id naming the backend when there are several."""

from __future__ import annotations

import pytest
import sniffio

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
