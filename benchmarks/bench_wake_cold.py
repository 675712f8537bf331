"""What code costs when it runs first after the event loop wakes from ``epoll``, against warm.

A peer process writes one byte on a socket every ``--gap`` milliseconds; this process's asyncio
loop sleeps in ``epoll`` until it comes, then times one piece of pure Python twice in a row:
first after the wake-up, then at once again (warm). The pieces differ in how much code and data
they touch: ``loop`` (an arithmetic loop: a few bytecodes, over and over), ``dict`` (building
small dicts and lists) and ``build`` (``client.chat.stream(...)``, nothing sent: the code a
stream's set-up runs). Run on a quiet machine::

    python benchmarks/bench_wake_cold.py --gap 1 --rounds 600
    python benchmarks/bench_wake_cold.py --gap 5 --rounds 600

It prints each piece's median time first after a wake-up and warm, and their ratio. If the
ratio grows with the piece's footprint and with the time asleep, the first token's cold path
(``bench_client.py --timeline``) is the machine's, paid in proportion to the code run.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

PEER = """
import socket, sys, time
s = socket.socket(fileno=int(sys.argv[1]))
gap = float(sys.argv[2]) / 1000
while True:
    time.sleep(gap)
    try:
        s.send(b"x")
    except OSError:
        break
"""


def piece_loop() -> int:
    total = 0
    for i in range(400):
        total += i * i
    return total


def piece_dict() -> list[dict[str, Any]]:
    return [{"a": i, "b": str(i), "c": [i, i + 1]} for i in range(40)]


async def measure(ours: socket.socket, rounds: int) -> dict[str, tuple[float, float]]:
    """Each piece's median time first after a wake-up and warm (``ours``: the socket the
    peer writes to)."""
    import fluxstream

    client = fluxstream.AsyncClient("http://127.0.0.1:9", api_key="k")  # never connected
    messages = [{"role": "user", "content": "hi"}]

    def piece_build() -> object:
        return client.chat.stream(model="m", messages=messages, max_tokens=8)

    pieces: dict[str, Callable[[], object]] = {
        "loop": piece_loop, "dict": piece_dict, "build": piece_build,
    }
    for piece in pieces.values():  # warm-up: every piece specialised and cached
        for _ in range(200):
            piece()
    ours.setblocking(False)
    loop = asyncio.get_running_loop()
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in pieces}
    names = list(pieces)
    try:
        for n in range(rounds):
            await asyncio.wait_for(loop.sock_recv(ours, 64), 5.0)  # asleep in epoll
            name = names[n % len(names)]
            piece = pieces[name]
            t0 = time.perf_counter_ns()
            piece()
            t1 = time.perf_counter_ns()
            piece()
            t2 = time.perf_counter_ns()
            times[name][0].append((t1 - t0) / 1000)
            times[name][1].append((t2 - t1) / 1000)
    finally:
        await client.aclose()
    return {name: (statistics.median(first), statistics.median(warm))
            for name, (first, warm) in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap", type=float, default=1.0, help="ms asleep between wake-ups")
    parser.add_argument("--rounds", type=int, default=600)
    args = parser.parse_args()
    ours, theirs = socket.socketpair()
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(theirs.fileno()), str(args.gap)],
                            pass_fds=(theirs.fileno(),))
    try:
        medians = asyncio.run(measure(ours, args.rounds))
    finally:
        ours.close()
        theirs.close()
        peer.kill()
        peer.wait()
    for name, (first, warm) in medians.items():
        print(f"{name:6} first after a wake-up {first:8.1f} µs   warm {warm:8.1f} µs"
              f"   ratio {first / warm:5.2f}")


if __name__ == "__main__":
    main()
