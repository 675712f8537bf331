"""Trace streams with OpenTelemetry and print the spans to the console.

Runs against the embedded server, so it works offline:  python examples/otel_console.py
Needs ``pip install 'fluxstream[examples]'`` (the OpenTelemetry SDK with ``fluxstream[otel]``:
the SDK is the application's choice, fluxstream itself needs only the API). Each reply is one
span named ``chat <model>`` with the GenAI conventions' attributes; the span ends however the
stream ends, here once read to its end and once left by ``break``.
"""

from __future__ import annotations

import sys

import anyio

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
except ModuleNotFoundError as exc:  # one line saying what to install, not a traceback
    sys.exit(f"this example needs the OpenTelemetry SDK ({exc.name} is not installed):"
             " pip install 'fluxstream[examples]'")

import fluxstream
from fluxstream import ModelPrice
from fluxstream.otel import OpenTelemetryObserver
from fluxstream.server import serve


async def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)  # the observer uses the global providers by default

    prices = {"flux-demo": ModelPrice(input="0.15", output="0.60")}  # per million tokens
    async with serve(port=0) as server:
        async with fluxstream.AsyncClient(
            base_url=server.base_url, api_key="sk-local", prices=prices,
            observers=[OpenTelemetryObserver()],
        ) as client:
            messages = [{"role": "user", "content": "Explain streaming in one breath"}]
            reply = await client.chat.complete(model="flux-demo", messages=messages,
                                               max_tokens=20)
            print(f"done: {reply.usage.completion_tokens if reply.usage else 0} tokens, "
                  f"cost {reply.cost}")

            # Left after a few deltas: the span still ends (outcome "cancelled"), and the
            # usage it carries is estimated from what arrived.
            async with client.chat.stream(model="flux-demo", messages=messages) as stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta) and event.offset >= 10:
                        break
            estimate = stream.reply.usage_estimate
            print(f"stopped: about {estimate.output_tokens if estimate else 0} tokens "
                  f"(estimated), cost {stream.reply.cost}")
    provider.shutdown()


if __name__ == "__main__":
    anyio.run(main)
