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

``--instructions`` counts instead of timing, for a loaded machine (cachegrind, the follower
process only, the collector frozen after the imports): in lockstep, the writer names every
stream in each frame and sends the next one when the follower process has counted them all
(a byte back), so every reader wake-up carries one item per stream whatever the speed, as
``bench_relay_follow.py --instructions`` does. The count at N frames and at 3N, the
difference per item::

    python benchmarks/bench_wake_floor.py --streams 100 --instructions
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import re
import socket
import statistics
import subprocess
import sys
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


def write_lockstep(sock: socket.socket, streams: int, frames: int) -> None:
    """The writer process in lockstep: ``frames`` frames naming every stream, each sent once
    the follower process acknowledged the one before (a byte); ``b"E"`` at the end."""
    frame = b"".join(b"%d," % i for i in range(streams)) + b";"
    with sock:
        for _ in range(frames):
            sock.sendall(frame)
            if not sock.recv(1):
                return
        sock.sendall(b"E")


@dataclass
class Result:
    items: int
    wakeups: int
    cpu: float

    @property
    def cpu_per_item_us(self) -> float:
        return self.cpu / self.items * 1e6 if self.items else float("nan")


async def follow_frames(
    sock: socket.socket, streams: int, seconds: float, lockstep: bool = False
) -> Result:
    """The follower process's side: one reader task, one follower task per stream
    (``lockstep``: a byte back to the writer once every stream's item of a frame arrived)."""
    loop = asyncio.get_running_loop()
    waiters: list[asyncio.Future[bytes | None] | None] = [None] * streams
    received = 0
    reader, writer = await asyncio.open_connection(sock=sock)

    async def follower(index: int) -> None:
        nonlocal received
        while True:
            future: asyncio.Future[bytes | None] = loop.create_future()
            waiters[index] = future
            if await future is None:
                return
            received += 1
            if lockstep and received % streams == 0:
                writer.write(b"k")

    tasks = [asyncio.create_task(follower(i)) for i in range(streams)]
    await asyncio.sleep(0)  # every follower waits on its first future
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


def count_child(streams: int, frames: int) -> None:
    """One lockstep run of ``frames`` frames (what ``--instructions`` counts)."""
    ours, theirs = socket.socketpair()
    process = multiprocessing.get_context("fork").Process(
        target=write_lockstep, args=(theirs, streams, frames))
    process.start()
    theirs.close()
    gc.collect()
    gc.freeze()
    try:
        result = asyncio.run(follow_frames(ours, streams, 600.0, lockstep=True))
    finally:
        process.join(60)
        if process.is_alive():
            process.kill()
            process.join(5)
    if result.items != streams * frames:
        raise RuntimeError(f"{result.items} items of {streams * frames}")


def _instructions(streams: int, frames: int) -> int:
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
           sys.executable, __file__, "--count-child", str(streams), str(frames)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    err = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    # The forked writer runs under valgrind too: the count is the first process's.
    pid = re.search(r"==(\d+)==", err)
    assert pid, err[-2000:]
    found = re.search(rf"=={pid.group(1)}== I\s+refs:\s+([\d,]+)", err)
    assert found, err[-2000:]
    return int(found.group(1).replace(",", ""))


def count_instructions(streams: int, frames: int, pairs: int) -> dict[str, object]:
    """Instructions per item: (count at 3N frames - count at N) / the items in between."""
    each = [
        (_instructions(streams, 3 * frames) - _instructions(streams, frames))
        / (streams * 2 * frames)
        for _ in range(pairs)
    ]
    return {
        "streams": streams, "frames": [frames, 3 * frames],
        "instructions_per_item": round(statistics.median(each)),
        "each": [round(x) for x in each], "load_average": os.getloadavg(),
    }


def main() -> None:
    if sys.argv[1:2] == ["--count-child"]:
        count_child(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="items/s per stream")
    parser.add_argument("--frames", type=float, nargs="+", default=[0.001, 0.004, 0.016],
                        help="the writer's frame periods, seconds")
    parser.add_argument("--seconds", type=float, default=4.0, help="per round and frame")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true",
                        help="count instructions per item (cachegrind, lockstep, N and 3N)")
    parser.add_argument("--count-frames", type=int, default=100,
                        help="with --instructions: N, the frames of the smaller count")
    parser.add_argument("--pairs", type=int, default=1, help="with --instructions: N/3N pairs")
    args = parser.parse_args()
    if args.instructions:
        print(json.dumps(count_instructions(args.streams, args.count_frames, args.pairs)))
        return
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
