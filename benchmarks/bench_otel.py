"""What OpenTelemetry instrumentation (``fluxstream.otel``) costs: client CPU per delta at c=100,
instrumented vs not, and against the least an observer following the GenAI conventions does.

Run from the repository root (needs the ``otel`` and ``test`` extras: the SDK)::

    python benchmarks/bench_otel.py              # 7 paired rounds, paced (25 ms) and packed
    python benchmarks/bench_otel.py --rounds 9 --deltas 400
    python benchmarks/bench_otel.py --instructions   # per request, cachegrind, load-independent

Three contenders: ``plain`` (no observer), ``floor`` (:class:`FloorObserver`: only the calls
the conventions need, nothing else) and ``otel`` (``OpenTelemetryObserver``), each a client of
its own on the same server, in the same run.

``--instructions``: per request, a child process under ``valgrind --tool=cachegrind`` makes N
sequential 5-delta requests (``--deltas``) to ``bench_server.Conn`` served in its own event
loop, with each contender's observer (the SDK configured as below), and the cost of one is
(count at 600 - count at 200) / 400; the imports' objects frozen out of the collector; the
median of ``--pairs`` pairs.

Method: ``benchmarks/bench_server.py`` in its own process (as ``bench_client.py``); one
``fluxstream.AsyncClient`` per contender, warmed up (every connection opened) before timing.
Each round runs 100 concurrent streams on the plain client, then on the instrumented one (the
order alternates between rounds); the client process's CPU (``time.process_time``, every
thread: the SDK's export threads included) around each run is divided by the content deltas
received. The instrumented client has the production configuration of the SDK: a
``TracerProvider`` with a ``BatchSpanProcessor`` and a ``MeterProvider`` with a
``PeriodicExportingMetricReader`` (its default 60 s interval), each to an exporter that drops
what it is given: what an application with tracing on pays, short of its exporters' own I/O
and encoding. (A measurement costs the same whichever reader collects it: the SDK aggregates
on ``record``.) The table shows the medians over rounds and the median of the per-round
ratios; the load average is printed with it (the ratios move with a loaded machine).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

from bench_client import MESSAGES, MODEL, ServerProcess, expected_text
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

import fluxstream
from fluxstream.otel import DURATION_BUCKETS, TOKEN_BUCKETS, OpenTelemetryObserver


class DropSpans(SpanExporter):
    """Counts spans and drops them: the exporter's own I/O is not the client's cost."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class DropMetrics(MetricExporter):
    """Drops each collection (a production exporter would encode and send it)."""

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: object) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        return None


class FloorObserver:
    """The floor: an observer that makes only the calls the GenAI client conventions need,
    and does nothing else — one ``CLIENT`` span started with the request's attributes
    (operation, provider, request model, server address and port, ``max_tokens``), given the
    response's (response model and id, finish reasons, input and output tokens) and ended;
    ``gen_ai.client.operation.duration`` recorded once and ``gen_ai.client.token.usage`` twice
    (input, output), with the conventions' attribute sets (operation, provider, request and
    response model, server address and port; the token type), made once per observer. It reads only what this
    benchmark's requests hold (a Chat Completions body, one choice, the server's usage): no
    other API, no bounds on what a server sends, no trace context in the request's headers,
    no retry events, no chunk timings, no fluxstream attributes, no error path."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        self.tracer = trace.get_tracer("floor", None, tracer_provider)
        meter = metrics.get_meter("floor", None, meter_provider)
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS)
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS)
        self.sets: dict[str, Any] = {}

    def for_stream(self) -> FloorSpan:
        return FloorSpan(self)


class FloorSpan:
    """One stream of :class:`FloorObserver`."""

    __slots__ = ("owner", "port", "span", "started")

    def __init__(self, owner: FloorObserver) -> None:
        self.owner = owner

    def on_open(self, info: fluxstream.StreamInfo) -> None:
        attributes = {
            "gen_ai.operation.name": info.operation, "gen_ai.provider.name": info.provider,
            "gen_ai.request.model": info.model, "server.address": info.server_address,
            "server.port": info.server_port,
            "gen_ai.request.max_tokens": info.body.get("max_tokens"),
        }
        self.port = info.server_port
        self.started = time.monotonic()
        self.span = self.owner.tracer.start_span(
            f"{info.operation} {info.model}", kind=trace.SpanKind.CLIENT, attributes=attributes)

    def on_event(self, event: object) -> None:  # never called: the seam skips a no-op
        pass

    def on_end(self, reply: fluxstream.Reply, stats: object) -> None:
        usage = reply.usage
        assert usage is not None
        span = self.span
        span.set_attributes({
            "gen_ai.response.model": reply.model, "gen_ai.response.id": reply.id,
            "gen_ai.response.finish_reasons": [c.finish_reason for c in reply.choices],
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
        })
        span.end()
        owner = self.owner
        sets = owner.sets
        if not sets:
            common = {
                "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                "gen_ai.request.model": reply.model, "server.address": "127.0.0.1",
                "server.port": self.port, "gen_ai.response.model": reply.model,
            }
            sets.update(common=common, input={**common, "gen_ai.token.type": "input"},
                        output={**common, "gen_ai.token.type": "output"})
        owner.duration.record(time.monotonic() - self.started, sets["common"])
        owner.tokens.record(usage.prompt_tokens, sets["input"])
        owner.tokens.record(usage.completion_tokens, sets["output"])


# The seam skips an observer's ``on_event`` only when it is the protocol's own no-op.
FloorSpan.on_event = fluxstream.StreamObserver.on_event  # type: ignore[method-assign]


def providers() -> tuple[TracerProvider, MeterProvider, DropSpans]:
    """The production configuration of the SDK, exporting to nothing."""
    exporter = DropSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    meter_provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(DropMetrics())]
    )
    return tracer_provider, meter_provider, exporter


def observers(kind: str, tracer_provider: Any, meter_provider: Any) -> list[Any]:
    if kind == "floor":
        return [FloorObserver(tracer_provider, meter_provider)]
    if kind == "otel":
        return [OpenTelemetryObserver(tracer_provider=tracer_provider,
                                      meter_provider=meter_provider)]
    return []


async def run(client: fluxstream.AsyncClient, concurrency: int, deltas: int) -> int:
    """``concurrency`` streams at once; the content deltas received (each text checked)."""
    want = expected_text(deltas)

    async def one() -> int:
        count = 0
        async with client.chat.stream(model=MODEL, messages=MESSAGES, max_tokens=deltas) as s:
            async for event in s:
                if type(event) is fluxstream.TextDelta:
                    count += 1
        assert s.reply.text == want and s.reply.outcome is fluxstream.Outcome.DONE
        return count

    return sum(await asyncio.gather(*(one() for _ in range(concurrency))))


async def measure(client: fluxstream.AsyncClient, concurrency: int, deltas: int) -> float:
    gc.collect()
    start = time.process_time()
    received = await run(client, concurrency, deltas)
    return (time.process_time() - start) / received * 1e6


KINDS = ("plain", "floor", "otel")


async def main(args: argparse.Namespace) -> None:
    tracer_provider, meter_provider, exporter = providers()
    with ServerProcess() as server:
        for regime in args.regimes:
            url = server.url(regime)
            clients = {kind: fluxstream.AsyncClient(
                url, api_key="sk-bench", observers=observers(kind, tracer_provider,
                                                             meter_provider))
                for kind in KINDS}
            for client in clients.values():  # warm: every connection open, code paths run
                await run(client, args.concurrency, 20)
            results: dict[str, list[float]] = {kind: [] for kind in KINDS}
            ratios: dict[str, list[float]] = {"otel/plain": [], "floor/plain": [],
                                              "otel/floor": []}
            for round_ in range(args.rounds):
                order = list(clients.items())
                order = order[round_ % 3:] + order[:round_ % 3]
                if round_ % 2:
                    order.reverse()
                this = {}
                for name, client in order:
                    this[name] = await measure(client, args.concurrency, args.deltas)
                    results[name].append(this[name])
                ratios["otel/plain"].append(this["otel"] / this["plain"])
                ratios["floor/plain"].append(this["floor"] / this["plain"])
                ratios["otel/floor"].append(this["otel"] / this["floor"])
            for client in clients.values():
                await client.aclose()
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            medians = ", ".join(f"{kind} {statistics.median(results[kind]):.2f}"
                                for kind in KINDS)
            print(f"{regime:10s} c={args.concurrency} deltas/stream={args.deltas} "
                  f"rounds={args.rounds}: µs/delta {medians}; load average {load}")
            for name, each in ratios.items():
                print(f"    {name}: median {statistics.median(each):.3f} "
                      f"(rounds: {', '.join(f'{r:.3f}' for r in each)})")
    tracer_provider.shutdown()
    meter_provider.shutdown()
    print(f"spans exported: {exporter.spans}")


async def _requests(kind: str, n: int, deltas: int) -> None:
    """``n`` sequential requests of ``deltas`` deltas to an in-process ``Conn``."""
    from bench_server import Conn

    tracer_provider, meter_provider, exporter = providers()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    want = expected_text(deltas)
    async with fluxstream.AsyncClient(
        f"http://127.0.0.1:{port}/packed/v1", "k",
        observers=observers(kind, tracer_provider, meter_provider),
    ) as client:
        async def one() -> None:
            async with client.chat.stream(model=MODEL, messages=MESSAGES,
                                          max_tokens=deltas) as s:
                async for _ in s:
                    pass
            assert s.reply.text == want and s.reply.outcome == "done", s.reply.outcome

        for _ in range(3):  # the connection opened, lazy imports and first-series caches
            await one()
        for _ in range(n):
            await one()
    server.close()
    await server.wait_closed()
    tracer_provider.shutdown()
    meter_provider.shutdown()
    assert kind == "plain" or exporter.spans == n + 3, exporter.spans


def _count_child(kind: str, n: int, deltas: int) -> None:
    gc.collect()
    gc.freeze()  # the imports' objects out of the collector's passes (see bench_setup.py)
    asyncio.run(_requests(kind, n, deltas))


def _instructions(kind: str, n: int, deltas: int) -> int:
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--count-child", kind, str(n), "--deltas", str(deltas)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    assert found, err[-2000:]
    return int(found.group(1).replace(",", ""))


COUNTS = (200, 600)


def instructions(args: argparse.Namespace) -> None:
    print(f"# fluxstream from {Path(fluxstream.__file__).parent}; {args.deltas}-delta requests; "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    small, large = COUNTS
    per: dict[str, float] = {}
    for kind in args.kinds:
        each = []
        for _ in range(args.pairs):
            low = _instructions(kind, small, args.deltas)
            high = _instructions(kind, large, args.deltas)
            each.append((high - low) / (large - small))
        per[kind] = statistics.median(each)
        print(f"{kind:<6} {per[kind]:>12,.0f} instructions a request "
              f"(pairs: {', '.join(f'{x:,.0f}' for x in each)})", flush=True)
    if {"plain", "floor", "otel"} <= per.keys():
        plain, floor, otel = per["plain"], per["floor"], per["otel"]
        print(f"otel/plain {otel / plain:.3f}  floor/plain {floor / plain:.3f}  "
              f"otel/floor {otel / floor:.3f}  added: otel {otel - plain:,.0f}, "
              f"floor {floor - plain:,.0f}, otel added / floor added "
              f"{(otel - plain) / (floor - plain):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=None,
                        help="deltas a reply (default: 100; 5 with --instructions)")
    parser.add_argument("--regimes", nargs="*", default=["paced-25", "packed"])
    parser.add_argument("--instructions", action="store_true",
                        help="instructions per request (cachegrind) instead of CPU time")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--count-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.deltas is None:
        args.deltas = 5 if args.instructions or args.count_child else 100
    if args.count_child:
        _count_child(args.count_child[0], int(args.count_child[1]), args.deltas)
    elif args.instructions:
        instructions(args)
    else:
        asyncio.run(main(args))
