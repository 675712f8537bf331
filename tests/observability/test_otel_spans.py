"""OpenTelemetry spans and metrics (``fluxstream.otel``) against the embedded server: one
CLIENT span per reply, with the GenAI conventions' attributes, for every API and every way a
stream ends; the span is current while the HTTP request is sent and goes upstream as
``traceparent``. asyncio and trio; httpx too with ``--transport httpx``."""

from __future__ import annotations

import gc
import time
import warnings
from typing import Any

import anyio
import pytest
from conftest import Telemetry
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "a secret question"}]
SLOW = {"X-Fluxstream-Fault": "drip=0.02"}
NO_RESUME = ResumePolicy(last_event_id=False, starting_after=False)
PARAMS = {"max_tokens": 12, "temperature": 0.25, "top_p": 0.5, "seed": 7}


def attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


def common_attributes_hold(span: Any, server: ServerThread, *, provider: str) -> None:
    a = attrs(span)
    assert span.kind is SpanKind.CLIENT and span.name == "chat m" and span.end_time is not None
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == provider
    assert a["gen_ai.request.model"] == "m"
    assert a["server.address"] == "127.0.0.1"
    assert a["server.port"] == server.server.port


@pytest.mark.parametrize(
    ("api", "provider"),
    [("chat", "openai"), ("responses", "openai"), ("messages", "anthropic")],
)
async def test_one_span_per_reply_with_the_conventions_attributes(
    server: ServerThread, telemetry: Telemetry, api: str, provider: str
) -> None:
    async with fluxstream.AsyncClient(server.base_url,
                                      observers=[telemetry.observer()]) as client:
        if api == "responses":
            reply = await client.responses.complete(
                model="m", input="hi", max_output_tokens=12, temperature=0.25
            )
        else:
            endpoint = client.chat if api == "chat" else client.messages
            reply = await endpoint.complete(model="m", messages=MSG, **PARAMS)
    span = telemetry.span()
    common_attributes_hold(span, server, provider=provider)
    a = attrs(span)
    assert a["gen_ai.request.max_tokens"] == 12 and a["gen_ai.request.temperature"] == 0.25
    if api != "responses":
        assert a["gen_ai.request.top_p"] == 0.5 and a["gen_ai.request.seed"] == 7
    assert a["gen_ai.response.model"] == reply.model
    assert a["gen_ai.response.id"] == reply.id and reply.id
    assert list(a["gen_ai.response.finish_reasons"]) == [c.finish_reason for c in reply.choices]
    assert reply.usage is not None and reply.usage_estimate is None
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == reply.usage.completion_tokens
    assert a["fluxstream.usage.estimated"] is False
    assert a["fluxstream.outcome"] == "done" and a["fluxstream.attempts"] == 1
    assert a["fluxstream.resumes"] == 0 and a["fluxstream.skipped_frames"] == 0
    assert a["fluxstream.time_to_first_token"] > 0
    assert "error.type" not in a and span.status.status_code is StatusCode.UNSET
    assert not any(k.startswith(("gen_ai.input", "gen_ai.output.messages")) for k in a)
    metrics = telemetry.metrics()
    assert len(metrics["gen_ai.client.operation.duration"]) == 1
    assert len(metrics["gen_ai.client.operation.time_to_first_chunk"]) == 1
    assert metrics["gen_ai.client.operation.time_per_output_chunk"][0].count >= 1
    tokens = {p.attributes["gen_ai.token.type"]: p for p in metrics["gen_ai.client.token.usage"]}
    assert tokens["input"].sum == reply.usage.prompt_tokens
    assert tokens["output"].sum == reply.usage.completion_tokens
    assert tokens["output"].attributes["fluxstream.usage.estimated"] is False
    (outcome,) = metrics["fluxstream.client.stream.outcomes"]
    assert outcome.value == 1 and outcome.attributes["fluxstream.outcome"] == "done"
    duration = metrics["gen_ai.client.operation.duration"][0]
    assert list(duration.explicit_bounds)[:3] == [0.01, 0.02, 0.04]


async def test_a_truncated_stream_ends_its_span_with_an_error_and_estimated_usage(
    server: ServerThread, telemetry: Telemetry
) -> None:
    drop = {"X-Fluxstream-Fault": "drop-after-events=4"}
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME) as client:
        stream = client.chat.stream(model="m", messages=MSG, max_tokens=40, extra_headers=drop,
                                    observers=[telemetry.observer()])
        reply = await stream.until_done()
    assert reply.outcome is fluxstream.Outcome.TRUNCATED
    span = telemetry.span()
    a = attrs(span)
    assert a["fluxstream.outcome"] == "truncated" and a["error.type"]
    assert span.status.status_code is StatusCode.ERROR
    assert reply.usage is None and reply.usage_estimate is not None
    assert a["fluxstream.usage.estimated"] is True
    assert a["gen_ai.usage.output_tokens"] == reply.usage_estimate.output_tokens > 0
    tokens = telemetry.metrics()["gen_ai.client.token.usage"]
    assert [p.attributes["fluxstream.usage.estimated"] for p in tokens] == [True]


async def test_a_failed_request_sets_error_type(
    server: ServerThread, telemetry: Telemetry
) -> None:
    refused = {"X-Fluxstream-Fault": "status=400"}
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        with pytest.raises(fluxstream.APIStatusError):
            await c.chat.complete(model="m", messages=MSG, extra_headers=refused)
    span = telemetry.span()
    a = attrs(span)
    assert a["fluxstream.outcome"] == "failed" and a["error.type"] == "APIStatusError"
    assert span.status.status_code is StatusCode.ERROR
    (point,) = telemetry.metrics()["gen_ai.client.operation.duration"]
    assert point.attributes["error.type"] == "APIStatusError"


async def test_a_stall_sets_the_typed_error(server: ServerThread, telemetry: Telemetry) -> None:
    stall = {"X-Fluxstream-Fault": "stall=30,stall-after-events=2"}
    async with fluxstream.AsyncClient(server.base_url, timeouts=fluxstream.Timeouts(stall=0.3),
                                      observers=[telemetry.observer()]) as client:
        with anyio.fail_after(20), pytest.raises(fluxstream.StallTimeoutError):
            await client.chat.complete(model="m", messages=MSG, extra_headers=stall)
    assert attrs(telemetry.span())["error.type"] == "StallTimeoutError"


async def test_a_cancelled_task_ends_the_span_cancelled(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        stream = c.chat.stream(model="m", messages=MSG, max_tokens=200,
                               extra_headers={"X-Fluxstream-Fault": "drip=0.05"})
        # Cancelled once text came (a fixed time could pass before any did on a loaded
        # machine, and the estimate below needs a token).
        with anyio.CancelScope() as scope:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    scope.cancel()
        assert scope.cancelled_caught
        assert len(telemetry.spans()) == 1  # ended at once, not when collected
        await stream.aclose()
    span = telemetry.span()
    a = attrs(span)
    assert a["fluxstream.outcome"] == "cancelled" and "error.type" not in a
    assert a["fluxstream.usage.estimated"] is True and a["gen_ai.usage.output_tokens"] >= 1


async def test_break_without_async_with_ends_the_span_when_collected(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        stream = c.chat.stream(model="m", messages=MSG, max_tokens=50, extra_headers=SLOW)
        async for _ in stream:
            break
        assert telemetry.spans() == []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            del stream
            gc.collect()
        # Ended by the finalizer itself, not by a close left to the loop: checked before
        # anything else runs, so a late end fails here instead of racing a sleep.
        assert attrs(telemetry.span())["fluxstream.outcome"] == "cancelled"
    telemetry.span()  # still the one span once the client closed


async def test_break_inside_async_with_ends_the_span(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        async with c.chat.stream(model="m", messages=MSG, extra_headers=SLOW) as stream:
            async for _ in stream:
                break
    assert attrs(telemetry.span())["fluxstream.outcome"] == "cancelled"


async def test_a_client_closed_under_a_stream_ends_the_span(
    server: ServerThread, telemetry: Telemetry
) -> None:
    """The stream ends ``truncated`` at once (on every transport; see the parity suite), and
    so does its span: never only at the read timeout."""
    client = fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()])
    stream = client.chat.stream(model="m", messages=MSG, max_tokens=200,
                                extra_headers={"X-Fluxstream-Fault": "drip=0.05"})
    closed_at = None
    with anyio.fail_after(20):
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta) and closed_at is None:
                    closed_at = time.monotonic()
                    await client.aclose()
    # at once: well under the 10 s the reply would take (1 s left a loaded worker too little)
    assert closed_at is not None and time.monotonic() - closed_at < 3.0
    span = attrs(telemetry.span())
    assert span["fluxstream.outcome"] == "truncated"


async def test_retries_and_resumes_are_span_events(
    server: ServerThread, telemetry: Telemetry
) -> None:
    fast = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
    async with fluxstream.AsyncClient(server.base_url, retry=fast,
                                      observers=[telemetry.observer()]) as client:
        await client.chat.complete(model="m", messages=MSG,
                                   extra_headers={"X-Fluxstream-Fault": "fail-first=2"})
        await client.chat.complete(  # another request: the server counts fail-first per body
            model="m", messages=MSG, max_tokens=20,
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=3,fail-first=1"},
        )
    retried, resumed = telemetry.spans()
    assert [e.name for e in retried.events] == ["fluxstream.retry", "fluxstream.retry"]
    assert [e.attributes["fluxstream.attempt"] for e in retried.events] == [2, 3]
    assert attrs(retried)["fluxstream.attempts"] == 3
    assert [e.name for e in resumed.events] == ["fluxstream.resume"]
    assert resumed.events[0].attributes["fluxstream.resume.strategy"] == "last_event_id"
    assert attrs(resumed)["fluxstream.resumes"] == 1


async def test_the_span_is_the_parent_of_the_http_request_and_goes_upstream(
    server: ServerThread, telemetry: Telemetry
) -> None:
    """An instrumented HTTP library starts its span in ``send``: it is the reply span's child
    there, on either transport, and its context is what reaches the server."""
    tracer = telemetry.tracer_provider.get_tracer("http")
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        http = c.http_client
        send = http.send

        async def traced_send(request: Any, **kwargs: Any) -> Any:
            with tracer.start_as_current_span("POST", kind=SpanKind.CLIENT):
                return await send(request, **kwargs)

        http.send = traced_send
        try:
            await c.chat.complete(model="m", messages=MSG, max_tokens=5)
        finally:
            del http.send
    reply_span = telemetry.span()
    (http_span,) = [s for s in telemetry.spans() if s.name == "POST"]
    assert http_span.parent is not None
    assert http_span.parent.span_id == reply_span.context.span_id
    assert http_span.context.trace_id == reply_span.context.trace_id
    traceparent = server.records.requests[-1].header("traceparent")
    assert traceparent is not None
    _, trace_id, parent_id, _ = traceparent.split("-")
    assert int(trace_id, 16) == reply_span.context.trace_id
    assert int(parent_id, 16) == reply_span.context.span_id
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing left current


async def test_every_request_of_a_stream_carries_its_traceparent(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        await c.chat.complete(
            model="m", messages=MSG,
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=3,fail-first=1"},
        )
    span = telemetry.span()
    headers = [r.header("traceparent") for r in server.records.requests]
    assert len(headers) == 2
    assert all(h is not None and int(h.split("-")[2], 16) == span.context.span_id
               for h in headers)


async def test_content_is_recorded_only_when_opted_in(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        await client.chat.complete(model="m", messages=MSG, max_tokens=5,
                                   observers=[telemetry.observer()])
        reply = await client.chat.complete(model="m", messages=MSG, max_tokens=5,
                                           observers=[telemetry.observer(capture_content=True)])
    hidden, shown = telemetry.spans()
    assert not any("secret" in str(v) for v in attrs(hidden).values())
    assert not any("secret" in str(e.attributes) for e in hidden.events)
    assert "a secret question" in attrs(shown)["gen_ai.input.messages"]
    assert reply.text in attrs(shown)["gen_ai.output.messages"]


async def test_content_is_recorded_when_the_environment_opts_in(
    server: ServerThread, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        await c.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert "a secret question" in attrs(telemetry.span())["gen_ai.input.messages"]


async def test_instrument_adds_the_observer_to_a_client(
    server: ServerThread, telemetry: Telemetry
) -> None:
    from fluxstream.otel import instrument

    async with fluxstream.AsyncClient(server.base_url) as client:
        instrument(client, tracer_provider=telemetry.tracer_provider,
                   meter_provider=telemetry.meter_provider)
        await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert attrs(telemetry.span())["fluxstream.outcome"] == "done"


async def test_an_uninstrumented_client_sends_no_traceparent_and_records_nothing(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        await client.chat.complete(model="m", messages=MSG, max_tokens=5)
    assert server.records.requests[-1].header("traceparent") is None
    assert telemetry.spans() == [] and telemetry.metrics() == {}


async def test_concurrent_streams_of_one_observer_get_their_own_spans(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as c:
        async with anyio.create_task_group() as group:
            for n in range(5):
                group.start_soon(lambda n=n: c.chat.complete(
                    model="m", messages=MSG, max_tokens=5 + n, extra_headers=SLOW))
    spans = telemetry.spans()
    assert len(spans) == 5
    assert sorted(attrs(s)["gen_ai.request.max_tokens"] for s in spans) == [5, 6, 7, 8, 9]
    assert len({s.context.span_id for s in spans}) == 5
    assert all(s.parent is None for s in spans)


async def test_every_chunk_records_the_time_per_output_chunk_of_each_chunk(
    server: ServerThread, telemetry: Telemetry
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.chat.stream(model="m", messages=MSG, max_tokens=12,
                                      observers=[telemetry.observer(every_chunk=True)]) as s:
            await s.until_done()
    (point,) = telemetry.metrics()["gen_ai.client.operation.time_per_output_chunk"]
    assert point.count == s.stats.content_events - 1 >= 11


async def test_a_stream_cut_on_a_usage_snapshot_says_estimated_on_the_span(
    server: ServerThread, telemetry: Telemetry
) -> None:
    """Anthropic's ``message_start`` usage (``output_tokens: 1``) is a snapshot: the span
    carries the estimate, marked estimated, never the placeholder."""
    cut = {"X-Fluxstream-Fault": "drop-after-events=11"}  # after eight text deltas
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME) as client:
        reply = await client.messages.stream(
            model="m", messages=MSG, max_tokens=40, extra_headers=cut,
            observers=[telemetry.observer()]).until_done()
    assert reply.usage is not None and reply.usage.completion_tokens == 1
    a = attrs(telemetry.span())
    assert a["fluxstream.usage.estimated"] is True
    assert a["gen_ai.usage.output_tokens"] == 8
    assert a["gen_ai.usage.input_tokens"] == reply.usage.prompt_tokens
    output = [p for p in telemetry.metrics()["gen_ai.client.token.usage"]
              if p.attributes["gen_ai.token.type"] == "output"]
    assert [(p.sum, p.attributes["fluxstream.usage.estimated"]) for p in output] == [(8, True)]


async def test_a_reply_that_moved_counts_every_upstream_on_the_span(
    server: ServerThread, telemetry: Telemetry
) -> None:
    cut = {"X-Fluxstream-Fault": "drop-after-events=11"}
    async with fluxstream.AsyncClient(
        server.base_url, resume=NO_RESUME, observers=[telemetry.observer()],
        fallbacks=[fluxstream.Upstream(server.base_url, name="again")],
        failover=fluxstream.Failover(per_upstream_attempts=1),
    ) as client:
        stream = client.messages.stream(model="m", messages=MSG, max_tokens=40,
                                        extra_headers=cut)
        reply = await stream.until_done()
    total = reply.total_usage
    assert len(reply.segments) == 2 and total is not None and total.estimated
    a = attrs(telemetry.span())
    assert a["gen_ai.usage.output_tokens"] == total.completion_tokens
    assert a["gen_ai.usage.input_tokens"] == total.prompt_tokens
    assert a["fluxstream.usage.estimated"] is True


def test_a_count_an_int64_attribute_cannot_hold_is_never_set() -> None:
    from fluxstream._core.genai_attributes import tokens_of
    from fluxstream._reply import UsageEstimate
    from fluxstream._wire import Usage

    huge = fluxstream.Reply(usage=Usage(prompt_tokens=10**30, completion_tokens=2))
    assert tokens_of(huge) == (None, 2, False)
    negative = fluxstream.Reply(usage=Usage(prompt_tokens=-5, completion_tokens=2**63))
    assert tokens_of(negative) == (None, None, False)
    estimated = fluxstream.Reply(usage_estimate=UsageEstimate(output_tokens=3, input_tokens=4))
    assert tokens_of(estimated) == (4, 3, True)


def test_a_span_that_records_nothing_still_carries_the_trace_context_to_the_request(
    telemetry: Telemetry,
) -> None:
    """Whether or not fluxstream's own spans are traced, a request goes out in the trace it
    belongs to: with a tracer provider that traces nothing (metrics only), inside an
    application's span, that span's context is current while sending and goes upstream as
    ``traceparent``; outside any span nothing is written; a span sampled out is current and
    propagated unsampled (its ``sampled`` flag off). The stream is measured each time."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from opentelemetry.trace import INVALID_SPAN, NoOpTracerProvider

    from fluxstream._core.progress import StreamStats
    from fluxstream._observe import SendInfo, StreamInfo
    from fluxstream._reply import Outcome, Reply
    from fluxstream.otel import OpenTelemetryObserver

    def send_inside(observer: Any, outer: Any) -> tuple[Any, dict[str, str]]:
        """The current span while ``observer``'s stream sends its first request (inside
        ``outer``), and the headers it wrote."""
        stream = observer.for_stream()
        headers: dict[str, str] = {}
        with trace.use_span(outer, end_on_exit=False):
            stream.on_open(StreamInfo(content_key="k", path="p", model="m", resuming=False))
            context = stream.on_send(headers, SendInfo(1, "first"))
            if context is None:
                current = trace.get_current_span()
            else:
                with context:
                    current = trace.get_current_span()
        stream.on_end(Reply(model="m", outcome=Outcome.DONE), StreamStats(
            bytes=1, events=1, skipped_frames=0, heartbeats=0, time_to_first_token=0.01,
            duration=0.02, attempts=1, resumes=0))
        return current, headers

    outer = telemetry.tracer_provider.get_tracer("app").start_span("the application's")
    outer_context = outer.get_span_context()
    untraced = OpenTelemetryObserver(tracer_provider=NoOpTracerProvider(),
                                     meter_provider=telemetry.meter_provider)
    current, headers = send_inside(untraced, outer)
    assert current.get_span_context() == outer_context
    assert headers["traceparent"] == (
        f"00-{outer_context.trace_id:032x}-{outer_context.span_id:016x}"
        f"-{outer_context.trace_flags:02x}")
    current, headers = send_inside(untraced, INVALID_SPAN)
    assert not current.get_span_context().is_valid and headers == {}

    unsampled = OpenTelemetryObserver(tracer_provider=TracerProvider(sampler=ALWAYS_OFF),
                                      meter_provider=telemetry.meter_provider)
    current, headers = send_inside(unsampled, INVALID_SPAN)
    assert current.get_span_context().is_valid and not current.is_recording()
    assert int(headers["traceparent"].rsplit("-", 1)[1], 16) & 1 == 0  # not sampled
    outer.end()
    assert sum(p.count for p in telemetry.metrics()["gen_ai.client.operation.duration"]) == 3
