"""What OpenTelemetry instrumentation (``fluxstream.otel``) costs: client CPU per delta at c=100,
instrumented vs not.

Run from the repository root (needs the ``otel`` and ``test`` extras: the SDK)::

    python benchmarks/bench_otel.py              # 7 paired rounds, paced (25 ms) and packed
    python benchmarks/bench_otel.py --rounds 9 --deltas 400

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
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

from bench_client import MESSAGES, MODEL, ServerProcess, expected_text
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
from fluxstream.otel import OpenTelemetryObserver


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


async def main(args: argparse.Namespace) -> None:
    exporter = DropSpans()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    meter_provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(DropMetrics())]
    )
    observer = OpenTelemetryObserver(tracer_provider=tracer_provider,
                                     meter_provider=meter_provider)
    with ServerProcess() as server:
        for regime in args.regimes:
            url = server.url(regime)
            plain = fluxstream.AsyncClient(url, api_key="sk-bench")
            traced = fluxstream.AsyncClient(url, api_key="sk-bench", observers=[observer])
            for client in (plain, traced):  # warm: every connection open, code paths run
                await run(client, args.concurrency, 20)
            results: dict[str, list[float]] = {"plain": [], "otel": []}
            ratios = []
            for round_ in range(args.rounds):
                order = [("plain", plain), ("otel", traced)]
                if round_ % 2:
                    order.reverse()
                this = {}
                for name, client in order:
                    this[name] = await measure(client, args.concurrency, args.deltas)
                    results[name].append(this[name])
                ratios.append(this["otel"] / this["plain"])
            await plain.aclose()
            await traced.aclose()
            load = " ".join(f"{x:.1f}" for x in os.getloadavg())
            p, o = statistics.median(results["plain"]), statistics.median(results["otel"])
            print(f"{regime:10s} c={args.concurrency} deltas/stream={args.deltas} "
                  f"rounds={args.rounds}: plain {p:.2f} µs/delta, otel {o:.2f} µs/delta, "
                  f"median ratio {statistics.median(ratios):.3f} "
                  f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)}); "
                  f"load average {load}")
    tracer_provider.shutdown()
    meter_provider.shutdown()
    print(f"spans exported: {exporter.spans}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=100)
    parser.add_argument("--regimes", nargs="*", default=["paced-25", "packed"])
    asyncio.run(main(parser.parse_args()))
