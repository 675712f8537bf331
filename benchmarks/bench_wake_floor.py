"""The least CPU an asyncio follower can spend per delta on this machine: a benchmark script.

Run from the repository root::

    .venv/bin/python benchmarks/bench_wake_floor.py            # 100 streams at 50 deltas/s
    .venv/bin/python benchmarks/bench_wake_floor.py --rounds 5

A relay follower process wakes one task per delivered delta (the user's ``async for``), and its
reader wakes once per producer frame. This script times exactly that and nothing else, so the
relay's own follower cost (``bench_relay.py``) can be read against a floor instead of a guess:

* a writer process (started and ended here, by its pid) sends over a socket pair, every
  ``frame`` seconds, the names of the streams due (each of ``--streams`` streams gets an item
  every ``1 / --rate`` seconds, their phases spread evenly);
* this process runs one reader task, woken by the socket, which completes the named streams'
  futures; one follower task per stream awaits its future in a loop and only counts the item.
  No Redis, no decoding, no events: the follower loop of any asyncio relay, minus all its work.

Reported per frame period (``--frames``): CPU per item (``time.process_time`` of this process
over the items received, median of the rounds, min-max) and items per reader wake-up. The
frame periods are interleaved within each round, so a change in the machine's state moves
every column alike.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import statistics
import time
from dataclasses import dataclass

#: Longest a round may run beyond its writer's own time, seconds (a bound, never reached).
_SLACK = 30.0


def write_frames(sock: socket.socket, streams: int, rate: float, frame: float,
                 seconds: float) -> None:
    """The writer process: every ``frame`` seconds, the names of the streams due, as
    ``b"3,17,;"``; ``b"E"`` at the end. Bounded by ``seconds``."""
    period = 1.0 / rate
    start = time.perf_counter()
    due_at = [start + i * period / streams for i in range(streams)]
    with sock:
        while (now := time.perf_counter()) - start < seconds:
            due = [i for i in range(streams) if due_at[i] <= now]
            for i in due:
                due_at[i] += period
            if due:
                sock.sendall(b"".join(b"%d," % i for i in due) + b";")
            time.sleep(frame)
        sock.sendall(b"E")


@dataclass
class Result:
    items: int
    wakeups: int
    cpu: float

    @property
    def cpu_per_item_us(self) -> float:
        return self.cpu / self.items * 1e6 if self.items else float("nan")


async def follow_frames(sock: socket.socket, streams: int, seconds: float) -> Result:
    """The follower process's side: one reader task, one follower task per stream."""
    loop = asyncio.get_running_loop()
    waiters: list[asyncio.Future[bytes | None] | None] = [None] * streams
    received = 0

    async def follower(index: int) -> None:
        nonlocal received
        while True:
            future: asyncio.Future[bytes | None] = loop.create_future()
            waiters[index] = future
            if await future is None:
                return
            received += 1

    tasks = [asyncio.create_task(follower(i)) for i in range(streams)]
    await asyncio.sleep(0)  # every follower waits on its first future
    reader, writer = await asyncio.open_connection(sock=sock)
    wakeups = 0
    rest = b""
    cpu = time.process_time()
    async with asyncio.timeout(seconds + _SLACK):
        while True:
            data = await reader.read(65536)
            wakeups += 1
            if not data or data.endswith(b"E"):
                break
            *frames, rest = (rest + data).split(b";")
            for frame in frames:
                for name in frame.split(b",")[:-1]:
                    future = waiters[int(name)]
                    if future is not None and not future.done():
                        future.set_result(name)
    cpu = time.process_time() - cpu
    for future in waiters:
        if future is not None and not future.done():
            future.set_result(None)
    await asyncio.gather(*tasks)
    writer.close()
    return Result(received, wakeups, cpu)


def one_round(streams: int, rate: float, frame: float, seconds: float) -> Result:
    ours, theirs = socket.socketpair()
    process = multiprocessing.get_context("fork").Process(
        target=write_frames, args=(theirs, streams, rate, frame, seconds))
    process.start()
    theirs.close()
    try:
        return asyncio.run(follow_frames(ours, streams, seconds))
    finally:
        process.join(seconds + _SLACK)
        if process.is_alive():
            process.kill()
            process.join(5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="items/s per stream")
    parser.add_argument("--frames", type=float, nargs="+", default=[0.001, 0.004, 0.016],
                        help="the writer's frame periods, seconds")
    parser.add_argument("--seconds", type=float, default=4.0, help="per round and frame")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[float, list[Result]] = {frame: [] for frame in args.frames}
    for r in range(args.rounds):
        order = args.frames if r % 2 == 0 else args.frames[::-1]
        for frame in order:
            results[frame].append(one_round(args.streams, args.rate, frame, args.seconds))
    print(f"{args.streams} streams x {args.rate:g} items/s, {args.rounds} rounds of "
          f"{args.seconds:g} s; CPU of the follower process per item (one wake-up each)\n")
    print("| writer frame (ms) | items per reader wake-up | CPU per item (µs), median | "
          "min-max |")
    print("|---:|---:|---:|---|")
    for frame, rounds in results.items():
        per_item = [x.cpu_per_item_us for x in rounds]
        per_wake = statistics.median(x.items / max(1, x.wakeups) for x in rounds)
        print(f"| {frame * 1e3:g} | {per_wake:.1f} | {statistics.median(per_item):.1f} | "
              f"{min(per_item):.1f}-{max(per_item):.1f} |")


if __name__ == "__main__":
    main()
