"""Whole (non-event-stream) bodies from a hostile server become typed errors (the transport's side;
the parser's is tested sans-IO): a 200 JSON body that is not an object, JSON nested deeper than
Python's recursion limit (in a reply or in a 4xx/5xx error body, which must still be an
``APIStatusError`` and be retried when its status is retryable), and a connection that breaks
while such a body is read. Never a raw ``TypeError``, ``RecursionError`` or ``httpx`` error.

A scripted httpx transport gives the responses no honest server gives.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

import fluxstream
from fluxstream._retry import RetryPolicy
from fluxstream.errors import APIStatusError, FluxstreamError

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
JSON = {"content-type": "application/json"}
DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_ERROR = b'{"error": {"message": "x", "detail": ' + DEEP + b"}}"
FAST = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
COMPLETION = {
    "id": "c", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"},
                 "finish_reason": "stop"}],
}


class Breaking(httpx.AsyncByteStream):
    """A body that yields ``parts``, then breaks like a dropped connection."""

    def __init__(self, *parts: bytes) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part
        raise httpx.ReadError("connection reset by peer")


def scripted(*responses: Callable[[], httpx.Response], **kwargs: Any) -> tuple[
    fluxstream.AsyncClient, list[int]
]:
    """A client whose n-th request gets ``responses[n]()`` (the last one repeats)."""
    sent: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return responses[min(len(sent), len(responses)) - 1]()

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    kwargs.setdefault("retry", FAST)
    return fluxstream.AsyncClient("http://scripted.test/v1", "sk-test", http_client=http,
                                  **kwargs), sent


@pytest.mark.parametrize("body", [b"[1,2]", b"null", b"5", b'"text"', DEEP])
async def test_a_200_json_body_that_is_no_completion_is_a_typed_error(
    body: bytes, anyio_backend: str
) -> None:
    client, sent = scripted(lambda: httpx.Response(200, headers=JSON, content=body))
    async with client:
        stream = client.chat.stream(model="m", messages=MSG)
        with pytest.raises(FluxstreamError):
            async with stream:
                pass
    assert stream.outcome is fluxstream.Outcome.FAILED
    assert len(sent) == 1  # a broken reply is not asked for again


async def test_a_deeply_nested_retryable_error_body_is_a_status_error_and_retried(
    anyio_backend: str,
) -> None:
    client, sent = scripted(
        lambda: httpx.Response(503, headers=JSON, content=DEEP_ERROR),
        lambda: httpx.Response(200, headers=JSON, content=json.dumps(COMPLETION).encode()),
    )
    async with client:
        reply = await client.chat.complete(model="m", messages=MSG)
    assert reply.text == "fine" and len(sent) == 2


@pytest.mark.parametrize("body", [DEEP, DEEP_ERROR])
async def test_a_deeply_nested_error_body_is_a_status_error(
    body: bytes, anyio_backend: str
) -> None:
    client, sent = scripted(lambda: httpx.Response(400, headers=JSON, content=body))
    async with client:
        with pytest.raises(APIStatusError) as info:
            await client.chat.complete(model="m", messages=MSG)
    assert info.value.status_code == 400 and len(sent) == 1


async def test_a_connection_breaking_in_an_error_body_is_a_status_error(
    anyio_backend: str,
) -> None:
    client, sent = scripted(
        lambda: httpx.Response(400, headers=JSON, stream=Breaking(b'{"error": {"mess'))
    )
    async with client:
        with pytest.raises(APIStatusError) as info:
            await client.chat.complete(model="m", messages=MSG)
    assert info.value.status_code == 400 and len(sent) == 1


async def test_a_connection_breaking_in_a_retryable_error_body_is_retried(
    anyio_backend: str,
) -> None:
    client, sent = scripted(
        lambda: httpx.Response(503, headers=JSON, stream=Breaking(b'{"error"')),
        lambda: httpx.Response(200, headers=JSON, content=json.dumps(COMPLETION).encode()),
    )
    async with client:
        reply = await client.chat.complete(model="m", messages=MSG)
    assert reply.text == "fine" and len(sent) == 2


async def test_a_connection_breaking_in_a_json_reply_is_a_typed_error(
    anyio_backend: str,
) -> None:
    client, sent = scripted(
        lambda: httpx.Response(200, headers=JSON, stream=Breaking(b'{"id": "c", "cho'))
    )
    async with client:
        stream = client.chat.stream(model="m", messages=MSG)
        with pytest.raises(FluxstreamError) as info:
            async with stream:
                pass
    assert not isinstance(info.value, httpx.HTTPError)
    assert stream.outcome is fluxstream.Outcome.FAILED and len(sent) == 1
