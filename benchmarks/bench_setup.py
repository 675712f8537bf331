"""Benchmark what a stream costs before its first byte: making it, and a whole short request.

Run from the repository root::

    python benchmarks/bench_setup.py              # instructions (cachegrind) and hot times
    python benchmarks/bench_setup.py --no-count   # hot times only (no valgrind)

Two measures, each for a few kinds of stream:

* **Instructions** (``valgrind --tool=cachegrind``), which do not depend on the machine's load:
  a child process makes N streams of one kind, one after another, and the cost of one is
  (count at the larger N - count at the smaller) / their difference, so the interpreter's
  start, the imports and the client's own set-up cancel out; the median of three such pairs
  (a run varies by ~1 % with the random content keys and the garbage collector's timing).
* **Hot time**: the median over rounds of the time per stream of a round of 2,000 (``build``
  kinds) or 200 (``request``), after a warm-up.

The kinds: ``build`` is ``client.chat.stream(...)``, nothing sent (the set-up the endpoint
does: options, the client's settings, the parser, the request, the route); ``build-fallback``
the same with one fallback (a route of two targets); ``build-messages`` a Messages stream
(the API's headers and retry policy); ``request`` a whole two-delta request on the ``packed``
path of ``benchmarks/bench_server.py``'s ``Conn``, served in the client's own event loop.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout first
sys.path.insert(1, str(Path(__file__).resolve().parent))

import fluxstream
from fluxstream import Upstream

MESSAGES = [{"role": "user", "content": "hi"}]
KINDS = ("build", "build-fallback", "build-messages", "request")
#: The two N of each kind's instruction count (a whole request costs ten times a build).
COUNTS = {"request": (200, 600)}
BUILD_COUNTS = (1000, 3000)
PAIRS = 3


def _client(kind: str, base_url: str) -> fluxstream.AsyncClient:
    fallbacks = [Upstream("http://127.0.0.1:8/v1", api_key="k2")] if kind == "build-fallback" \
        else []
    return fluxstream.AsyncClient(base_url, "bench-key", fallbacks=fallbacks)


def _builder(kind: str, client: fluxstream.AsyncClient) -> Callable[[], Any]:
    if kind == "build-messages":
        return lambda: client.messages.stream(model="m", messages=MESSAGES, max_tokens=5)
    return lambda: client.chat.stream(model="m", messages=MESSAGES, max_tokens=2)


async def _requests(n: int, timed: bool) -> list[float]:
    """``n`` sequential two-delta requests against an in-process ``Conn`` (the times of each
    round of 50 when ``timed``)."""
    from bench_server import Conn

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    times: list[float] = []
    async with fluxstream.AsyncClient(f"http://127.0.0.1:{port}/packed/v1", "k") as client:
        async def one() -> None:
            async with client.chat.stream(model="m", messages=MESSAGES, max_tokens=2) as s:
                async for _ in s:
                    pass
            assert s.reply.outcome == "done", s.reply.outcome

        await one()  # the connection opened, every lazy import done
        done = 0
        while done < n:
            size = min(50, n - done)
            start = time.perf_counter()
            for _ in range(size):
                await one()
            times.append((time.perf_counter() - start) / size)
            done += size
    server.close()
    await server.wait_closed()
    return times


def _count_child(kind: str, n: int) -> None:
    if kind == "request":
        asyncio.run(_requests(n, False))
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


def per_stream_instructions(kind: str) -> float:
    small, large = COUNTS.get(kind, BUILD_COUNTS)
    each = []
    for _ in range(PAIRS):
        low, high = _instructions(kind, small), _instructions(kind, large)
        each.append((high - low) / (large - small))
    return statistics.median(each)


def hot_microseconds(kind: str, rounds: int) -> float:
    if kind == "request":
        times = asyncio.run(_requests(50 * rounds, True))
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
    args = parser.parse_args()
    if args.count_child:
        _count_child(args.count_child[0], int(args.count_child[1]))
        return
    print(f"{'kind':<16}{'instructions':>14}{'hot µs':>10}")
    for kind in args.kinds:
        count = "" if args.no_count else f"{per_stream_instructions(kind):,.0f}"
        print(f"{kind:<16}{count:>14}{hot_microseconds(kind, args.rounds):>10.1f}", flush=True)


if __name__ == "__main__":
    main()
