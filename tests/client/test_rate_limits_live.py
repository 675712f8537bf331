"""Rate limits, retry advice and request ids from real responses over 127.0.0.1.

The embedded server states a limit in OpenAI's or Anthropic's headers and enforces it
(``rate-limit=N`` fault): every stream, reply and status error reads them; the retry policy
obeys ``x-should-retry`` over the status and waits ``retry-after-ms``; after a failover each
segment names its own upstream's request id. Run on both transports by the suite's
``--transport`` option, as every client test.
"""

from __future__ import annotations

import time

import pytest

import fluxstream
from fluxstream import APIStatusError, RateLimitError, RetryPolicy, Upstream
from fluxstream.server import Server, ServerThread

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "hi"}]


def fault(spec: str) -> dict[str, str]:
    return {"X-Fluxstream-Fault": spec}


async def drain(stream: fluxstream.ReplyStream) -> fluxstream.ReplyStream:
    async with stream:
        async for _ in stream:
            pass
    return stream


async def test_a_stream_and_its_reply_read_openai_s_headers(aserver: Server) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k") as client:
        before = time.time()
        stream = await drain(client.chat.stream(
            model="m", messages=USER, extra_headers=fault("rate-limit=3,rate-window=30")))
    limits = stream.rate_limits
    assert limits is not None and limits.requests is not None
    assert (limits.requests.limit, limits.requests.remaining) == (3, 2)
    assert limits.requests.reset is not None
    assert before + 25 < limits.requests.reset.timestamp() < time.time() + 31
    assert limits.tokens is not None and limits.tokens.limit == 100_000
    request = aserver.records.requests[-1].seq
    assert limits.request_id == stream.reply.request_id == f"req_{request}"
    assert limits.headers["x-ratelimit-limit-requests"] == "3"


async def test_a_stream_reads_anthropic_s_headers(aserver: Server) -> None:
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k") as client:
        stream = await drain(client.messages.stream(
            model="m", max_tokens=32, messages=USER,
            extra_headers=fault("rate-limit=5,rate-headers=anthropic")))
    limits = stream.rate_limits
    assert limits is not None
    kinds = {kind: limits.of(kind) for kind in ("requests", "tokens", "input_tokens",
                                                 "output_tokens")}
    assert all(value is not None for value in kinds.values())
    assert kinds["requests"] == fluxstream.RateLimit(5, 4, kinds["requests"].reset)  # type: ignore[union-attr]
    assert limits.input_tokens is not None and limits.input_tokens.limit == 80_000
    assert limits.request_id == stream.reply.request_id is not None


async def test_a_status_error_carries_the_limit_that_refused_it(aserver: Server) -> None:
    spec = fault("rate-limit=1,rate-window=30")
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k",
                                      retry=RetryPolicy.off()) as client:
        await drain(client.chat.stream(model="m", messages=USER, extra_headers=spec))
        with pytest.raises(RateLimitError) as caught:
            await drain(client.chat.stream(model="m", messages=USER, extra_headers=spec))
    error = caught.value
    assert error.rate_limits is not None and error.rate_limits.requests is not None
    assert error.rate_limits.requests.remaining == 0
    assert error.should_retry is True
    assert error.retry_after is not None and 20 < error.retry_after <= 30
    assert error.request_id == f"req_{aserver.records.requests[-1].seq}"
    assert error.headers["x-should-retry"] == "true"


@pytest.mark.parametrize(("spec", "requests"), [
    ("status=503,should-retry=false,fail-first=1", 1),  # retryable status, told not to
    ("status=400,should-retry=true,fail-first=1", 2),  # a refusal, told to try again
    ("status=503,fail-first=1", 2),  # nothing said: the status decides
])
async def test_x_should_retry_decides_over_the_status(
    aserver: Server, spec: str, requests: int, anyio_backend: str
) -> None:
    headers = {**fault(spec), "X-Fluxstream-Attempt-Key": f"{spec}-{anyio_backend}"}
    before = len(aserver.records.requests)
    policy = RetryPolicy(base_delay=0.01, max_delay=0.05)
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k",
                                      retry=policy) as client:
        try:
            stream = await drain(client.chat.stream(model="m", messages=USER,
                                                    extra_headers=headers))
        except APIStatusError:
            stream = None
    assert len(aserver.records.requests) - before == requests
    assert (stream is not None) is (requests == 2)


async def test_retry_after_ms_is_waited(aserver: Server, anyio_backend: str) -> None:
    headers = {**fault("status=429,retry-after-ms=400,retry-after=0,fail-first=1"),
               "X-Fluxstream-Attempt-Key": f"ms-{anyio_backend}"}
    policy = RetryPolicy(base_delay=0.001, max_delay=2.0)
    async with fluxstream.AsyncClient(base_url=aserver.base_url, api_key="k",
                                      retry=policy) as client:
        await drain(client.chat.stream(model="m", messages=USER, extra_headers=headers))
    first, second = aserver.records.requests[-2:]
    assert second.time - first.time >= 0.39


async def test_each_segment_names_its_own_upstream_s_request_id() -> None:
    with ServerThread(profile="openai") as primary, ServerThread(profile="openai") as fallback:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", retry=RetryPolicy.off(),
            fallbacks=[Upstream(fallback.base_url, api_key="k")],
        ) as client:
            stream = await drain(client.chat.stream(
                model="m", messages=USER, extra_headers=fault("status=503")))
        first, second = stream.reply.segments
        assert first.request_id == f"req_{primary.records.requests[-1].seq}"
        assert second.request_id == f"req_{fallback.records.requests[-1].seq}"
        assert stream.reply.request_id == second.request_id
