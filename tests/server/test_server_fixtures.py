"""The shared server fixtures work for every kind of test: pytest-asyncio, anyio (asyncio and
trio) and synchronous tests."""

from __future__ import annotations

import httpx
import pytest
from test_server_support import accumulate, assert_matches, chat, parse_sse
from waiting import WITHIN

from fluxstream.server import Server, ServerThread, expected_reply


@pytest.mark.asyncio
async def test_server_fixture_under_pytest_asyncio(server: ServerThread) -> None:
    async with (
        httpx.AsyncClient(base_url=server.base_url) as client,
        client.stream(
            "POST", "/chat/completions", json=chat(), headers={"X-Fluxstream-Fault": "drip=5"}
        ) as response,
    ):
        async for _ in response.aiter_bytes():
            break  # mid-response, however late: the next event is 5 s away
    record = await server.wait_disconnect(WITHIN, completed=False)
    assert record.bytes_written > 0


@pytest.mark.anyio
async def test_server_fixture_under_anyio(server: ServerThread, anyio_backend: str) -> None:
    async with httpx.AsyncClient(base_url=server.base_url) as client:
        response = await client.post("/chat/completions", json=chat())
    assert_matches(accumulate(parse_sse(response.content).events), expected_reply(chat()))


@pytest.mark.anyio
async def test_aserver_fixture_runs_in_the_test_loop(aserver: Server, anyio_backend: str) -> None:
    async with httpx.AsyncClient(base_url=aserver.base_url) as client:
        assert (await client.get("/models")).status_code == 200
    assert (await aserver.wait_disconnect(WITHIN)).completed


def test_keyed_server_and_factory(
    keyed_server: ServerThread, test_api_key: str, server_factory: object
) -> None:
    url = keyed_server.base_url + "/models"
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {test_api_key}"}).status_code == 200
    assert callable(server_factory)
    azure = server_factory(profile="azure", faults="drip=0")
    response = httpx.post(azure.base_url + "/chat/completions", json=chat())
    assert response.content.startswith(b'id: 1\nretry: 50\ndata: {"choices":[]')
