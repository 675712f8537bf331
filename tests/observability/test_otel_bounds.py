"""What OpenTelemetry keeps stays true and bounded: every observer's streams are counted, the
values a server sends are cut to a bounded length, the number of metric attribute sets is
capped, and a span ends even when setting its attributes fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Telemetry
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import StatusCode

import fluxstream
import fluxstream.otel as otel
from fluxstream._core.progress import StreamStats
from fluxstream._observe import StreamInfo
from fluxstream._reply import Choice, ErrorInfo, Outcome, Reply
from fluxstream.server import ServerThread

MSG = [{"role": "user", "content": "hi"}]
OUTCOMES = "fluxstream.client.stream.outcomes"
LONG = "x" * 4096


def info(model: str = "m") -> StreamInfo:
    return StreamInfo(content_key="k", path="chat/completions", model=model, resuming=False,
                      api="chat_completions", provider="openai",
                      server_address="127.0.0.1", server_port=8000)


def stats(error_type: str | None = None) -> StreamStats:
    return StreamStats(bytes=10, events=2, skipped_frames=0, heartbeats=0,
                       time_to_first_token=0.01, duration=0.02, attempts=1, resumes=0,
                       content_events=2, time_to_last_token=0.015, error_type=error_type)


def reply(model: str | None, **fields: Any) -> Reply:
    fields.setdefault("outcome", Outcome.DONE)
    return Reply(model=model, content_key="k", **fields)


def end_one(observer: otel.OpenTelemetryObserver, ended: Reply,
            stream_stats: StreamStats | None = None, *, request_model: str = "m") -> None:
    """One stream through the observer seam, as a stream calls it."""
    span = observer.for_stream()
    span.on_open(info(request_model))
    span.on_end(ended, stream_stats or stats())


def outcome_total(telemetry: Telemetry) -> int:
    return sum(point.value for point in telemetry.metrics().get(OUTCOMES, []))


def strings(attributes: Any) -> Iterator[str]:
    for value in dict(attributes or {}).values():
        if isinstance(value, str):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (v for v in value if isinstance(v, str))


# --------------------------------------------------------------------------- every observer


@pytest.mark.anyio
async def test_every_observer_s_streams_are_counted(
    server: ServerThread, telemetry: Telemetry
) -> None:
    """Two clients, each instrumented with its own observer, one stream each: two streams."""
    async with fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as one, \
            fluxstream.AsyncClient(server.base_url, observers=[telemetry.observer()]) as two:
        await one.chat.complete(model="m", messages=MSG, max_tokens=3)
        await two.chat.complete(model="m", messages=MSG, max_tokens=3)
        await two.chat.complete(model="m", messages=MSG, max_tokens=3)
    assert outcome_total(telemetry) == 3
    durations = telemetry.metrics()["gen_ai.client.operation.duration"]
    assert sum(point.count for point in durations) == 3


def test_observers_of_another_meter_provider_count_apart(telemetry: Telemetry) -> None:
    """Sharing the count is per meter provider: another provider's reader sees only its own."""
    reader = InMemoryMetricReader()
    other = MeterProvider(metric_readers=[reader])
    try:
        end_one(telemetry.observer(), reply("m"))
        end_one(telemetry.observer(), reply("m"))
        end_one(otel.OpenTelemetryObserver(tracer_provider=telemetry.tracer_provider,
                                           meter_provider=other), reply("m"))
        assert outcome_total(telemetry) == 2
        data = reader.get_metrics_data()
        assert data is not None
        points = [p for r in data.resource_metrics for s in r.scope_metrics
                  for m in s.metrics if m.name == OUTCOMES for p in m.data.data_points]
        assert sum(p.value for p in points) == 1
    finally:
        other.shutdown()


GLOBAL_PROVIDER = textwrap.dedent("""
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from fluxstream._core.progress import StreamStats
    from fluxstream._observe import StreamInfo
    from fluxstream.otel import OpenTelemetryObserver
    from fluxstream._reply import Outcome, Reply

    def end_one(observer):
        span = observer.for_stream()
        span.on_open(StreamInfo(content_key="k", path="p", model="m", resuming=False))
        span.on_end(Reply(model="m", outcome=Outcome.DONE), StreamStats(
            bytes=1, events=1, skipped_frames=0, heartbeats=0, time_to_first_token=0.01,
            duration=0.02, attempts=1, resumes=0))

    early = OpenTelemetryObserver()  # before the application sets its provider
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)
    late = OpenTelemetryObserver()
    named = OpenTelemetryObserver(meter_provider=provider)
    for observer in (early, late, late, named):
        end_one(observer)
    data = reader.get_metrics_data()
    print(sum(p.value for r in data.resource_metrics for s in r.scope_metrics
              for m in s.metrics if m.name == "fluxstream.client.stream.outcomes"
              for p in m.data.data_points))
""")


def test_observers_of_the_global_provider_count_together_whenever_it_was_set() -> None:
    """Observers made before the application sets the global meter provider, after it, and
    with that provider named: all their streams in one counter (a process of its own, as the
    global provider is set once per process)."""
    done = subprocess.run([sys.executable, "-c", GLOBAL_PROVIDER], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"


GLOBAL_TRACER = textwrap.dedent("""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from fluxstream._core.progress import StreamStats
    from fluxstream._observe import StreamInfo
    from fluxstream.otel import OpenTelemetryObserver
    from fluxstream._reply import Outcome, Reply

    def end_one(observer):
        span = observer.for_stream()
        span.on_open(StreamInfo(content_key="k", path="p", model="m", resuming=False,
                                body={"max_tokens": 5}, api="chat_completions"))
        span.on_end(Reply(model="m", outcome=Outcome.DONE), StreamStats(
            bytes=1, events=1, skipped_frames=0, heartbeats=0, time_to_first_token=0.01,
            duration=0.02, attempts=1, resumes=0))

    early = OpenTelemetryObserver()  # before the application sets its provider
    named = OpenTelemetryObserver(tracer_provider=trace.get_tracer_provider())  # its proxy
    end_one(early)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    for observer in (early, named):
        end_one(observer)
    for span in exporter.get_finished_spans():
        print(span.name, span.attributes.get("gen_ai.request.max_tokens"),
              span.attributes.get("fluxstream.content_key"))
""")


def test_observers_made_before_the_global_tracer_provider_trace_once_it_is_set() -> None:
    """Observers made while the global tracer provider is still OpenTelemetry's proxy (given
    none, or given the proxy): nothing is traced until the application sets its provider,
    then their spans carry every attribute (a process of its own, as the global provider is
    set once per process)."""
    done = subprocess.run([sys.executable, "-c", GLOBAL_TRACER], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == ["chat m 5 k", "chat m 5 k"], done.stdout


# --------------------------------------------------------------------------- bounds


def test_server_sent_models_never_grow_the_metrics_past_a_cap(telemetry: Telemetry) -> None:
    """600 replies whose ``model`` carries a request id (4 KB each): the counter and the
    histograms keep a bounded number of attribute sets, every value cut to a bounded length,
    and every stream is still counted (past the cap under ``_OTHER``)."""
    observer = telemetry.observer()
    for i in range(600):
        end_one(observer, reply(f"m-{i:04d}-{LONG}"))
    metrics = telemetry.metrics()
    counted = metrics[OUTCOMES]
    assert sum(p.value for p in counted) == 600
    assert len(counted) <= otel.MAX_RESPONSE_VALUES + 1
    models = {p.attributes["gen_ai.response.model"] for p in counted}
    assert otel.OTHER in models
    assert f"m-0000-{LONG}"[: otel.MAX_VALUE_LENGTH] in models  # the first ones as they came
    for name, points in metrics.items():
        assert len(points) <= 2 * (otel.MAX_RESPONSE_VALUES + 1), name
        for point in points:
            assert all(len(s) <= otel.MAX_VALUE_LENGTH for s in strings(point.attributes))
    assert sum(p.count for p in metrics["gen_ai.client.operation.duration"]) == 600


def test_server_sent_error_types_are_capped_as_well(telemetry: Telemetry) -> None:
    observer = telemetry.observer()
    for i in range(200):
        failed = reply("m", outcome=Outcome.FAILED,
                       error=ErrorInfo(message="no", type=f"error_{i}_{LONG}"))
        end_one(observer, failed)
    points = telemetry.metrics()["gen_ai.client.operation.duration"]
    errors = {p.attributes["error.type"] for p in points}
    assert len(errors) <= otel.MAX_RESPONSE_VALUES + 1 and otel.OTHER in errors
    assert all(len(e) <= otel.MAX_VALUE_LENGTH for e in errors)
    assert sum(p.count for p in points) == 200


def test_past_the_cap_of_attribute_sets_the_counter_counts_the_overflow_set(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many series (request models are the application's, but may be many too): past
    ``MAX_OUTCOME_SETS`` a stream is counted under OpenTelemetry's overflow attribute set."""
    monkeypatch.setattr(otel, "MAX_OUTCOME_SETS", 20)
    observer = telemetry.observer()
    for i in range(50):
        end_one(observer, reply("m"), request_model=f"model-{i}")
    points = telemetry.metrics()[OUTCOMES]
    assert sum(p.value for p in points) == 50
    assert len(points) == 21
    (overflow,) = [p for p in points if "otel.metric.overflow" in p.attributes]
    assert dict(overflow.attributes) == {"otel.metric.overflow": True}
    assert overflow.value == 30


def test_server_values_on_the_span_are_cut(telemetry: Telemetry) -> None:
    failed = reply(f"model-{LONG}", id=f"id-{LONG}", outcome=Outcome.FAILED,
                   error=ErrorInfo(message="no", type=f"type-{LONG}"),
                   end_reason=f"error event: {LONG}",
                   choices=[Choice(index=0, finish_reason=f"why-{LONG}")])
    end_one(telemetry.observer(), failed)
    (span,) = telemetry.spans()
    a = dict(span.attributes or {})
    assert a["gen_ai.response.model"] == f"model-{LONG}"[: otel.MAX_VALUE_LENGTH]
    assert a["gen_ai.response.id"] == f"id-{LONG}"[: otel.MAX_VALUE_LENGTH]
    assert a["error.type"] == f"type-{LONG}"[: otel.MAX_VALUE_LENGTH]
    assert list(a["gen_ai.response.finish_reasons"]) == [
        f"why-{LONG}"[: otel.MAX_VALUE_LENGTH]]
    assert a["fluxstream.end_reason"] == f"error event: {LONG}"[: otel.MAX_REASON_LENGTH]
    assert span.status.status_code is StatusCode.ERROR
    assert len(span.status.description or "") <= otel.MAX_REASON_LENGTH


# --------------------------------------------------------------------------- the span ends


class _Failing:
    """A span that refuses attributes (a broken processor or a custom SDK)."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set_attributes(self, attributes: Any) -> None:
        raise RuntimeError("attributes refused")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._span, name)


class _FailingTracer:
    def __init__(self, tracer: Any) -> None:
        self._tracer = tracer

    def start_span(self, *args: Any, **kwargs: Any) -> Any:
        return _Failing(self._tracer.start_span(*args, **kwargs))


class _FailingProvider(trace.TracerProvider):
    def __init__(self, provider: Any) -> None:
        self._provider = provider

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        return _FailingTracer(self._provider.get_tracer(*args, **kwargs))


@pytest.mark.anyio
async def test_a_span_whose_attributes_fail_still_ends_and_is_measured(
    server: ServerThread, telemetry: Telemetry
) -> None:
    observer = otel.OpenTelemetryObserver(
        tracer_provider=_FailingProvider(telemetry.tracer_provider),
        meter_provider=telemetry.meter_provider)
    async with fluxstream.AsyncClient(server.base_url, observers=[observer]) as client:
        async with client.chat.stream(model="m", messages=MSG, max_tokens=3) as stream:
            reply_ = await stream.until_done()
    assert reply_.outcome is Outcome.DONE and stream.stats.observer_errors == 1
    (span,) = telemetry.spans()  # ended, so exported
    assert span.end_time is not None
    assert outcome_total(telemetry) == 1
