"""Fail over in the middle of a reply, across APIs.

The primary speaks Anthropic Messages and drops the connection in mid-answer; its fallback, an
``Upstream`` speaking Chat Completions, is sent the text delivered so far as the assistant's
partial answer and goes on from there. The caller sees one stream and one reply: a ``Handoff``
event says where the reply went on and from which offset, the text events go on at that
offset (a renderer writing ``buf[offset:]`` never shows a character twice), and
``reply.segments`` says which upstream delivered which characters and how its part ended,
with the usage each reported, or its estimate when it was cut before its final count.

Two embedded servers on 127.0.0.1, so it runs offline:  python examples/failover.py
"""

from __future__ import annotations

import anyio

import fluxstream
from fluxstream import Upstream
from fluxstream.server import serve


async def main() -> None:
    messages = [{"role": "user", "content": "Explain streaming in one breath"}]
    # The primary drops every connection after 12 events: in the middle of the answer.
    async with serve(port=0, faults="drop-after-events=12") as primary, \
            serve(port=0) as backup:
        async with fluxstream.AsyncClient(
            base_url=primary.base_url,
            api_key="sk-ant-local",
            fallbacks=[
                Upstream(backup.base_url, api="chat_completions", api_key="sk-local",
                         model="flux-backup", name="backup"),
            ],
        ) as client:
            shown = ""
            async with client.messages.stream(
                model="flux-demo", max_tokens=30, messages=messages
            ) as stream:
                async for event in stream:
                    if isinstance(event, fluxstream.TextDelta):
                        # Each delta starts where the text shown so far ends, across the
                        # handoff too: nothing twice, nothing missing.
                        assert event.offset == len(shown), (event.offset, len(shown))
                        shown += event.text
                        print(event.text, end="", flush=True)
                    elif isinstance(event, fluxstream.Handoff):
                        print(f"\n[handoff to {event.upstream} ({event.api}, model"
                              f" {event.model}) at offset {event.offset}: {event.reason}]")
            reply = stream.reply
            print(f"\n\noutcome: {reply.outcome.value if reply.outcome else None}")
            for s in reply.segments:  # who delivered which characters, and what it cost
                if s.usage_estimate is not None:  # cut before its final count: estimated
                    tokens = f"~{s.usage_estimate.output_tokens} output tokens (estimated)"
                else:
                    tokens = f"{s.usage.total_tokens if s.usage else None} tokens"
                print(f"segment: {s.upstream} ({s.api}, {s.model}) characters {s.start}-{s.end},"
                      f" {s.requests} request(s), {tokens}, {s.kind}: {s.detail or 'ok'}")
            total = reply.total_usage
            estimated = " (estimated in part)" if total and total.estimated else ""
            print(f"total usage: {total.total_tokens if total else None} tokens{estimated}")
            assert shown == reply.text
            assert [s.api for s in reply.segments] == ["anthropic_messages", "chat_completions"]


if __name__ == "__main__":
    anyio.run(main)
