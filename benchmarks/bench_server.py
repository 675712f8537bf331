"""A lean streaming server for the client benchmarks, in its own process.

``python benchmarks/bench_server.py --port P`` serves ``POST /<mode>/v1/chat/completions``
(and Anthropic's ``/<mode>/v1/messages``, Gemini's
``/<mode>/v1beta/models/<model>:streamGenerateContent?alt=sse``) with exactly the bytes the
embedded server (``fluxstream serve --profile openai``) sends for the same request body (the events come from ``fluxstream.server``'s script and renderer, so
``expected_reply`` checks every client's text), but it writes them on its own terms, so that
the *client's* cost is what a benchmark sees:

* it is a bare ``asyncio.Protocol`` that writes pre-framed bytes: a few µs of CPU per write,
  so the server is never the bottleneck (the benchmark reports its CPU and wall time to show
  it), where the embedded h11 server needs ~60-100 µs per event;
* the write pattern is the regime, named by the first path segment:

  ``paced-<ms>``    one HTTP chunk per event, one ``write`` per event, ``<ms>`` between two
                    events of a stream (each stream starts at a random phase): what a
                    token-paced LLM sends, and the client wakes up for every event;
  ``packed``        the events packed into HTTP chunks of at least 64 KiB, one write each
                    (a fast server or a buffering proxy);
  ``chunk16k``      one HTTP chunk per event, the framed bytes written 16 KiB at a time (a
                    server that buffers its socket writes but frames every event);
  ``burst-<ms>``    the first three events with the head in one write, then paced like
                    ``paced-<ms>`` (time to first token: the first delta is in the first write);
  ``hold``          the head and the first three events, then nothing until the client closes
                    (at most 600 s): open streams for the memory measurement.

Only what the benchmark clients send is supported: HTTP/1.1 keep-alive with a
``Content-Length`` body (no chunked request bodies, no pipelining). Bounded: requests over
1 MiB and heads over 64 KiB close the connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

from fluxstream.server.profiles import parse_profiles
from fluxstream.server.render import RETRY_MS, frame, stream_events
from fluxstream.server.render_gemini import gemini_events, gemini_script
from fluxstream.server.render_messages import messages_events, messages_script
from fluxstream.server.script import build_script

NAMES = parse_profiles("openai")
PACKED = 64 * 1024
WRITE_16K = 16 * 1024
HOLD_SECONDS = 600.0
MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
END = b"0\r\n\r\n"
_cache: dict[tuple[str, bytes], list[bytes]] = {}
#: The routes served (after the mode): Chat Completions, Anthropic Messages, and Gemini's
#: streamed route under this prefix.
CHAT = "v1/chat/completions"
MESSAGES = "v1/messages"
GEMINI = "v1beta/models/"


def events_for(body: bytes, route: str = CHAT) -> list[bytes]:
    """The SSE events (unframed bytes) the embedded server streams for this request body
    to ``route`` (:data:`CHAT`, :data:`MESSAGES`, or a Gemini ``GEMINI``-model path)."""
    cached = _cache.get((route, body))
    if cached is None:
        request = json.loads(body)
        names = NAMES
        model = request.get("model")
        if isinstance(model, str) and "@" in model:  # "m@fill-max-tokens", as the embedded server
            names = NAMES | parse_profiles(model.partition("@")[2])
        if route == CHAT:
            usage = bool((request.get("stream_options") or {}).get("include_usage"))
            events = stream_events(build_script(request, names), names, usage)
        elif route == MESSAGES:
            events = messages_events(messages_script(request, names), names)
        else:
            gemini = _gemini_model(route)
            if gemini is None:
                raise ValueError(f"no route {route}")
            events = gemini_events(gemini_script(request, names, gemini), names)
        cached = [frame(e, NAMES, retry=RETRY_MS if i == 0 else None) for i, e in enumerate(events)]
        if len(_cache) > 64:
            _cache.clear()
        _cache[(route, body)] = cached
    return cached


def _gemini_model(route: str) -> str | None:
    """The model of a streamed Gemini route (``v1beta/models/<model>:streamGenerateContent``,
    ``?alt=sse``), else ``None``."""
    path, _, query = route.partition("?")
    if not path.startswith(GEMINI) or not path.endswith(":streamGenerateContent"):
        return None
    return path[len(GEMINI):].partition(":")[0] if query == "alt=sse" else None


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def error(status: int, text: str) -> bytes:
    body = json.dumps({"error": {"message": text, "type": "invalid_request_error"}}).encode()
    return (f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


class Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.lost = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        self.can_write.set()
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > MAX_HEAD + MAX_BODY:
            self.close()
            return
        if self.task is None:
            self.next_request()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def next_request(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self.close()
            return
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length") or 0)
        if length > MAX_BODY or len(parts) != 3:
            self.close()
            return
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4 : end + 4 + length])
        del self.buf[: end + 4 + length]
        self.task = asyncio.get_running_loop().create_task(self.respond(parts[1], body))

    async def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)
        if not self.can_write.is_set():
            await self.can_write.wait()

    async def respond(self, path: str, body: bytes) -> None:
        try:
            mode, _, rest = path.lstrip("/").partition("/")
            if rest not in (CHAT, MESSAGES) and _gemini_model(rest) is None:
                await self.write(error(404, f"no route {path}"))
            else:
                try:
                    events = events_for(body, rest)
                except (ValueError, TypeError, AttributeError) as exc:
                    await self.write(error(400, f"bad request body: {exc}"))
                else:
                    await self.stream(mode, events)
        except asyncio.CancelledError:
            return
        self.task = None
        if self.buf and not self.lost.is_set():
            self.next_request()

    async def stream(self, mode: str, events: list[bytes]) -> None:
        kind, _, arg = mode.partition("-")
        if kind == "paced":
            interval = float(arg) / 1000.0
            await self.write(HEAD)
            await asyncio.sleep(random.uniform(0.0, interval))
            for i, event in enumerate(events):
                if i:
                    await asyncio.sleep(interval)
                await self.write(chunk(event))
        elif kind == "burst":
            interval = float(arg) / 1000.0
            await self.write(HEAD + b"".join(chunk(e) for e in events[:3]))
            for event in events[3:]:
                await asyncio.sleep(interval)
                await self.write(chunk(event))
        elif kind == "packed":
            out = [HEAD]
            pending = bytearray()
            for event in events:
                pending += event
                if len(pending) >= PACKED:
                    out.append(chunk(bytes(pending)))
                    pending.clear()
            if pending:
                out.append(chunk(bytes(pending)))
            out[-1] += END
            for piece in out:
                await self.write(piece)
            return
        elif kind == "chunk16k":
            data = HEAD + b"".join(chunk(e) for e in events) + END
            for start in range(0, len(data), WRITE_16K):
                await self.write(data[start : start + WRITE_16K])
            return
        elif kind == "hold":
            await self.write(HEAD + b"".join(chunk(e) for e in events[:3]))
            try:
                await asyncio.wait_for(self.lost.wait(), HOLD_SECONDS)
            except asyncio.TimeoutError:
                self.close()
            return
        else:
            await self.write(error(404, f"unknown mode {mode!r}"))
            return
        await self.write(END)


async def main(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", port, backlog=4096)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main(args.port))
