"""Stream a reply token by token, then look at how it ended.

Runs against the embedded server, so it works offline:  python examples/stream_reply.py
Point ``base_url`` at any OpenAI-style endpoint to use a real provider.
"""

from __future__ import annotations

import anyio

import fluxstream
from fluxstream.server import serve


async def main() -> None:
    async with serve(port=0) as server:
        async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-local") as client:
            messages = [{"role": "user", "content": "Explain streaming in one breath"}]
            async with client.chat.stream(model="flux-demo", messages=messages) as stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        print(event.text, end="", flush=True)
                    elif isinstance(event, fluxstream.End):
                        print(f"\n\n[{event.outcome.value}: {event.reason}]")
            reply = stream.reply
            print("finish reason:", reply.choices[0].finish_reason)
            print("usage:", reply.usage.total_tokens if reply.usage else None, "tokens")
            print("time to first token: %.1f ms" % (1000 * (stream.stats.time_to_first_token or 0)))

            # The whole reply at once; raises StreamTruncatedError/StreamFailedError if it did
            # not end well (the partial reply rides on the exception).
            reply = await client.chat.complete(model="flux-demo", messages=messages)
            print("complete():", reply.outcome.value, len(reply.text), "characters")


if __name__ == "__main__":
    anyio.run(main)
