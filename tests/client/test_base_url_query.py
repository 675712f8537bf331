"""A base URL with a query string keeps it after the path; ``default_query=`` adds to it.

Azure OpenAI's base URLs carry the API version as a query
(``https://x.openai.azure.com/openai/deployments/d?api-version=2024-10-21``). The path was
appended to the whole string, so it landed inside the query (``...?api-version=2024-10-21/
chat/completions``) and every request went to the deployment's root. The query now follows
the path; ``default_query=`` (a mapping sent with every request, as openai-python's) is the
other way to say the same, and wins over the base URL's own value of a parameter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from raw_upstream import read_request, upstream
from sse_frames import DONE, frame

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import ServerThread, serve

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
VERSION = "api-version=2024-10-21"


REPLY = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
    + frame({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})
    + frame({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    + DONE
)


@asynccontextmanager
async def recording_server() -> AsyncIterator[tuple[str, list[str]]]:
    """A raw HTTP server that records each request's target (path and query, as sent)."""
    targets: list[str] = []

    async def record(sock: anyio.abc.SocketStream, index: int) -> None:
        request = await read_request(sock, within=5)
        if request is not None:
            targets.append(request.line)
        await sock.send(REPLY)

    async with upstream(record) as up:
        yield up.origin, targets


CASES = [
    # (base URL suffix, default_query, the request target expected)
    ("/openai/deployments/d?" + VERSION, None,
     "POST /openai/deployments/d/chat/completions?" + VERSION + " HTTP/1.1"),
    ("/openai/deployments/d/?" + VERSION, None,
     "POST /openai/deployments/d/chat/completions?" + VERSION + " HTTP/1.1"),
    ("/v1", {"api-version": "2024-10-21"},
     "POST /v1/chat/completions?" + VERSION + " HTTP/1.1"),
    ("/v1?api-version=old&x=1", {"api-version": "2024-10-21"},
     "POST /v1/chat/completions?api-version=2024-10-21&x=1 HTTP/1.1"),
    ("/v1?a=1", {"b": "two words", "c": True},
     "POST /v1/chat/completions?a=1&b=two+words&c=true HTTP/1.1"),
    ("/v1", None, "POST /v1/chat/completions HTTP/1.1"),
    ("/v1#frag", None, "POST /v1/chat/completions HTTP/1.1"),
]


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize(("suffix", "default_query", "target"), CASES)
async def test_the_query_follows_the_path(
    suffix: str, default_query: dict[str, Any] | None, target: str, transport: str,
    anyio_backend: str,
) -> None:
    async with recording_server() as (root, targets):
        async with fluxstream.AsyncClient(
            root + suffix, default_query=default_query, transport=transport,
            retry=RetryPolicy.off(),
        ) as client:
            with anyio.fail_after(10):
                reply = await client.chat.complete(model="m", messages=MSG)
    assert reply.text == "Hel"
    assert targets == [target]


@pytest.mark.parametrize("transport", ["auto", "httpx"])
@pytest.mark.parametrize(
    ("endpoint", "kwargs", "path"),
    [("chat", {"messages": MSG}, "/v1/chat/completions"),
     ("responses", {"input": "hi"}, "/v1/responses"),
     ("messages", {"messages": MSG, "max_tokens": 8}, "/v1/messages")],
)
async def test_every_endpoint_reaches_its_path_with_a_query_in_base_url(
    server: ServerThread, endpoint: str, kwargs: dict[str, Any], path: str, transport: str,
    anyio_backend: str,
) -> None:
    async with fluxstream.AsyncClient(
        server.base_url + "?" + VERSION, transport=transport, retry=RetryPolicy.off()
    ) as client:
        with anyio.fail_after(10):
            reply = await getattr(client, endpoint).complete(model="m", **kwargs)
    assert reply.outcome == "done"
    assert [r.path for r in server.records.requests] == [path]


async def test_a_starting_after_re_read_keeps_the_base_query(anyio_backend: str) -> None:
    """The resume of a stored Responses reply is a ``GET`` with its own query: both go."""
    sent: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        sent.append(request)

    headers = {"X-Fluxstream-Fault": "drop-after-events=12,fail-first=1",
               "X-Fluxstream-Attempt-Key": "query-reread"}
    async with serve(port=0, profile="openai") as server:
        async with httpx.AsyncClient(timeout=10, event_hooks={"request": [record]}) as http:
            async with fluxstream.AsyncClient(
                server.base_url + "?" + VERSION, http_client=http,
                resume=ResumePolicy(), retry=RetryPolicy.off(),
            ) as client:
                with anyio.fail_after(10):
                    reply = await client.responses.complete(
                        model="m", input="hi there", background=True, extra_headers=headers
                    )
    assert reply.outcome == "done"
    assert [r.method for r in sent] == ["POST", "GET"]
    assert sent[0].url.params["api-version"] == "2024-10-21"
    get = sent[1].url
    assert get.path == f"/v1/responses/{reply.id}"
    assert get.params["api-version"] == "2024-10-21" and get.params["stream"] == "true"
    assert get.params["starting_after"] == "11"


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_get_with_its_own_query_on_every_transport(transport: str) -> None:
    client = fluxstream.AsyncClient(
        "http://127.0.0.1:9/v1?" + VERSION, transport=transport, default_query={"x": "1"}
    )
    path = "responses/resp_1?stream=true&starting_after=3"
    request = client._settings.requests.build(path, None, {}, client.timeouts)  # a GET
    assert str(request.url) == (
        "http://127.0.0.1:9/v1/responses/resp_1?" + VERSION + "&x=1&stream=true&starting_after=3"
    )


def test_base_url_keeps_the_query_and_the_repr_hides_it() -> None:
    client = fluxstream.AsyncClient("https://x.example/openai/deployments/d/?" + VERSION, "k")
    assert client.base_url == "https://x.example/openai/deployments/d?" + VERSION
    assert "api-version" not in repr(client)
