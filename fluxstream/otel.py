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

Message content (``gen_ai.input.messages``, ``gen_ai.output.messages``) is recorded only with
``capture_content=True`` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from .events import Outcome, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta
from .observe import SendInfo, StreamInfo, StreamObserver

if TYPE_CHECKING:  # pragma: no cover
    from .client import AsyncClient
    from .events import Event
    from .reply import Reply
    from .stream import StreamStats

__all__ = ["OpenTelemetryObserver", "instrument"]

#: The instrumentation scope's name (tracer and meter).
SCOPE = "fluxstream"

#: The conventions' operation for a streamed reply, unless its API names another
#: (:attr:`fluxstream.apis.Api.operation`: Gemini's is ``generate_content``).
OPERATION = "chat"

#: Request parameters the conventions name, from each API's body field.
REQUEST_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("seed", "gen_ai.request.seed"),
)

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

    def __init__(self, meter: metrics.Meter) -> None:
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
        #: Streams ended per attribute set (outcome included), reported when the metrics are
        #: collected: an observable counter costs a stream a dict update, where a
        #: synchronous one costs a measurement (several µs in the SDK).
        self.ended: dict[tuple[tuple[str, Any], ...], int] = {}
        meter.create_observable_counter(
            "fluxstream.client.stream.outcomes", callbacks=[self._observe_outcomes],
            unit="{stream}", description="Streams ended, by fluxstream.outcome.",
        )

    def count_outcome(self, attributes: dict[str, Any]) -> None:
        key = tuple(attributes.items())
        self.ended[key] = self.ended.get(key, 0) + 1

    def _observe_outcomes(self, options: metrics.CallbackOptions) -> Iterator[metrics.Observation]:
        # A copy first: streams may end (in the event loop's thread) while a reader collects.
        for key, count in list(self.ended.items()):
            yield metrics.Observation(count, dict(key))


class OpenTelemetryObserver(StreamObserver):
    """A stream observer (:mod:`fluxstream.observe`) that traces and measures each stream.

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
        (``StreamStats.time_per_chunk``), and the cost stays per stream.
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
        meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self.instruments = _Instruments(meter)
        if capture_content is None:
            capture_content = os.environ.get(_CAPTURE_ENV, "").strip().lower() == "true"
        self.capture_content = capture_content
        self.provider_name = provider_name
        self.every_chunk = every_chunk

    def for_stream(self) -> StreamObserver:
        """Each stream gets its own span (one observer serves every stream of a client)."""
        return StreamSpan(self)


def instrument(client: AsyncClient, **options: Any) -> OpenTelemetryObserver:
    """Trace and measure every later stream of ``client``; the observer made (``options``
    as for :class:`OpenTelemetryObserver`). Streams already made are not instrumented."""
    observer = OpenTelemetryObserver(**options)
    client.observers = (*client.observers, observer)
    return observer


class StreamSpan(StreamObserver):
    """One stream's span and measurements (made by :meth:`OpenTelemetryObserver.for_stream`)."""

    __slots__ = ("_attributes", "_gaps", "_last", "_owner", "_span", "_started", "on_event")

    def __init__(self, owner: OpenTelemetryObserver) -> None:
        self._owner = owner
        self._span: trace.Span | None = None
        #: The attributes every metric of this stream carries.
        self._attributes: dict[str, Any] = {}
        self._started = 0.0
        #: When the last content chunk came, and the gaps between chunks (recorded at the end).
        self._last: float | None = None
        self._gaps: list[float] = []
        # Per chunk only when asked: otherwise an event costs this observer nothing.
        self.on_event = self._time_chunk if owner.every_chunk else _ignore  # type: ignore[method-assign]

    def on_open(self, info: StreamInfo) -> None:
        owner = self._owner
        body = info.body
        common: dict[str, Any] = {
            "gen_ai.operation.name": info.operation,
            # The API's own (its registry entry), else its name: the conventions' attribute
            # is required, and an API of no listed provider still says which it is.
            "gen_ai.provider.name": owner.provider_name or info.provider or info.api or "_OTHER",
        }
        if info.model is not None:
            common["gen_ai.request.model"] = info.model
        if info.server_address is not None:
            common["server.address"] = info.server_address
        if info.server_port is not None:
            common["server.port"] = info.server_port
        self._attributes = dict(common)
        attributes = {**common, **request_attributes(body)}
        attributes["fluxstream.content_key"] = info.content_key
        attributes["fluxstream.resuming"] = info.resuming
        if owner.capture_content:
            messages = input_messages(body)
            if messages:
                attributes["gen_ai.input.messages"] = _json(messages)
        name = info.operation if info.model is None else f"{info.operation} {info.model}"
        self._started = time.monotonic()
        self._span = owner.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)

    def on_send(
        self, headers: dict[str, str], info: SendInfo
    ) -> AbstractContextManager[object] | None:
        span = self._span
        if span is None:
            return None
        if info.kind != "first":
            event: dict[str, Any] = {"fluxstream.attempt": info.attempt}
            if info.strategy is not None:
                event["fluxstream.resume.strategy"] = info.strategy
            span.add_event(f"fluxstream.{info.kind}", event)
        return _current(span, headers)

    def _time_chunk(self, event: Event) -> None:
        if type(event) in _CONTENT:
            now = time.monotonic()
            last = self._last
            if last is not None:
                self._gaps.append(now - last)
            self._last = now

    def on_end(self, reply: Reply, stats: StreamStats) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        outcome = reply.outcome.value if reply.outcome is not None else "cancelled"
        error = error_type(reply, stats)
        attributes = response_attributes(reply, stats)
        attributes["fluxstream.outcome"] = outcome
        if error is not None:
            attributes["error.type"] = error
        if self._owner.capture_content:
            attributes["gen_ai.output.messages"] = _json(output_messages(reply))
        span.set_attributes(attributes)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, reply.end_reason or outcome))
        span.end()
        self._measure(reply, stats, outcome, error)

    def _measure(self, reply: Reply, stats: StreamStats, outcome: str, error: str | None) -> None:
        instruments = self._owner.instruments
        common = dict(self._attributes)
        if reply.model:
            common["gen_ai.response.model"] = reply.model
        timed = dict(common)
        if error is not None:
            timed["error.type"] = error
        duration = stats.duration
        instruments.duration.record(
            duration if duration is not None else time.monotonic() - self._started, timed
        )
        if stats.time_to_first_token is not None:
            instruments.first_chunk.record(stats.time_to_first_token, timed)
        if self._owner.every_chunk:
            for gap in self._gaps:
                instruments.per_chunk.record(gap, timed)
        elif stats.time_per_chunk is not None:
            instruments.per_chunk.record(stats.time_per_chunk, timed)
        inputs, outputs, estimated = tokens_of(reply)
        tokens = {**common, "fluxstream.usage.estimated": estimated}
        if inputs is not None:
            instruments.tokens.record(inputs, {**tokens, "gen_ai.token.type": "input"})
        if outputs is not None:
            instruments.tokens.record(outputs, {**tokens, "gen_ai.token.type": "output"})
        instruments.count_outcome({**common, "fluxstream.outcome": outcome})


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _ignore(event: Event) -> None:
    return None


@contextmanager
def _current(span: trace.Span, headers: dict[str, str]) -> Iterator[None]:
    """``span`` is the current span while a request is sent, and the configured propagator
    writes its context (``traceparent``) into the request's headers."""
    ctx = trace.set_span_in_context(span)
    propagate.inject(headers, context=ctx)
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def request_attributes(body: Mapping[str, Any]) -> dict[str, Any]:
    """The conventions' request parameters found in a request body (no content)."""
    out: dict[str, Any] = {"gen_ai.request.stream": True}
    for field, name in REQUEST_PARAMETERS:
        value = body.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.setdefault(name, value)
    stop = body.get("stop", body.get("stop_sequences"))
    if isinstance(stop, str):
        out["gen_ai.request.stop_sequences"] = [stop]
    elif isinstance(stop, Sequence) and all(isinstance(s, str) for s in stop):
        out["gen_ai.request.stop_sequences"] = list(stop)
    count = body.get("n")
    if isinstance(count, int) and not isinstance(count, bool) and count != 1:
        out["gen_ai.request.choice.count"] = count
    if body.get("response_format") is not None or body.get("text") is not None:
        out["gen_ai.output.type"] = "json"
    return out


def response_attributes(reply: Reply, stats: StreamStats) -> dict[str, Any]:
    """The conventions' response attributes and fluxstream's own, at the end."""
    out: dict[str, Any] = {}
    if reply.model:
        out["gen_ai.response.model"] = reply.model
    if reply.id:
        out["gen_ai.response.id"] = reply.id
    reasons = [c.finish_reason for c in reply.choices if c.finish_reason is not None]
    if reasons:
        out["gen_ai.response.finish_reasons"] = reasons
    inputs, outputs, estimated = tokens_of(reply)
    if inputs is not None:
        out["gen_ai.usage.input_tokens"] = inputs
    if outputs is not None:
        out["gen_ai.usage.output_tokens"] = outputs
    usage = reply.usage
    details = usage.prompt_tokens_details if usage is not None else None
    if details is not None and details.cached_tokens is not None:
        out["gen_ai.usage.cache_read.input_tokens"] = details.cached_tokens
    out["fluxstream.usage.estimated"] = estimated
    if reply.cost is not None:
        out["fluxstream.cost"] = float(reply.cost)
    if stats.time_to_first_token is not None:
        out["fluxstream.time_to_first_token"] = stats.time_to_first_token
        out["gen_ai.response.time_to_first_chunk"] = stats.time_to_first_token
    out["fluxstream.attempts"] = stats.attempts
    out["fluxstream.resumes"] = stats.resumes
    out["fluxstream.skipped_frames"] = stats.skipped_frames
    out["fluxstream.content_events"] = stats.content_events
    if reply.end_reason:
        out["fluxstream.end_reason"] = reply.end_reason
    return out


def tokens_of(reply: Reply) -> tuple[int | None, int | None, bool]:
    """Input and output tokens, and whether they are fluxstream's estimate."""
    usage = reply.usage
    if usage is not None:
        return usage.prompt_tokens, usage.completion_tokens, False
    estimate = reply.usage_estimate
    if estimate is not None:
        return estimate.input_tokens, estimate.output_tokens, True
    return None, None, False


def error_type(reply: Reply, stats: StreamStats) -> str | None:
    """``error.type`` for a stream that failed or was cut short (``None``: it ended well, or
    its caller cancelled it): the typed error's class, else the in-stream error's own type."""
    if reply.outcome is Outcome.FAILED:
        if stats.error_type is not None:
            return stats.error_type
        error = reply.error
        if error is not None and (error.type or error.code):
            return error.type or error.code
        return "_OTHER"
    if reply.outcome is Outcome.TRUNCATED:
        return stats.error_type or "truncated"
    return None


def input_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's messages in the conventions' shape (opt-in content)."""
    raw = body.get("messages")
    if raw is None:
        given = body.get("input")
        raw = [{"role": "user", "content": given}] if isinstance(given, str) else given
    out: list[dict[str, Any]] = []
    for message in raw if isinstance(raw, list) else []:
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts: list[Any] = [{"type": "text", "content": content}]
        else:
            parts = list(content) if isinstance(content, list) else []
        out.append({"role": str(message.get("role", "user")), "parts": parts})
    system = body.get("system")
    if isinstance(system, str):
        out.insert(0, {"role": "system", "parts": [{"type": "text", "content": system}]})
    return out


def output_messages(reply: Reply) -> list[dict[str, Any]]:
    """The reply's choices in the conventions' output message shape (opt-in content)."""
    out: list[dict[str, Any]] = []
    for choice in reply.choices:
        parts: list[dict[str, Any]] = []
        if choice.reasoning:
            parts.append({"type": "reasoning", "content": choice.reasoning})
        if choice.text:
            parts.append({"type": "text", "content": choice.text})
        for call in choice.tool_calls:
            parts.append({
                "type": "tool_call", "id": call.id, "name": call.name,
                "arguments": call.arguments,
            })
        out.append({
            "role": "assistant", "parts": parts, "finish_reason": choice.finish_reason or "",
        })
    return out
