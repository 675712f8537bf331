"""Cancel a stream from another task; the connection closes at once and nothing is lost.

python examples/cancel_mid_stream.py
"""

from __future__ import annotations

import anyio

import fluxstream
from fluxstream.server import serve


async def main() -> None:
    async with serve(port=0) as server:
        async with fluxstream.AsyncClient(base_url=server.base_url) as client:
            slow = {"X-Fluxstream-Fault": "drip=0.05"}  # one delta every 50 ms
            messages = [{"role": "user", "content": "a long answer please"}]
            async with client.chat.stream(
                model="flux-demo", messages=messages, extra_headers=slow
            ) as stream:

                async def stop_soon() -> None:
                    await anyio.sleep(0.3)
                    stream.cancel()  # synchronous, callable from anywhere, idempotent

                async with anyio.create_task_group() as tg:
                    tg.start_soon(stop_soon)
                    async for piece in stream.text():
                        print(piece, end="", flush=True)
            print(f"\n\noutcome: {stream.reply.outcome.value}; kept {len(stream.reply.text)} chars")
            record = await server.wait_disconnect(timeout=1.0)
            print(f"server saw the disconnect after {record.bytes_written} body bytes")


if __name__ == "__main__":
    anyio.run(main)
