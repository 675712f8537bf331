"""A renderer that writes by ``(key, offset)`` and survives a dropped connection.

Every text-like delta says where it goes: ``(key, choice, channel, offset)``. Writing
``buffer[offset:offset + len(text)] = text`` is idempotent, so whatever happens underneath
(retries, a ``Last-Event-ID`` reconnect, a continuation, even a replayed event) the screen never
shows a character twice; a ``Reset`` (restart strategy) says "replace, don't append".

Here the embedded server drops the connection in the middle of the reply; the stream resumes by
``Last-Event-ID`` and the renderer ends with exactly the uninterrupted text.

python examples/resumable_renderer.py
"""

from __future__ import annotations

import anyio

import fluxstream
from fluxstream.server import serve
from fluxstream.server.script import expected_reply


class Renderer:
    """Keeps one buffer per (key, choice, channel); applies deltas idempotently."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, int, str], str] = {}

    def apply(self, event: fluxstream.Event) -> None:
        if isinstance(event, fluxstream.Reset):
            # A new generation replaces the old one: forget what this key showed.
            self.buffers = {k: v for k, v in self.buffers.items() if k[0] != event.key}
        elif isinstance(
            event, (fluxstream.TextDelta, fluxstream.ReasoningDelta, fluxstream.RefusalDelta)
        ):
            where = (event.key, event.choice, event.type)
            current = self.buffers.get(where, "")
            if event.offset > len(current):
                raise RuntimeError(f"gap before offset {event.offset} in {where}")
            end = event.offset + len(event.text)
            self.buffers[where] = current[: event.offset] + event.text + current[end:]

    def text(self, key: str, choice: int = 0) -> str:
        return self.buffers.get((key, choice, "text"), "")


async def main() -> None:
    messages = [{"role": "user", "content": "tell me a story that survives a dropped line"}]
    async with serve(port=0) as server:
        async with fluxstream.AsyncClient(base_url=server.base_url) as client:
            renderer = Renderer()
            headers = {
                # The first attempt is cut after 1500 bytes; the resumed request is served.
                "X-Fluxstream-Fault": "drop-after=1500,fail-first=1",
                "X-Fluxstream-Attempt-Key": "story-1",
            }
            async with client.chat.stream(
                model="flux-demo", messages=messages, extra_headers=headers,
                content_key="story-1",
            ) as stream:
                async for event in stream:
                    renderer.apply(event)
            shown = renderer.text("story-1")
            print(shown)
            print(f"\noutcome={stream.reply.outcome.value} resumes={stream.stats.resumes}")
            body = {"model": "flux-demo", "messages": messages, "stream": True,
                    "stream_options": {"include_usage": True}}
            assert shown == expected_reply(body).text == stream.reply.text
            print("the renderer shows exactly the uninterrupted reply")


if __name__ == "__main__":
    anyio.run(main)
