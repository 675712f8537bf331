"""With OpenTelemetry's own HTTP instrumentations enabled (``opentelemetry-instrumentation-
aiohttp-client`` for the default aiohttp adapter, ``opentelemetry-instrumentation-httpx`` for
the httpx transport), each HTTP request's span is a child of the reply's span, one per request
(a retry included), and the server sees that HTTP span's ``traceparent``. asyncio and trio
(httpx there); httpx on asyncio with ``--transport httpx``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Telemetry

pytest.importorskip("opentelemetry.instrumentation.httpx")
pytest.importorskip("opentelemetry.instrumentation.aiohttp_client")

from opentelemetry import trace
from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.trace import SpanKind

import fluxstream
from fluxstream._retry import RetryPolicy
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
AIOHTTP_SCOPE = "opentelemetry.instrumentation.aiohttp_client"
HTTPX_SCOPE = "opentelemetry.instrumentation.httpx"


@pytest.fixture
def instrumented_globally(telemetry: Telemetry) -> Iterator[None]:
    """What an application does: the aiohttp instrumentor on for every session made from now
    on (it patches ``ClientSession``), off when the test ends."""
    instrumentor = AioHttpClientInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


class InstrumentedClient:
    """A fluxstream client whose HTTP requests are traced until it is closed: on the httpx
    transport (``--transport httpx``) by instrumenting the ``httpx.AsyncClient`` it uses; the
    default auto client through aiohttp's instrumentor (``instrumented_globally``) on asyncio,
    httpx's on trio. ``scope`` names the instrumentation whose spans its requests make."""

    def __init__(
        self, server: ServerThread, telemetry: Telemetry, backend: str, *, observed: bool = True,
        **options: Any,
    ) -> None:
        observers = [telemetry.observer()] if observed else []
        self.client = fluxstream.AsyncClient(server.base_url, observers=observers, **options)
        http = self.client.http_client
        self.httpx = isinstance(http, httpx.AsyncClient)
        on_aiohttp = (not self.httpx and backend == "asyncio"
                      and getattr(http, "uses_aiohttp", False))
        self.scope = AIOHTTP_SCOPE if on_aiohttp else HTTPX_SCOPE
        #: The auto client on trio makes its own httpx client at its first request: httpx's
        #: instrumentor is then on for every client (it patches httpx's transports).
        self.httpx_everywhere = not self.httpx and not on_aiohttp
        if self.httpx:
            HTTPXClientInstrumentor.instrument_client(
                http, tracer_provider=telemetry.tracer_provider
            )
        elif self.httpx_everywhere:
            HTTPXClientInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)

    async def __aenter__(self) -> fluxstream.AsyncClient:
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.client.aclose()
        finally:
            if self.httpx:
                HTTPXClientInstrumentor.uninstrument_client(self.client.http_client)
            elif self.httpx_everywhere:
                HTTPXClientInstrumentor().uninstrument()


def http_spans(telemetry: Telemetry, scope: str) -> list[Any]:
    spans = [s for s in telemetry.spans()
             if s.instrumentation_scope is not None and s.instrumentation_scope.name == scope]
    return sorted(spans, key=lambda s: s.start_time)


def traceparent_of(span: Any) -> tuple[int, int]:
    return span.context.trace_id, span.context.span_id


def parsed(header: str | None) -> tuple[int, int]:
    assert header is not None
    _, trace_id, span_id, _ = header.split("-")
    return int(trace_id, 16), int(span_id, 16)


async def test_the_instrumented_http_span_is_a_child_of_the_reply_span(
    server: ServerThread, telemetry: Telemetry, instrumented_globally: None, anyio_backend: str
) -> None:
    instrumented = InstrumentedClient(server, telemetry, anyio_backend)
    async with instrumented as client:
        await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    reply_span = telemetry.span()
    (http_span,) = http_spans(telemetry, instrumented.scope)
    assert http_span.kind is SpanKind.CLIENT
    assert http_span.parent is not None
    assert http_span.parent.span_id == reply_span.context.span_id
    assert http_span.context.trace_id == reply_span.context.trace_id
    assert http_span.end_time is not None and http_span.end_time <= reply_span.end_time
    # The HTTP library's span is the innermost: its context is what goes upstream.
    request = server.records.requests[-1]
    assert parsed(request.header("traceparent")) == traceparent_of(http_span)
    assert trace.get_current_span() is trace.INVALID_SPAN


async def test_a_retry_is_a_second_http_span_under_the_same_reply_span(
    server: ServerThread, telemetry: Telemetry, instrumented_globally: None, anyio_backend: str
) -> None:
    fast = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
    instrumented = InstrumentedClient(server, telemetry, anyio_backend, retry=fast)
    async with instrumented as client:
        await client.chat.complete(model="m", messages=MSG, max_tokens=5,
                                   extra_headers={"X-Fluxstream-Fault": "fail-first=1"})
    reply_span = telemetry.span()
    assert [e.name for e in reply_span.events] == ["fluxstream.retry"]
    first, second = http_spans(telemetry, instrumented.scope)
    for http_span in (first, second):
        assert http_span.parent is not None
        assert http_span.parent.span_id == reply_span.context.span_id
        assert http_span.context.trace_id == reply_span.context.trace_id
    assert first.context.span_id != second.context.span_id
    assert first.end_time <= second.start_time
    # Each request carried its own HTTP span's context, the 503 one and the retry alike.
    seen = [parsed(r.header("traceparent")) for r in server.records.requests]
    assert seen == [traceparent_of(first), traceparent_of(second)]


async def test_without_the_observer_the_http_span_is_a_root(
    server: ServerThread, telemetry: Telemetry, instrumented_globally: None, anyio_backend: str
) -> None:
    """The parenting comes from the observer, not from the instrumentor: a client without it
    gives a lone HTTP span (what the tests above would see if the span were not current)."""
    instrumented = InstrumentedClient(server, telemetry, anyio_backend, observed=False)
    async with instrumented as client:
        await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    (http_span,) = http_spans(telemetry, instrumented.scope)
    assert http_span.parent is None
    assert [s for s in telemetry.spans() if s.name.startswith("chat")] == []
