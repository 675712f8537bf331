"""Benchmark what a stream costs before its first byte: making it, and a whole short request.

Run from the repository root::

    python benchmarks/bench_setup.py              # instructions (cachegrind) and hot times
    python benchmarks/bench_setup.py --no-count   # hot times only (no valgrind)
    python benchmarks/bench_setup.py --kinds delta delta-packed --pairs 1   # per delta

To measure another checkout with the same script, run a copy of this file and
``bench_server.py`` from a directory outside any checkout, with ``PYTHONPATH`` naming the
checkout (the script puts its own checkout first on ``sys.path`` when it sits in one).

Two measures, each for a few kinds of stream:

* **Instructions** (``valgrind --tool=cachegrind``), which do not depend on the machine's load:
  a child process makes N streams of one kind, one after another, and the cost of one is
  (count at the larger N - count at the smaller) / their difference, so the interpreter's
  start, the imports and the client's own set-up cancel out; the objects the imports made are
  frozen out of the garbage collector's passes (``gc.freeze()``); the median of ``--pairs``
  such pairs (default three: a run varies by ~1 % with the random content keys and the
  garbage collector's timing).
* **Hot time**: the median over rounds of the time per stream of a round of 2,000 (``build``
  kinds) or 200 (``request``), or per delta of a round of 4 replies of 100 deltas (``delta``
  kinds), after a warm-up.

The kinds: ``build`` is ``client.chat.stream(...)``, nothing sent (the set-up the endpoint
does: options, the client's settings, the parser, the request, the route); ``build-fallback``
the same with one fallback (a route of two targets); ``build-messages`` a Messages stream
(the API's headers and retry policy), ``build-gemini`` a Gemini one; ``request`` a whole
two-delta request on the ``packed``
path of ``benchmarks/bench_server.py``'s ``Conn``, served in the client's own event loop;
``request-fallback`` the same with one fallback that is never asked, ``request-hedged`` that
with a hedge armed that never fires (``hedge_after`` 60 s); ``request-raw`` their anchor: the same request (the body fluxstream sends, encoded once) by raw
aiohttp (``ClientSession.post`` + ``content.iter_any()``, bytes dropped), as
``bench_client.py``'s ``raw-aiohttp``. ``request-messages`` and ``request-gemini`` are
``request`` on Anthropic's Messages API and Gemini's (the same two deltas in each one's
events, as the embedded server writes them), ``request-raw-messages`` and
``request-raw-gemini`` their anchors (the body and headers fluxstream sends, by raw
aiohttp)::

    python benchmarks/bench_setup.py --pairs 1 --rounds 3 --kinds request-messages \
        request-raw-messages request-gemini request-raw-gemini build-messages build-gemini

Past the first byte, per delta (N is then the deltas of each of 4 replies, and the figure
is per delta): ``delta`` is the read path one event at a time, in lockstep (the server in
the same loop writes one event as its own HTTP chunk, then yields 8 loop turns, so the
client has read, parsed and handed out that delta before the next one is written, whatever
the speed), server and event loop included; ``delta-packed`` the same replies written in
64 KiB chunks (``Conn``'s ``packed`` path: a read holds many events).
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
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout first
sys.path.insert(1, str(Path(__file__).resolve().parent))

import fluxstream
from fluxstream import Upstream

MESSAGES = [{"role": "user", "content": "hi"}]
KINDS = ("build", "build-fallback", "build-messages", "build-gemini", "request",
         "request-fallback", "request-hedged", "request-raw", "request-messages",
         "request-raw-messages", "request-gemini", "request-raw-gemini", "delta", "delta-packed")
#: The two N of each kind's instruction count (a whole request costs ten times a build; for
#: the ``delta`` kinds N is the deltas of each of ``REPLIES`` replies).
COUNTS = {"request": (200, 600), "request-fallback": (200, 600), "request-hedged": (200, 600),
          "request-raw": (200, 600), "request-messages": (200, 600),
          "request-raw-messages": (200, 600), "request-gemini": (200, 600),
          "request-raw-gemini": (200, 600), "delta": (100, 300), "delta-packed": (100, 300)}
BUILD_COUNTS = (1000, 3000)
PAIRS = 3
#: Replies per run of the ``delta`` kinds (their N is deltas per reply).
REPLIES = 4
#: Loop turns the lockstep server yields after each event.
LOCKSTEP_TURNS = 8


def _client(kind: str, base_url: str) -> fluxstream.AsyncClient:
    fallbacks = [Upstream("http://127.0.0.1:8/v1", api_key="k2")] if kind == "build-fallback" \
        else []
    return fluxstream.AsyncClient(base_url, "bench-key", fallbacks=fallbacks)


CONTENTS = [{"role": "user", "parts": [{"text": "hi"}]}]


def _builder(kind: str, client: fluxstream.AsyncClient) -> Callable[[], Any]:
    if kind == "build-messages":
        return lambda: client.messages.stream(model="m", messages=MESSAGES, max_tokens=5)
    if kind == "build-gemini":
        return lambda: client.gemini.stream(model="m", contents=CONTENTS,
                                            generation_config={"maxOutputTokens": 2})
    return lambda: client.chat.stream(model="m", messages=MESSAGES, max_tokens=2)


def _api_of(kind: str) -> str:
    """The API a ``request`` kind asks: ``chat``, ``messages`` or ``gemini``."""
    return kind.rpartition("-")[2] if kind.endswith(("-messages", "-gemini")) else "chat"


def _api_stream(api: str, client: fluxstream.AsyncClient) -> Callable[[], Any]:
    """What makes a two-delta request of ``api`` (what each ``request`` kind sends): a
    ``functools.partial``, so the request pays no Python call of the benchmark's own."""
    if api == "messages":
        return partial(client.messages.stream, model="m", messages=MESSAGES, max_tokens=2)
    if api == "gemini":
        return partial(client.gemini.stream, model="m", contents=CONTENTS,
                       generation_config={"maxOutputTokens": 2})
    return partial(client.chat.stream, model="m", messages=MESSAGES, max_tokens=2)


def _lockstep_conn() -> type[Any]:
    """``bench_server.Conn`` with a ``lockstep`` mode: an event per HTTP chunk, then
    ``LOCKSTEP_TURNS`` loop turns before the next, so every delta is a read of its own."""
    from bench_server import END, HEAD, Conn, chunk

    class LockstepConn(Conn):
        async def stream(self, mode: str, events: list[bytes]) -> None:
            if mode != "lockstep":
                await super().stream(mode, events)
                return
            await self.write(HEAD)
            for event in events:
                await self.write(chunk(event))
                for _ in range(LOCKSTEP_TURNS):
                    await asyncio.sleep(0)
            await self.write(END)

    return LockstepConn


async def _replies(kind: str, deltas: int, rounds: int) -> list[float]:
    """``rounds`` times ``REPLIES`` sequential replies of ``deltas`` deltas each, and the time
    per delta of each round."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_lockstep_conn(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    mode = "lockstep" if kind == "delta" else "packed"
    times: list[float] = []
    async with fluxstream.AsyncClient(f"http://127.0.0.1:{port}/{mode}/v1", "k") as client:
        async def one(n: int) -> None:
            got = 0
            # As long as max_tokens asks (bench_server honours the suffix, as the embedded
            # server does): the script's own reply is shorter than most N.
            async with client.chat.stream(model="m@fill-max-tokens", messages=MESSAGES,
                                          max_tokens=n) as s:
                async for event in s:
                    got += type(event) is fluxstream.TextDelta
            assert s.reply.outcome == "done" and got == n, (s.reply.outcome, got)

        await one(2)  # the connection opened, every lazy import done
        for _ in range(rounds):
            start = time.perf_counter()
            for _ in range(REPLIES):
                await one(deltas)
            times.append((time.perf_counter() - start) / (REPLIES * deltas))
    server.close()
    await server.wait_closed()
    return times


async def _rounds(one: Callable[[], Any], n: int) -> list[float]:
    """``one()`` once (the connection opened, every lazy import done), then ``n`` times, and
    the time per request of each round of 50."""
    await one()
    times: list[float] = []
    done = 0
    while done < n:
        size = min(50, n - done)
        start = time.perf_counter()
        for _ in range(size):
            await one()
        times.append((time.perf_counter() - start) / size)
        done += size
    return times


async def _requests(n: int, timed: bool, kind: str = "request") -> list[float]:
    """``n`` sequential two-delta requests against an in-process ``Conn`` (the times of each
    round of 50 when ``timed``). ``request-fallback``: with one fallback that is never asked;
    ``request-hedged``: the same, with a hedge armed that never fires (``hedge_after`` 60 s)."""
    from bench_server import Conn

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api = _api_of(kind)
    fallbacks = [Upstream("http://127.0.0.1:8/v1", api_key="k2")] \
        if kind in ("request-fallback", "request-hedged") else []
    failover = fluxstream.Failover(hedge_after=60.0) if kind == "request-hedged" else None
    # Chat Completions' root is the base URL; Messages and Gemini add their version, as
    # their own SDKs do.
    base = f"http://127.0.0.1:{port}/packed" + ("/v1" if api == "chat" else "")
    async with fluxstream.AsyncClient(
        base, "k", fallbacks=fallbacks, failover=failover,
    ) as client:
        make = _api_stream(api, client)

        async def one() -> None:
            async with make() as s:
                async for _ in s:
                    pass
            assert s.reply.outcome == "done", s.reply.outcome

        times = await _rounds(one, n)
    server.close()
    await server.wait_closed()
    return times


async def _raw_requests(n: int, timed: bool, kind: str = "request-raw") -> list[float]:
    """``_requests``'s anchor: the same requests by raw aiohttp (the body and headers
    fluxstream sends for that API), the bytes dropped."""
    import json

    import aiohttp
    from bench_server import Conn

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    api = _api_of(kind)
    root = f"http://127.0.0.1:{port}/packed"
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if api == "messages":
        url = f"{root}/v1/messages"
        request: dict[str, Any] = {"model": "m", "max_tokens": 2, "messages": MESSAGES,
                                   "stream": True}
        headers |= {"anthropic-version": "2023-06-01", "x-api-key": "k"}
        end = b"message_stop"
    elif api == "gemini":
        url = f"{root}/v1beta/models/m:streamGenerateContent?alt=sse"
        request = {"contents": CONTENTS, "generationConfig": {"maxOutputTokens": 2}}
        headers["x-goog-api-key"] = "k"
        end = b'"responseId"'
    else:
        url = f"{root}/v1/chat/completions"
        request = {"model": "m", "messages": MESSAGES, "max_tokens": 2, "stream": True,
                   "stream_options": {"include_usage": True}}
        headers["authorization"] = "Bearer k"
        end = b"[DONE]"
    body = json.dumps(request).encode()
    async with aiohttp.ClientSession() as session:
        async def one() -> None:
            async with session.post(url, data=body, headers=headers) as response:
                assert response.status == 200, response.status
                last = b""
                async for data in response.content.iter_any():
                    last = data
            assert end in last[-400:], last[-400:]

        times = await _rounds(one, n)
    server.close()
    await server.wait_closed()
    return times


def _count_child(kind: str, n: int) -> None:
    # The imports' objects out of the collector's passes: a full collection walks them all
    # (tens of millions of instructions), and whether one falls into a run moved a request's
    # count by up to 6 % between runs.
    gc.collect()
    gc.freeze()
    if kind.startswith("delta"):
        asyncio.run(_replies(kind, n, 1))
        return
    if kind.startswith("request-raw"):
        asyncio.run(_raw_requests(n, False, kind))
        return
    if kind.startswith("request"):
        asyncio.run(_requests(n, False, kind))
        return
    client = _client(kind, "http://127.0.0.1:9/v1")
    build = _builder(kind, client)
    build()  # lazy imports and first-stream caches
    for _ in range(n):
        build()


def _instructions(kind: str, n: int) -> int:
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--count-child", kind, str(n)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", err)
    assert found, err[-2000:]
    return int(found.group(1).replace(",", ""))


def per_stream_instructions(kind: str, pairs: int = PAIRS) -> float:
    """Per stream, or per delta for the ``delta`` kinds."""
    small, large = COUNTS.get(kind, BUILD_COUNTS)
    units = (large - small) * (REPLIES if kind.startswith("delta") else 1)
    each = []
    for _ in range(pairs):
        low, high = _instructions(kind, small), _instructions(kind, large)
        each.append((high - low) / units)
    return statistics.median(each)


def hot_microseconds(kind: str, rounds: int) -> float:
    if kind.startswith("delta"):
        return statistics.median(asyncio.run(_replies(kind, 100, rounds))) * 1e6
    if kind.startswith("request"):
        if kind.startswith("request-raw"):
            times = asyncio.run(_raw_requests(50 * rounds, True, kind))
        else:
            times = asyncio.run(_requests(50 * rounds, True, kind))
        return statistics.median(times) * 1e6
    client = _client(kind, "http://127.0.0.1:9/v1")
    build = _builder(kind, client)
    for _ in range(200):
        build()
    times = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        for _ in range(2000):
            build()
        times.append((time.perf_counter() - start) / 2000)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--no-count", action="store_true", help="skip the instruction counts")
    parser.add_argument("--rounds", type=int, default=9, help="hot rounds per kind")
    parser.add_argument("--kinds", nargs="*", default=list(KINDS), choices=KINDS)
    parser.add_argument("--pairs", type=int, default=PAIRS,
                        help="instruction-count pairs per kind (the median is shown)")
    args = parser.parse_args()
    if args.count_child:
        _count_child(args.count_child[0], int(args.count_child[1]))
        return
    print(f"# fluxstream from {Path(fluxstream.__file__).parent}")
    print(f"{'kind':<22}{'instructions':>14}{'hot µs':>10}")
    for kind in args.kinds:
        count = "" if args.no_count else f"{per_stream_instructions(kind, args.pairs):,.0f}"
        print(f"{kind:<22}{count:>14}{hot_microseconds(kind, args.rounds):>10.1f}", flush=True)


if __name__ == "__main__":
    main()
