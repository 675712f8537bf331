"""What a client builds once instead of per stream gives every stream what it built before.

Every request pays its set-up before its first byte (the first token at c=1 waits for it), so
what does not depend on the request is made once: the request builders of an API under a base
URL, the merged headers of an API, the HTTP library's timeout keywords, an API's retry policy
derived from the client's, and the check of the usual response (a 2xx event stream) without a
coroutine of its own. Each shortcut is checked here against the general path it stands for.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

import fluxstream
from fluxstream._endpoints import ANTHROPIC_VERSION
from fluxstream._io.transport import ControlledResponse, ResponseControls, controls_of
from fluxstream._retry import RetryPolicy
from fluxstream._timeouts import Timeouts
from fluxstream.apis.chat_completions import CHAT_COMPLETIONS

pytestmark = [pytest.mark.anyio, pytest.mark.asyncio_only]

MSG = [{"role": "user", "content": "hi"}]
SSE = b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n' \
    b"data: [DONE]\n\n"


def _recording_client(base_url: str, **kwargs: Any) -> tuple[fluxstream.AsyncClient, list[Any]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=SSE, headers={"content-type": "text/event-stream"})

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return fluxstream.AsyncClient(base_url, "sk-test", http_client=http, **kwargs), seen


async def _drain(stream: fluxstream.ReplyStream, outcome: str = "done") -> None:
    async with stream as s:
        async for _ in s:
            pass
    assert s.reply.outcome.value == outcome


async def test_requests_built_once_per_api_send_what_each_request_sent() -> None:
    """Streams of every API, before and after the base URL, the timeouts and the headers of a
    request change: URL, headers and timeouts are each request's own, as built afresh."""
    client, seen = _recording_client("http://one.test/v1", headers={"X-Team": "a"})
    await _drain(client.chat.stream(model="m", messages=MSG))
    made_before = client.chat.stream(model="m", messages=MSG)  # keeps its host
    await _drain(client.chat.stream(model="m", messages=MSG, extra_headers={"X-Req": "1"}))
    client.base_url = "http://two.test/v1?api-version=2"
    await _drain(client.chat.stream(model="m", messages=MSG))
    await _drain(made_before)
    client.timeouts = client.timeouts.replace(connect=7.0, read=7.0, write=7.0, pool=7.0)
    await _drain(client.chat.stream(model="m", messages=MSG,
                                    timeouts=Timeouts(connect=3.0)))
    await _drain(client.chat.stream(model="m", messages=MSG))
    urls = [str(r.url) for r in seen]
    assert urls == [
        "http://one.test/v1/chat/completions",
        "http://one.test/v1/chat/completions",
        "http://two.test/v1/chat/completions?api-version=2",
        "http://one.test/v1/chat/completions",
        "http://two.test/v1/chat/completions?api-version=2",
        "http://two.test/v1/chat/completions?api-version=2",
    ]
    for request in seen:
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["x-team"] == "a"
        assert request.headers["accept"] == "text/event-stream"
    assert [r.headers.get("x-req") for r in seen] == [None, "1", None, None, None, None]
    timeouts = [r.extensions["timeout"] for r in seen]
    assert timeouts[-2]["connect"] == 3.0 and timeouts[-2]["read"] == 7.0
    assert timeouts[-1]["connect"] == 7.0 and timeouts[-1]["read"] == 7.0
    await client.aclose()


async def test_api_headers_merged_once_are_the_merge_of_each_request() -> None:
    """Anthropic's version pin and key header, merged once per client: every request carries
    what the full merge gives, and a request's own header still goes over them."""
    client, seen = _recording_client("http://a.test/v1")
    for extra in (None, None, {"anthropic-version": "2099-01-01"}, None):
        # The mock answers in Chat Completions' format: only the request matters here.
        await _drain(client.messages.stream(model="m", messages=MSG, max_tokens=5,
                                            extra_headers=extra), "truncated")
    assert [r.headers["anthropic-version"] for r in seen] == [
        ANTHROPIC_VERSION, ANTHROPIC_VERSION, "2099-01-01",
        ANTHROPIC_VERSION,
    ]
    assert {r.headers["x-api-key"] for r in seen} == {"sk-test"}
    assert all("authorization" not in r.headers for r in seen)
    await client.aclose()


def test_api_retry_policy_derived_once_is_the_derivation_of_each_policy() -> None:
    """The Messages endpoint retries Anthropic's 529 with whatever policy is in force: the
    client's (as it is reassigned), a stream's own, or none when retries are off."""
    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", "k")
    endpoint = client.messages._endpoint
    first = endpoint.retry_policy(None)
    assert 529 in first.retry_status and first.max_attempts == 3
    assert endpoint.retry_policy(None) is first  # made once
    client.retry = RetryPolicy(max_attempts=5)
    again = endpoint.retry_policy(None)
    assert again.max_attempts == 5 and 529 in again.retry_status
    own = RetryPolicy(max_attempts=2, retry_status=frozenset({503}))
    assert endpoint.retry_policy(own).retry_status == frozenset({503, 529})
    off = RetryPolicy.off()
    assert endpoint.retry_policy(off) is off
    assert client.chat._endpoint.retry_policy(own) is own  # Chat Completions adds none


class _Response(ControlledResponse):
    """A response as ``Attempt`` sees it: status, headers, the body's bytes, and the codings
    its transport decodes."""

    def controls(self) -> ResponseControls:
        return ResponseControls(decodes=frozenset({"identity", "gzip", "deflate"}))

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status_code = status
        self.headers = headers
        self._body = body

    def aiter_bytes(self) -> AsyncIterator[bytes]:
        async def chunks() -> AsyncIterator[bytes]:
            yield self._body

        return chunks()

    async def aclose(self) -> None:
        pass


STATUSES = [199, 200, 204, 299, 300, 404, 503]
CONTENT_TYPES = [
    None, "", "text/event-stream", "Text/Event-Stream; charset=utf-8", " text/event-stream ",
    "text/event-streamx", "text/plain", "application/json", "application/problem+json",
]
CODINGS = [None, "", "identity", "gzip", "identity, gzip", "br", "gzip, x-unknown"]


async def test_the_usual_response_check_accepts_exactly_what_the_full_check_does() -> None:
    """Every status, content type and coding: the check without a coroutine says "usable
    event stream" exactly when the full check takes the response as one (and raises
    nothing)."""
    from fluxstream._io.attempt import Attempt, RequestSpec, _plain_event_stream
    from fluxstream._io.http_library import HttpErrors

    spec = RequestSpec(api=CHAT_COMPLETIONS, body={}, build=lambda *a: None, http=None,
                       errors=HttpErrors.for_client(httpx.AsyncClient))
    for status, ctype, coding in itertools.product(STATUSES, CONTENT_TYPES, CODINGS):
        headers = {k: v for k, v in (("content-type", ctype), ("content-encoding", coding))
                   if v is not None}
        response = _Response(status, headers, b'{"id": "x", "choices": []}')
        attempt = Attempt(spec)
        attempt.controls = controls_of(response)  # as ``open`` asks, when the response came
        try:
            await attempt._check(response, 1 << 20, None)
        except Exception:
            stream = False
        else:
            stream = attempt.body is not None
        assert _plain_event_stream(response, attempt.controls.decodes) is stream, (
            status, ctype, coding
        )
