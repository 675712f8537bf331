"""Benchmark client CPU per delta, end to end over loopback, at 1, 100 and 500 concurrent streams.

Run from the repository root::

    .venv/bin/python benchmarks/bench_client.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_client.py --quick    # smoke run (< 30 s)
    .venv/bin/python benchmarks/bench_client.py --trio     # also the httpx contenders on trio
    .venv/bin/python benchmarks/bench_client.py --profile fluxstream-aiohttp --concurrency 1

Method (see benchmarks/README.md, "Client (end to end)"):

* One embedded server (``python -m fluxstream serve --port P``) in a **separate process**,
  started and stopped by this script, bound to 127.0.0.1; the same server for every contender.
  It writes each SSE event with its own ``send``, so when the client keeps up one read is
  about one delta.
* Every contender sends the same request (``max_tokens`` = deltas per stream,
  ``stream_options.include_usage``) and receives the same bytes. At each concurrency the total
  number of content deltas is the same for every contender: at c=1 the streams run one after
  another, at c>1 all c streams run at once (one task each).
* Time is the **client process's CPU time** (``time.process_time``) around a round of streams
  (the server's CPU is in the other process), divided by the number of content deltas received;
  the median of ``--repeats`` rounds. Each contender gets its own HTTP client and one untimed
  warm-up round first (connections opened, code paths warm), so the timed rounds measure steady
  state on kept-alive connections. Wall time and the server's CPU per delta (from
  ``/proc/PID/stat``) are reported for context.
* Every contender's text (per stream) is checked equal to the server's deterministic reply
  (``fluxstream.server.expected_reply``) and the two raw drains' byte counts equal each other
  and end with ``[DONE]``, so nobody measures an error path.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

import anyio
import httpx
import httpx_sse
import openai

import fluxstream
from fluxstream import TextDelta
from fluxstream.server import expected_reply

try:
    from httpx_aiohttp import HttpxAiohttpClient
except ImportError:  # pragma: no cover - optional
    HttpxAiohttpClient = None  # type: ignore[assignment,misc]

MODEL = "fluxstream-echo"
MESSAGES = [{"role": "user", "content": "benchmark the client end to end"}]
API_KEY = "bench-key"
# Same pool for every contender: enough connections (and kept-alive ones) for c=500, so no one
# pays for reconnects between rounds. httpx.Limits' default keeps only 20 alive.
LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
TIMEOUT = httpx.Timeout(60.0)
RUN_TIMEOUT = 600.0  # one round, seconds: every loop here is bounded

# concurrency -> (streams per round, content deltas per stream); the same total per concurrency.
FULL_PLAN = {1: (20, 2000), 100: (100, 400), 500: (500, 80)}
# --quick: c=500 is left out on purpose: with httpx, a burst of 500 requests alone costs ~10 s of
# client CPU per round in httpcore's pool (see README), more than a smoke run may take.
QUICK_PLAN = {1: (2, 300), 20: (20, 20), 50: (50, 10)}


# --------------------------------------------------------------------------------- the server


class ServerProcess:
    """``python -m fluxstream serve`` on a free loopback port, in its own process."""

    def __init__(self, faults: str | None = None) -> None:
        self.faults = faults
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "fluxstream", "serve", "--host", "127.0.0.1",
               "--port", str(self.port), "--profile", "openai"]
        if self.faults:
            cmd += ["--fault", self.faults]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("the server did not start within 20 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def cpu(self) -> float:
        """The server process's user+system CPU seconds so far (Linux; 0.0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, AttributeError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------- contenders
# Each contender: make(base_url) -> (state, close); one(state, base_url, deltas) -> result,
# where result is the stream's text (or, for raw drains, ("raw", bytes, tail)).


def _body(deltas: int) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": MESSAGES, "max_tokens": deltas, "stream": True,
         "stream_options": {"include_usage": True}},
        separators=(",", ":"),
    ).encode()


_HEADERS = {"content-type": "application/json", "accept": "text/event-stream",
            "authorization": f"Bearer {API_KEY}"}


def _httpx_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(limits=LIMITS, timeout=TIMEOUT)


def _aiohttp_client() -> Any:
    return HttpxAiohttpClient(limits=LIMITS, timeout=TIMEOUT)


async def raw_drain(client: Any, base_url: str, deltas: int) -> Any:
    nbytes = 0
    prev = last = b""
    async with client.stream("POST", f"{base_url}/chat/completions", content=_body(deltas),
                             headers=_HEADERS) as response:
        if response.status_code != 200:
            raise RuntimeError(f"status {response.status_code}")
        async for chunk in response.aiter_bytes():
            nbytes += len(chunk)
            prev, last = last, chunk
    return ("raw", nbytes, (prev + last)[-64:])


async def httpx_sse_loop(client: Any, base_url: str, deltas: int) -> Any:
    parts: list[str] = []
    async with httpx_sse.aconnect_sse(client, "POST", f"{base_url}/chat/completions",
                                      content=_body(deltas), headers=_HEADERS) as source:
        if source.response.status_code != 200:
            raise RuntimeError(f"status {source.response.status_code}")
        async for sse in source.aiter_sse():
            data = sse.data
            if data == "[DONE]":
                continue
            chunk = json.loads(data)
            choices = chunk["choices"]
            if choices:
                content = choices[0]["delta"].get("content")
                if content:
                    parts.append(content)
    return "".join(parts)


async def openai_loop(client: Any, base_url: str, deltas: int) -> Any:
    parts: list[str] = []
    stream = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=deltas, stream=True,
        stream_options={"include_usage": True},
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices:
                content = chunk.choices[0].delta.content
                if content:
                    parts.append(content)
    return "".join(parts)


async def fluxstream_loop(client: Any, base_url: str, deltas: int) -> Any:
    parts: list[str] = []
    async with client.chat.stream(model=MODEL, messages=MESSAGES, max_tokens=deltas) as s:
        async for event in s:
            if type(event) is TextDelta:
                parts.append(event.text)
    reply = s.reply
    if reply.outcome != "done":
        raise RuntimeError(f"fluxstream outcome {reply.outcome}: {reply.error}")
    text = "".join(parts)
    if text != reply.text:
        raise RuntimeError("fluxstream: events and reply disagree")
    return text


@dataclass
class Contender:
    name: str
    make: Callable[[str], tuple[Any, Callable[[], Awaitable[None]]]]
    one: Callable[[Any, str, int], Awaitable[Any]]
    asyncio_only: bool = False


def _plain(factory: Callable[[], Any]) -> Callable[[str], tuple[Any, Any]]:
    def make(base_url: str) -> tuple[Any, Any]:
        client = factory()
        return client, client.aclose

    return make


def _openai(base_url: str) -> tuple[Any, Any]:
    http = _httpx_client()
    client = openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0,
                                http_client=http)

    async def close() -> None:
        await client.close()
        await http.aclose()

    return client, close


def _fluxstream(factory: Callable[[], Any]) -> Callable[[str], tuple[Any, Any]]:
    def make(base_url: str) -> tuple[Any, Any]:
        http = factory()
        client = fluxstream.AsyncClient(base_url=base_url, api_key=API_KEY, http_client=http)

        async def close() -> None:
            await client.aclose()
            await http.aclose()

        return client, close

    return make


CONTENDERS = [
    Contender("raw-drain-httpx", _plain(_httpx_client), raw_drain),
    Contender("raw-drain-aiohttp", _plain(_aiohttp_client), raw_drain, asyncio_only=True),
    Contender("httpx-sse+json.loads", _plain(_httpx_client), httpx_sse_loop),
    Contender("openai create() loop", _openai, openai_loop),
    Contender("fluxstream-httpx", _fluxstream(_httpx_client), fluxstream_loop),
    Contender("fluxstream-aiohttp", _fluxstream(_aiohttp_client), fluxstream_loop,
              asyncio_only=True),
]


# --------------------------------------------------------------------------------- running


@dataclass
class Round:
    cpu: float
    wall: float
    server_cpu: float
    results: list[Any]


async def run_round(contender: Contender, state: Any, base_url: str, concurrency: int,
                    streams: int, deltas: int, server: ServerProcess) -> Round:
    results: list[Any] = []

    async def one() -> None:
        results.append(await contender.one(state, base_url, deltas))

    gc.collect()
    s0 = server.cpu()
    w0 = time.perf_counter()
    c0 = time.process_time()
    with anyio.fail_after(RUN_TIMEOUT):
        if concurrency == 1:
            for _ in range(streams):
                await one()
        else:
            async with anyio.create_task_group() as tg:
                for _ in range(streams):
                    tg.start_soon(one)
    cpu = time.process_time() - c0
    wall = time.perf_counter() - w0
    return Round(cpu, wall, server.cpu() - s0, results)


def check(name: str, results: list[Any], streams: int, expected: str, raw: dict[int, Any],
          concurrency: int) -> None:
    if len(results) != streams:
        raise RuntimeError(f"{name}: {len(results)} of {streams} streams")
    for r in results:
        if isinstance(r, tuple):
            _, nbytes, tail = r
            if b"[DONE]" not in tail:
                raise RuntimeError(f"{name}: body did not end with [DONE]")
            if raw.setdefault(concurrency, nbytes) != nbytes:
                raise RuntimeError(f"{name}: {nbytes} bytes, other raw drain {raw[concurrency]}")
        elif r != expected:
            raise RuntimeError(f"{name}: text differs from the expected reply "
                               f"({len(r)} vs {len(expected)} chars)")


async def bench(args: argparse.Namespace, server: ServerProcess, backend: str,
                plan: dict[int, tuple[int, int]]) -> dict[tuple[str, int], dict[str, float]]:
    table: dict[tuple[str, int], dict[str, float]] = {}
    raw: dict[int, Any] = {}
    contenders = [c for c in CONTENDERS if (not args.only or c.name in args.only)
                  and not (backend == "trio" and c.asyncio_only)
                  and not (c.asyncio_only and HttpxAiohttpClient is None)]
    for concurrency, (streams, deltas) in plan.items():
        request = {"model": MODEL, "messages": MESSAGES, "max_tokens": deltas, "stream": True}
        expected = expected_reply(request, "openai").choices[0].text
        total = streams * deltas
        for contender in contenders:
            state, close = contender.make(server.base_url)
            try:
                warm = await run_round(contender, state, server.base_url, concurrency, streams,
                                       deltas, server)
                check(contender.name, warm.results, streams, expected, raw, concurrency)
                rounds = []
                for _ in range(args.repeats):
                    r = await run_round(contender, state, server.base_url, concurrency,
                                        streams, deltas, server)
                    check(contender.name, r.results, streams, expected, raw, concurrency)
                    rounds.append(r)
            finally:
                with anyio.move_on_after(10, shield=True):
                    await close()
            row = {
                "us_per_delta": statistics.median(r.cpu for r in rounds) / total * 1e6,
                "wall_s": statistics.median(r.wall for r in rounds),
                "server_us_per_delta": statistics.median(r.server_cpu for r in rounds)
                / total * 1e6,
                "min_us": min(r.cpu for r in rounds) / total * 1e6,
                "max_us": max(r.cpu for r in rounds) / total * 1e6,
            }
            table[(contender.name, concurrency)] = row
            print(f"  [{backend}] c={concurrency:<3} {contender.name:<22} "
                  f"{row['us_per_delta']:7.2f} us/delta CPU "
                  f"(min {row['min_us']:.2f}, max {row['max_us']:.2f}; wall {row['wall_s']:.2f} s;"
                  f" server {row['server_us_per_delta']:.1f} us/delta)", flush=True)
    return table


def report(table: dict[tuple[str, int], dict[str, float]], plan: dict[int, tuple[int, int]],
           backend: str) -> None:
    concs = list(plan)
    names = [c.name for c in CONTENDERS if any((c.name, k) in table for k in concs)]
    print(f"\n### {backend}: client CPU per content delta (us), median\n")
    head = " | ".join(f"c={k} ({plan[k][0]}x{plan[k][1]})" for k in concs)
    print(f"| contender | {head} |")
    print("|---|" + "---:|" * len(concs))
    for name in names:
        cells = " | ".join(f"{table[(name, k)]['us_per_delta']:.2f}" if (name, k) in table
                           else "-" for k in concs)
        print(f"| {name} | {cells} |")
    cells = " | ".join(
        f"{statistics.median(v['server_us_per_delta'] for (n, c), v in table.items() if c == k):.1f}"
        for k in concs)
    print(f"| (server process, for context) | {cells} |")

    def ratio(a: str, b: str, k: int) -> str:
        if (a, k) not in table or (b, k) not in table:
            return "-"
        return f"{table[(a, k)]['us_per_delta'] / table[(b, k)]['us_per_delta']:.2f}x"

    print("\n| ratio | target | " + " | ".join(f"c={k}" for k in concs) + " |")
    print("|---|---|" + "---:|" * len(concs))
    rows = [
        ("fluxstream-httpx / raw-drain-httpx", "<= 1.5x", "fluxstream-httpx", "raw-drain-httpx"),
        ("fluxstream-aiohttp / raw-drain-aiohttp", "-", "fluxstream-aiohttp",
         "raw-drain-aiohttp"),
        ("fluxstream-aiohttp / openai", "<= 0.067x (1/15)", "fluxstream-aiohttp",
         "openai create() loop"),
        ("fluxstream-httpx / openai", "-", "fluxstream-httpx", "openai create() loop"),
        ("fluxstream-httpx / httpx-sse+json.loads", "-", "fluxstream-httpx",
         "httpx-sse+json.loads"),
        ("fluxstream-aiohttp / httpx-sse+json.loads", "-", "fluxstream-aiohttp",
         "httpx-sse+json.loads"),
    ]
    for label, target, a, b in rows:
        print(f"| {label} | {target} | " + " | ".join(ratio(a, b, k) for k in concs) + " |")
    if ("fluxstream-aiohttp", 1) in table:
        v = table[("fluxstream-aiohttp", 1)]["us_per_delta"]
        print(f"\nfluxstream-aiohttp at c=1: {v:.2f} us/delta (target < 15)")


async def profile_one(args: argparse.Namespace, server: ServerProcess,
                      plan: dict[int, tuple[int, int]]) -> None:
    """cProfile one round of one contender (client process only)."""
    contender = next(c for c in CONTENDERS if c.name == args.profile)
    concurrency = args.concurrency or 1
    streams, deltas = plan[concurrency]
    state, close = contender.make(server.base_url)
    try:
        await run_round(contender, state, server.base_url, concurrency, streams, deltas, server)
        prof = cProfile.Profile()
        prof.enable()
        r = await run_round(contender, state, server.base_url, concurrency, streams, deltas,
                            server)
        prof.disable()
    finally:
        await close()
    total = streams * deltas
    print(f"{contender.name} c={concurrency}: {r.cpu / total * 1e6:.2f} us/delta under cProfile "
          f"({total} deltas); per-delta tottime below = tottime / {total}")
    stats = pstats.Stats(prof).sort_stats(args.sort)
    stats.print_stats(args.lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small sizes, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--concurrency", type=int, nargs="*", default=None,
                        help="subset of 1 100 500")
    parser.add_argument("--only", nargs="*", default=None, help="contender names")
    parser.add_argument("--trio", action="store_true",
                        help="also run the httpx-based contenders under trio")
    parser.add_argument("--profile", default=None, help="cProfile one contender instead")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument(
        "--batch", type=int, default=0,
        help="server writes events in batches of N bytes (a fast server or buffering proxy)",
    )
    args = parser.parse_args()
    plan = dict(QUICK_PLAN if args.quick else FULL_PLAN)
    if args.concurrency and not args.profile:
        plan = {k: v for k, v in plan.items() if k in args.concurrency}
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    print(f"Python {platform.python_version()} {platform.machine()} ({os.cpu_count()} CPU), "
          f"httpx {httpx.__version__}, openai {openai.__version__}, "
          f"fluxstream {getattr(fluxstream, '__version__', '?')}; repeats {args.repeats}; "
          f"plan {plan}", flush=True)
    started = time.perf_counter()
    if args.batch:
        print(f"server writes in batches of >= {args.batch} bytes", flush=True)
    with ServerProcess(f"batch={args.batch}" if args.batch else None) as server:
        print(f"server: pid {server.proc.pid} at {server.base_url}", flush=True)
        if args.profile:
            args.concurrency = (args.concurrency or [1])[0]
            anyio.run(profile_one, args, server, plan, backend="asyncio")
            return
        table = anyio.run(bench, args, server, "asyncio", plan, backend="asyncio")
        report(table, plan, "asyncio")
        if args.trio:
            table = anyio.run(bench, args, server, "trio", plan, backend="trio")
            report(table, plan, "trio")
    print(f"\ntotal {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
