"""OpenTelemetry spans and metrics for every stream, per the GenAI semantic conventions.

Install the extra (``pip install 'fluxstream[otel]'``: ``opentelemetry-api`` only; the SDK,
exporters and propagators are the application's choice) and hand the observer to a client::

    from fluxstream.otel import OpenTelemetryObserver

    client = fluxstream.AsyncClient(observers=[OpenTelemetryObserver()])
    # or, for a client made elsewhere:
    fluxstream.otel.instrument(client)

Nothing imports OpenTelemetry unless this module is imported. Each reply is one ``CLIENT``
span named ``{gen_ai.operation.name} {gen_ai.request.model}`` (``chat gpt-4o``) that ends on
every way out of the stream (done, truncated, failed, cancelled, left by ``break``, collected,
a client closed under it: the stream observer seam's ``on_end``). The span is current while
each HTTP request is sent, so an instrumented HTTP library's span is its child, and the
configured propagator writes ``traceparent`` into the request's headers (both transports).
Retries and resumes are span events (``fluxstream.retry``, ``fluxstream.resume``).

Attributes follow the conventions' names (the ``opentelemetry-semantic-conventions``
package's ``gen_ai_attributes``, ``server_attributes``, ``error_attributes``): operation,
provider (per API, from the API registry: ``openai`` for Chat Completions and Responses,
``anthropic`` for Messages, ``gcp.gemini`` for Gemini), request model and parameters,
response model, id and finish reasons, usage, ``server.address``/``port``, ``error.type``
when the stream failed or was cut; fluxstream's own under ``fluxstream.*``. Usage is the
server's when it sent one; otherwise the reply's estimate (``fluxstream.usage.estimated``
says which, on the span and on the token metric).

What a server sends is bounded before it becomes an attribute: its values are cut to
``MAX_VALUE_LENGTH`` (``MAX_REASON_LENGTH`` for the end reason), the kinds of stream end per
server and model on the metrics to ``MAX_RESPONSE_VALUES`` (then ``_OTHER``), and the outcome
counter's attribute sets, shared by every observer of a meter provider, to
``MAX_OUTCOME_SETS`` (then OpenTelemetry's overflow set, ``otel.metric.overflow=true``).

Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``) is recorded only with
``capture_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager
from contextvars import Token
from typing import TYPE_CHECKING, Any

from ._core.extras import needs_extra
from ._core.genai_attributes import (
    error_type,
    input_messages,
    output_messages,
    read_request,
    response_attributes,
    tokens_of,
)
from ._events import Outcome, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta
from ._observe import SendInfo, StreamInfo, StreamObserver

with needs_extra("otel", "fluxstream.otel", "opentelemetry"):
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:  # pragma: no cover
    from ._client import AsyncClient
    from ._events import Event
    from ._reply import Reply
    from ._stream import StreamStats

__all__ = ["OpenTelemetryObserver", "instrument"]

#: The instrumentation scope's name (tracer and meter).
SCOPE = "fluxstream"

#: The conventions' operation for a streamed reply, unless its API names another
#: (:attr:`fluxstream.apis.Api.operation`: Gemini's is ``generate_content``).
OPERATION = "chat"

#: The conventions' bucket advice (semantic-conventions, model/gen-ai metrics): seconds for
#: the duration and chunk timings, tokens for the usage histogram.
DURATION_BUCKETS = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
]
TOKEN_BUCKETS = [
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
    67108864,
]

_CONTENT = frozenset({TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta})
_CAPTURE_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


class _Instruments:
    """The metric instruments, made once per observer."""

    def __init__(self, meter: metrics.Meter, meter_provider: metrics.MeterProvider | None) -> None:
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.first_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_to_first_chunk", unit="s",
            description="Time to receive the first chunk, from when the client issues the "
            "generation request.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.per_chunk = meter.create_histogram(
            "gen_ai.client.operation.time_per_output_chunk", unit="s",
            description="Time per output chunk, for each chunk after the first one.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.outcomes = _outcome_counter(meter, meter_provider)


#: OpenTelemetry's attribute set for what a metric counts past its cardinality limit.
OVERFLOW: tuple[tuple[str, Any], ...] = (("otel.metric.overflow", True),)
#: How many attribute sets the outcome counter keeps, all observers of one meter provider
#: together (the limit OpenTelemetry's SDKs default to); later new sets count as ``OVERFLOW``.
MAX_OUTCOME_SETS = 2000


class OutcomeCounter:
    """The ``fluxstream.client.stream.outcomes`` counter of one meter provider: streams ended
    per attribute set (outcome included), reported when the metrics are collected. An
    observable counter costs a stream a dict update, where a synchronous one costs a
    measurement (several µs in the SDK).

    Why one per meter provider, shared by its observers: the SDK registers an instrument once
    per meter and name; a second ``create_observable_counter`` returns the first instrument
    and drops the new callback, so counts kept per observer would report the first
    observer's streams only."""

    def __init__(self, meter: metrics.Meter) -> None:
        self._counts: dict[tuple[tuple[str, Any], ...], int] = {}
        # Observers of one provider may run in several threads (one event loop each), and a
        # reader collects from its own.
        self._lock = threading.Lock()
        meter.create_observable_counter(
            "fluxstream.client.stream.outcomes", callbacks=[self._observe],
            unit="{stream}", description="Streams ended, by fluxstream.outcome.",
        )

    def add(self, key: tuple[tuple[str, Any], ...]) -> None:
        """One more stream ended with the attributes ``key``: counted under ``OVERFLOW`` when
        it is a new set and ``MAX_OUTCOME_SETS`` are kept already."""
        with self._lock:
            counts = self._counts
            count = counts.get(key)
            if count is None and len(counts) >= MAX_OUTCOME_SETS:
                key = OVERFLOW
                count = counts.get(key)
            counts[key] = 1 if count is None else count + 1

    def _observe(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        with self._lock:
            counts = list(self._counts.items())
        for key, count in counts:
            yield metrics.Observation(count, dict(key))


_counters: weakref.WeakKeyDictionary[Any, OutcomeCounter] = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()
#: The global meter provider's counter. The global provider is a proxy until the application
#: sets its own (once per process); a counter made through the proxy becomes that provider's
#: then, so observers made later, given no provider or that one, count in it too.
_global_counter: OutcomeCounter | None = None


def _outcome_counter(
    meter: metrics.Meter, provider: metrics.MeterProvider | None
) -> OutcomeCounter:
    """The outcome counter of ``provider`` (``None``: the global one), made with the first
    observer's meter."""
    global _global_counter
    current = metrics.get_meter_provider()
    key = provider if provider is not None else current
    with _counters_lock:
        try:
            counter = _counters.get(key)
        except TypeError:  # a provider that cannot be weakly referenced: its own counter
            return OutcomeCounter(meter)
        if counter is None:
            counter = _global_counter if key is current else None
            if counter is None:
                counter = OutcomeCounter(meter)
            _counters[key] = counter
        if key is current:
            _global_counter = counter
    return counter


class OpenTelemetryObserver(StreamObserver):
    """A stream observer (:mod:`fluxstream._observe`) that traces and measures each stream.

    :param tracer_provider: default: the global one (``opentelemetry.trace``).
    :param meter_provider: default: the global one (``opentelemetry.metrics``).
    :param capture_content: record the request's messages and the reply's output as the
        conventions' opt-in ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (default:
        ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, else off).
    :param provider_name: ``gen_ai.provider.name`` for every stream, in place of the API's
        (``"openai"``/``"anthropic"``), e.g. for a self-hosted server.
    :param every_chunk: record ``gen_ai.client.operation.time_per_output_chunk`` once per
        chunk after the first, as the conventions describe it. Off by default: one
        histogram measurement costs the SDK several µs, more than fluxstream spends on a
        delta, so by default each stream records once, the mean time per chunk
        (``StreamStats.time_per_chunk``), and the cost stays per stream (the observer is
        then not called per event at all).
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool | None = None,
        provider_name: str | None = None,
        every_chunk: bool = False,
    ) -> None:
        from . import __version__

        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
        self._tracer_provider = tracer_provider
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self.instruments = _Instruments(meter, meter_provider)
        if capture_content is None:
            capture_content = os.environ.get(_CAPTURE_ENV, "").strip().lower() == "true"
        self.capture_content = capture_content
        self.provider_name = provider_name
        self.every_chunk = every_chunk
        self._span_class = ChunkTimedSpan if every_chunk else StreamSpan
        #: Whether spans are known to record: a tracer provider, once it is an SDK's, stays
        #: the same (one given never changes, and the global one is set once a process).
        self._traces = False
        #: The attributes streams share, made once per server and model rather than per
        #: stream (a metric's attribute set is per series anyway).
        self._series: dict[tuple[Any, ...], Series] = {}

    def traces(self) -> bool:
        """Whether this observer's spans can record: not when its tracer provider is
        OpenTelemetry's no-op one, or, given none, while the global one is still the proxy
        an application replaces when it configures tracing. A span that cannot record
        keeps nothing, so its attributes are not worked out (its trace context still goes
        on to the request)."""
        if self._traces:
            return True
        provider = self._tracer_provider
        if provider is None or isinstance(provider, trace.ProxyTracerProvider):
            provider = trace.get_tracer_provider()  # the application's, once it set one
        self._traces = traces = not isinstance(provider, _UNTRACED)
        return traces

    def for_stream(self) -> StreamObserver:
        """Each stream gets its own span (one observer serves every stream of a client)."""
        return self._span_class(self)

    def series(self, info: StreamInfo) -> Series:
        """The attributes every stream to ``info``'s server and model shares."""
        provider = self.provider_name or info.provider or info.api or "_OTHER"
        key = (info.operation, provider, info.model, info.server_address, info.server_port)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= _MAX_SERIES:  # many models: start again, never grow
                self._series.clear()
            series = self._series[key] = Series(key)
        return series


#: The tracer providers whose spans never record: OpenTelemetry's no-op one, and the global
#: proxy until an application sets its own.
_UNTRACED = (trace.NoOpTracerProvider, trace.ProxyTracerProvider)

#: How many attribute sets an observer keeps ready (servers x models; the metric SDK itself
#: keeps 2,000 series per instrument by default).
_MAX_SERIES = 256

#: The longest value taken from a server's reply into an attribute (response model and id,
#: finish reasons, error type): a server may put anything there (a request id, an error
#: page), and on a metric each distinct value is a series of its own. Longer ones are cut.
MAX_VALUE_LENGTH = 256
#: The longest end reason (``fluxstream.end_reason``, the span's status description), which
#: may quote a server's error message.
MAX_REASON_LENGTH = 1024
#: How many kinds of stream end (response model, error type, estimated usage) one server and
#: model keeps distinct on the metrics; past that, a new kind's response model and error
#: type are both ``OTHER``, so a server that sends a new model name with every reply grows
#: no metric.
MAX_RESPONSE_VALUES = 64
#: The conventions' value for "another value" (as their ``error.type`` uses it).
OTHER = "_OTHER"


def _cut(value: str | None, limit: int) -> str | None:
    return value[:limit] if value is not None and len(value) > limit else value


class Series:
    """The attributes of the streams to one server and model: those of the span's start,
    and each metric's attribute set by response model and error, made once and never
    changed (the metric SDK copies what it is given)."""

    __slots__ = ("_records", "common", "opening", "span_name")

    def __init__(self, key: tuple[Any, ...]) -> None:
        operation, provider, model, address, port = key
        #: The conventions' span name: ``{gen_ai.operation.name} {gen_ai.request.model}``.
        self.span_name = operation if model is None else f"{operation} {model}"
        # The API's own provider (its registry entry), else its name: the conventions'
        # attribute is required, and an API of no listed provider still says which it is.
        common: dict[str, Any] = {
            "gen_ai.operation.name": operation, "gen_ai.provider.name": provider,
        }
        if model is not None:
            common["gen_ai.request.model"] = model
        if address is not None:
            common["server.address"] = address
        if port is not None:
            common["server.port"] = port
        self.common = common
        #: A span's first attributes: ``common`` and what every stream's request is.
        self.opening: dict[str, Any] = {**common, "gen_ai.request.stream": True}
        self._records: dict[tuple[str | None, str | None, bool], Records] = {}

    def records(self, model: str | None, error: str | None, estimated: bool) -> Records:
        """The attributes for a stream end (``model`` and ``error`` cut to
        ``MAX_VALUE_LENGTH``): past ``MAX_RESPONSE_VALUES`` kinds, a new kind is ``OTHER``."""
        key = (model, error, estimated)
        records = self._records.get(key)
        if records is None:
            if len(self._records) >= MAX_RESPONSE_VALUES:
                model = OTHER if model else model
                error = None if error is None else OTHER
                key = (model, error, estimated)
                records = self._records.get(key)
            if records is None:
                records = self._records[key] = Records(self.common, model, error, estimated)
        return records


class Records:
    """Each metric's attributes for one kind of stream end (see :class:`Series`)."""

    __slots__ = ("input_tokens", "outcome", "outcomes", "output_tokens", "timed")

    def __init__(
        self, common: dict[str, Any], model: str | None, error: str | None, estimated: bool
    ) -> None:
        base = dict(common)
        if model:
            base["gen_ai.response.model"] = model
        #: Duration and chunk timings: ``error.type`` too, as the conventions ask.
        self.timed = dict(base) if error is None else {**base, "error.type": error}
        tokens = {**base, "fluxstream.usage.estimated": estimated}
        self.input_tokens = {**tokens, "gen_ai.token.type": "input"}
        self.output_tokens = {**tokens, "gen_ai.token.type": "output"}
        #: The outcome counter's key, less the outcome.
        self.outcome = tuple(base.items())
        #: The outcome counter's keys made so far, by outcome (see :meth:`outcome_key`).
        self.outcomes: dict[str, tuple[tuple[str, Any], ...]] = {}

    def outcome_key(self, outcome: str) -> tuple[tuple[str, Any], ...]:
        """The outcome counter's key for a stream that ended ``outcome``."""
        key = self.outcomes.get(outcome)
        if key is None:
            key = self.outcomes[outcome] = (*self.outcome, ("fluxstream.outcome", outcome))
        return key


def instrument(client: AsyncClient, **options: Any) -> OpenTelemetryObserver:
    """Trace and measure every later stream of ``client``; the observer made (``options``
    as for :class:`OpenTelemetryObserver`). Streams already made are not instrumented."""
    observer = OpenTelemetryObserver(**options)
    client.observers = (*client.observers, observer)
    return observer


class SendContext:
    """The stream's span is the current one while a request is sent (so that an instrumented
    HTTP library's span is its child). A plain class: entered once per request, it is
    cheaper than a generator-based context manager."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: otel_context.Context) -> None:
        self._context = context
        self._token: Token[otel_context.Context] | None = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(self, *exc: object) -> None:
        token = self._token
        if token is not None:
            self._token = None
            otel_context.detach(token)


class StreamSpan(StreamObserver):
    """One stream's span and measurements (made by :meth:`OpenTelemetryObserver.for_stream`).

    It has no ``on_event`` of its own: what the metrics need of the events (time to first
    chunk, mean time per chunk) is in the stream's :class:`~fluxstream._stream.StreamStats` at
    the end, so a stream tells it nothing per event."""

    __slots__ = ("_context", "_owner", "_series", "_span", "_started", "_traceparent")

    # ``_series`` and ``_started`` are set by ``on_open`` (the seam calls ``on_end`` only
    # after it), ``_traceparent`` with ``_context`` at the first request.
    _series: Series
    _started: float
    _traceparent: dict[str, str]
    #: Each chunk's gap after the first (:class:`ChunkTimedSpan`); ``None``: the stream's
    #: mean time per chunk is recorded instead.
    _gaps: list[float] | None = None

    def __init__(self, owner: OpenTelemetryObserver) -> None:
        self._owner = owner
        self._span: trace.Span | None = None
        #: The span's context (and the headers that carry it), made at the first request.
        self._context: otel_context.Context | None = None

    def on_open(self, info: StreamInfo) -> None:
        owner = self._owner
        series = self._series = owner.series(info)
        self._started = time.monotonic()
        if not owner.traces():
            self._span = owner.tracer.start_span(series.span_name, kind=SpanKind.CLIENT)
            return
        # Every attribute known now is given at the start, in one dict: samplers see them,
        # and the SDK takes them in one go.
        attributes = series.opening.copy()
        body = info.body
        read_request(body, info.api, attributes)
        attributes["fluxstream.content_key"] = info.content_key
        attributes["fluxstream.resuming"] = info.resuming
        if owner.capture_content:
            messages = input_messages(body)
            if messages:
                attributes["gen_ai.input.messages"] = _json(messages)
        self._span = owner.tracer.start_span(
            series.span_name, kind=SpanKind.CLIENT, attributes=attributes)

    def on_send(
        self, headers: dict[str, str], info: SendInfo
    ) -> AbstractContextManager[object] | None:
        span = self._span
        if span is None:
            return None
        context = self._context
        if context is None:
            context = self._context = trace.set_span_in_context(span)
            # The configured propagator's headers for this span: the same for each request.
            self._traceparent = {}
            propagate.inject(self._traceparent, context=context)
        if info.kind != "first" and span.is_recording():
            event: dict[str, Any] = {"fluxstream.attempt": info.attempt}
            if info.strategy is not None:
                event["fluxstream.resume.strategy"] = info.strategy
            span.add_event(f"fluxstream.{info.kind}", event)
        headers.update(self._traceparent)
        return SendContext(context)

    def on_end(self, reply: Reply, stats: StreamStats) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        outcome = _OUTCOMES.get(reply.outcome, "cancelled")  # None: the caller cancelled it
        error = _cut(error_type(reply, stats), MAX_VALUE_LENGTH) if outcome in _ERRED else None
        tokens = tokens_of(reply)
        # The span ends and the stream is measured even when describing it fails: that is
        # exactly the stream someone will look for.
        try:
            if span.is_recording():  # a span sampled out is only ended: nothing reads it
                attributes = response_attributes(
                    reply, stats, tokens, outcome, MAX_VALUE_LENGTH, MAX_REASON_LENGTH)
                if error is not None:
                    attributes["error.type"] = error
                if self._owner.capture_content:
                    attributes["gen_ai.output.messages"] = _json(output_messages(reply))
                span.set_attributes(attributes)
                if error is not None:
                    span.set_status(Status(StatusCode.ERROR,
                                           _cut(reply.end_reason, MAX_REASON_LENGTH) or outcome))
        finally:
            span.end()
            self._measure(reply, stats, outcome, error, tokens)

    def _measure(
        self, reply: Reply, stats: StreamStats, outcome: str, error: str | None,
        tokens: tuple[int | None, int | None, bool],
    ) -> None:
        instruments = self._owner.instruments
        inputs, outputs, estimated = tokens
        model = reply.model
        records = self._series.records(
            model[:MAX_VALUE_LENGTH] if model else model, error, estimated)
        timed = records.timed
        duration = stats.duration
        instruments.duration.record(
            duration if duration is not None else time.monotonic() - self._started, timed
        )
        first = stats.time_to_first_token
        if first is not None:
            instruments.first_chunk.record(first, timed)
        gaps = self._gaps
        if gaps is None:  # one measurement: the stream's mean time per chunk
            per_chunk = stats.time_per_chunk
            if per_chunk is not None:
                instruments.per_chunk.record(per_chunk, timed)
        else:
            for gap in gaps:
                instruments.per_chunk.record(gap, timed)
        if inputs is not None:
            instruments.tokens.record(inputs, records.input_tokens)
        if outputs is not None:
            instruments.tokens.record(outputs, records.output_tokens)
        instruments.outcomes.add(records.outcomes.get(outcome) or records.outcome_key(outcome))


class ChunkTimedSpan(StreamSpan):
    """A stream's span that times each content chunk (``every_chunk=True``): the gaps are
    kept as they come and recorded at the end, one measurement each."""

    __slots__ = ("_gaps", "_last")

    def __init__(self, owner: OpenTelemetryObserver) -> None:
        super().__init__(owner)
        self._last: float | None = None
        self._gaps: list[float] = []

    def on_event(self, event: Event) -> None:
        if type(event) in _CONTENT:
            now = time.monotonic()
            last = self._last
            if last is not None:
                self._gaps.append(now - last)
            self._last = now


#: Each outcome's attribute value (``.value`` is a descriptor call on every read).
_OUTCOMES: dict[Outcome | None, str] = {outcome: outcome.value for outcome in Outcome}
#: The outcomes with an ``error.type`` (see :func:`~fluxstream._core.genai_attributes.error_type`).
_ERRED = frozenset({Outcome.FAILED.value, Outcome.TRUNCATED.value})


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)
