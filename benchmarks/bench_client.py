"""Benchmark client CPU per delta, time to first token and memory per open stream, end to end.

Run from the repository root::

    .venv/bin/python benchmarks/bench_client.py            # full run (~10 minutes)
    .venv/bin/python benchmarks/bench_client.py --quick    # smoke run (~1 minute)
    .venv/bin/python benchmarks/bench_client.py --options  # also the transport options
    .venv/bin/python benchmarks/bench_client.py --no-cpu --no-ttft --no-memory --split --repeats 5
    .venv/bin/python benchmarks/bench_client.py --no-cpu --no-ttft --no-memory --cold
    .venv/bin/python benchmarks/bench_client.py --no-cpu --no-ttft --no-memory --timeline
    .venv/bin/python benchmarks/bench_client.py --profile fluxstream --concurrency 500 --regime paced

Method (see benchmarks/README.md, "Client (end to end)" and "Transport"):

* The server is ``benchmarks/bench_server.py`` in a **separate process** on 127.0.0.1: the exact
  bytes of the embedded server (``fluxstream serve --profile openai``), written by a bare
  asyncio protocol in one of three regimes: ``paced`` (one HTTP chunk and one write per event,
  a fixed interval between two events of a stream: the client wakes up for every delta),
  ``packed`` (events packed in 64 KiB chunks) and ``chunk16k`` (one HTTP chunk per event, the
  bytes written 16 KiB at a time). Its CPU and wall time are reported next to every figure, to
  show that it is not the bottleneck.
* Contenders, each with its own client made once per concurrency level and warmed up (every
  connection opened, on each regime's URL just before its first timed round there) before
  timing: ``raw-aiohttp`` (``ClientSession.post`` +
  ``content.iter_any()``, bytes dropped: the floor), ``floor-parse`` and ``floor-bulk`` (not
  clients: the least a hand loop on aiohttp does to get the text out, the ``data:`` payloads
  decoded with msgspec one by one, or all of a read's in one call into structs; no SSE rules,
  no events, no reply: what parsing costs at the least), ``raw-httpx`` (``client.stream`` +
  ``aiter_bytes``), ``httpx-sse+json.loads``, ``openai`` (``AsyncOpenAI`` on its own default
  HTTP client, httpx2, pool raised to the same 1,000 kept-alive connections) and
  ``fluxstream`` (``fluxstream.AsyncClient(base_url, api_key)``: the default, nothing
  injected; one client per regime URL, each warmed on it, so no pool serves two regimes).
  ``--options`` adds the transports measured to choose the default client (httpx, httpx2).
* **Paired rounds**: each round runs every regime, and within a regime every contender one
  after another (the order rotates between rounds), on the same server, so the ratios of one
  round compare runs seconds apart; the tables show medians over rounds of the CPU per delta
  and of the per-round ratios.
* Time is the **client process's CPU** (``time.process_time``) around a round, divided by the
  content deltas received. Every stream's text is checked against the server's deterministic
  reply and the raw drains' byte counts against each other, so nobody measures an error path.
* Time to first token: a burst of 100 requests at once on a warm client (first delta from
  each request's start), and at c=1 fluxstream against the raw transport's first body byte,
  request by request, interleaved.
* Memory: for each client a **subprocess** opens N streams (500, 2,000) that the server holds
  open after their first events, waits for every first token, and reports the growth of its
  RSS divided by N.
* Targets: a last table puts the issue's targets side by side (first token at c=1 against
  the raw first byte, CPU per delta at c=100 packed and paced against the raw drain, first
  token in a burst and CPU per delta against openai-python, memory per open stream against
  raw httpx): the median of the paired rounds' ratios, their spread (min-max), the server's
  CPU / wall meanwhile, and met or not. A target whose runs were skipped says "not
  measured". The c=1 rounds are blocks of 25 interleaved requests of each.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout first

import aiohttp
import anyio
import httpx
import httpx_sse
import msgspec
import openai

import fluxstream
from fluxstream import TextDelta
from fluxstream.server import expected_reply

try:
    import httpx2
except ImportError:  # pragma: no cover - optional
    httpx2 = None  # type: ignore[assignment]
try:
    from httpx_aiohttp import HttpxAiohttpClient
except ImportError:  # pragma: no cover - optional
    HttpxAiohttpClient = None  # type: ignore[assignment,misc]

#: The embedded server answers as long as ``max_tokens`` asks under ``fill-max-tokens`` (its
#: answer alone is 30 deltas): the model name carries the profile to every contender's request.
MODEL = "fluxstream-echo@fill-max-tokens"
MESSAGES = [{"role": "user", "content": "benchmark the client end to end"}]
API_KEY = "bench-key"
POOL = 2100  # connections, all kept alive: nobody pays for reconnects between rounds
LIMITS = httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL)
TIMEOUT = httpx.Timeout(60.0)
RUN_TIMEOUT = 300.0  # one round, seconds: every loop here is bounded
HERE = Path(__file__).resolve().parent

REGIMES = ("paced", "packed", "chunk16k")
#: concurrency -> (streams per round, content deltas per stream, pace in ms for ``paced``).
#: At c=1 the streams run one after another; the pace keeps the server's total rate at
#: 1,000-4,000 events/s, which every contender can follow.
FULL_PLAN = {1: (2, 1000, 1.0), 100: (100, 100, 25.0), 500: (500, 40, 125.0)}
QUICK_PLAN = {1: (1, 300, 1.0), 100: (100, 20, 25.0)}
BURST = 100  # requests in the time-to-first-token burst
BURST_DELTAS = 50
BURST_PACE_MS = 20.0


def mode_path(regime: str, pace_ms: float) -> str:
    return f"paced-{pace_ms:g}" if regime == "paced" else regime


# --------------------------------------------------------------------------------- the server


class ServerProcess:
    """``benchmarks/bench_server.py`` on a free loopback port, in its own process."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[str] | None = None

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/v1"

    def __enter__(self) -> ServerProcess:
        cmd = [sys.executable, str(HERE / "bench_server.py"), "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
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
# A contender: make() -> (state, close); one(state, base_url, deltas, first) -> result, where
# ``first`` (or None) is called once at the first token (first body bytes for raw drains), and
# result is the stream's text, or ("raw", nbytes, tail) for raw drains.


def _body(deltas: int) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": MESSAGES, "max_tokens": deltas, "stream": True,
         "stream_options": {"include_usage": True}},
        separators=(",", ":"),
    ).encode()


_HEADERS = {"content-type": "application/json", "accept": "text/event-stream",
            "authorization": f"Bearer {API_KEY}"}


async def raw_httpx(client: Any, base_url: str, deltas: int, first: Any) -> Any:
    nbytes = 0
    prev = last = b""
    async with client.stream("POST", f"{base_url}/chat/completions", content=_body(deltas),
                             headers=_HEADERS) as response:
        if response.status_code != 200:
            raise RuntimeError(f"status {response.status_code}")
        async for chunk in response.aiter_bytes():
            if first is not None:
                first()
                first = None
            nbytes += len(chunk)
            prev, last = last, chunk
    return ("raw", nbytes, (prev + last)[-64:])


async def raw_aiohttp(session: Any, base_url: str, deltas: int, first: Any) -> Any:
    nbytes = 0
    prev = last = b""
    async with session.post(f"{base_url}/chat/completions", data=_body(deltas),
                            headers=_HEADERS) as response:
        if response.status != 200:
            raise RuntimeError(f"status {response.status}")
        async for chunk in response.content.iter_any():
            if first is not None:
                first()
                first = None
            nbytes += len(chunk)
            prev, last = last, chunk
    return ("raw", nbytes, (prev + last)[-64:])


class _FloorDelta(msgspec.Struct):
    content: str | None = None


class _FloorChoice(msgspec.Struct):
    delta: _FloorDelta | None = None


class _FloorChunk(msgspec.Struct):
    choices: list[_FloorChoice] = []


_FLOOR_DICTS = msgspec.json.Decoder()
_FLOOR_BULK = msgspec.json.Decoder(list[_FloorChunk])


async def floor_parse(session: Any, base_url: str, deltas: int, first: Any) -> Any:
    """Not a client: the least a hand loop on aiohttp does to get the text out. Blocks cut at
    blank lines, ``data: `` lines decoded one by one with msgspec, ``choices[0].delta.content``
    kept; no SSE rules (CR line ends, multi-line data, ids, limits), no typed events, no
    reply, no outcome. What parsing costs at the least, one event at a time."""
    parts: list[str] = []
    rest = b""
    async with session.post(f"{base_url}/chat/completions", data=_body(deltas),
                            headers=_HEADERS) as response:
        if response.status != 200:
            raise RuntimeError(f"status {response.status}")
        async for chunk in response.content.iter_any():
            blocks = (rest + chunk).split(b"\n\n")
            rest = blocks.pop()
            for block in blocks:
                for line in block.split(b"\n"):
                    if line[:6] == b"data: " and line != b"data: [DONE]":
                        choices = _FLOOR_DICTS.decode(line[6:]).get("choices")
                        if choices:
                            content = choices[0]["delta"].get("content")
                            if content:
                                if first is not None:
                                    first()
                                    first = None
                                parts.append(content)
    return "".join(parts)


async def floor_bulk(session: Any, base_url: str, deltas: int, first: Any) -> Any:
    """Not a client either: :func:`floor_parse` with every ``data:`` payload of a read decoded
    in **one** msgspec call, straight into structs of the three fields it keeps. The least any
    JSON-decoding reader can cost on top of the raw drain; no Python runs per event but the
    list comprehension and the text append."""
    parts: list[str] = []
    rest = b""
    async with session.post(f"{base_url}/chat/completions", data=_body(deltas),
                            headers=_HEADERS) as response:
        if response.status != 200:
            raise RuntimeError(f"status {response.status}")
        async for chunk in response.content.iter_any():
            blocks = (rest + chunk).split(b"\n\n")
            rest = blocks.pop()
            payloads = [b.partition(b"data: ")[2] for b in blocks if b"data: {" in b]
            if not payloads:
                continue
            for obj in _FLOOR_BULK.decode(b"[" + b",".join(payloads) + b"]"):
                if obj.choices:
                    delta = obj.choices[0].delta
                    if delta is not None and delta.content:
                        if first is not None:
                            first()
                            first = None
                        parts.append(delta.content)
    return "".join(parts)


async def httpx_sse_loop(client: Any, base_url: str, deltas: int, first: Any) -> Any:
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
                    if first is not None:
                        first()
                        first = None
                    parts.append(content)
    return "".join(parts)


async def openai_loop(client: Any, base_url: str, deltas: int, first: Any) -> Any:
    parts: list[str] = []
    per_url = client["by_url"]
    api = per_url.get(base_url)
    if api is None:  # one SDK client per regime URL, sharing the HTTP client
        api = per_url[base_url] = client["base"].with_options(base_url=base_url)
    stream = await api.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=deltas, stream=True,
        stream_options={"include_usage": True},
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices:
                content = chunk.choices[0].delta.content
                if content:
                    if first is not None:
                        first()
                        first = None
                    parts.append(content)
    return "".join(parts)


class ClientPerURL:
    """The fluxstream contenders' state: one ``AsyncClient`` per base URL.

    The server's first path segment names the regime, so each regime is a different base URL,
    and an ``AsyncClient`` keeps the ``base_url`` it was made with (it builds every request's
    URL from the one it parsed then: assigning ``client.base_url`` moves nothing). The clients
    are made on a URL's first use, which is a warm-up round (``bench`` warms every contender
    on a regime's URL before timing it there), so no timed round makes a client or opens its
    connections.
    """

    def __init__(self, make: Callable[[str], Any]) -> None:
        self.make = make
        self.clients: dict[str, Any] = {}

    def at(self, base_url: str) -> Any:
        client = self.clients.get(base_url)
        if client is None:
            client = self.clients[base_url] = self.make(base_url)
        return client

    async def aclose(self) -> None:
        for client in self.clients.values():
            await client.aclose()


async def fluxstream_loop(state: ClientPerURL, base_url: str, deltas: int, first: Any) -> Any:
    parts: list[str] = []
    client = state.at(base_url)
    async with client.chat.stream(model=MODEL, messages=MESSAGES, max_tokens=deltas) as s:
        async for event in s:
            if type(event) is TextDelta:
                if first is not None:
                    first()
                    first = None
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
    make: Callable[[], tuple[Any, Callable[[], Awaitable[None]]]]
    one: Callable[[Any, str, int, Any], Awaitable[Any]]
    note: str = ""


def _closing(client: Any) -> tuple[Any, Any]:
    return client, client.aclose


def _make_raw_aiohttp() -> tuple[Any, Any]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL))
    return session, session.close


def _make_openai() -> tuple[Any, Any]:
    http = openai.DefaultAsyncHttpxClient(
        limits=openai.DEFAULT_CONNECTION_LIMITS.__class__(
            max_connections=POOL, max_keepalive_connections=POOL))
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key=API_KEY, max_retries=0,
                                http_client=http)

    async def close() -> None:
        await client.close()

    return {"base": client, "by_url": {}}, close


def _make_fluxstream(**kwargs: Any) -> Callable[[], tuple[Any, Any]]:
    """Clients that fluxstream makes its HTTP client for: one pool per regime URL."""

    def make() -> tuple[Any, Any]:
        clients = ClientPerURL(
            lambda url: fluxstream.AsyncClient(url, API_KEY, limits=LIMITS, **kwargs))
        return clients, clients.aclose

    return make


def _make_fluxstream_on(factory: Callable[[], Any]) -> Callable[[], tuple[Any, Any]]:
    """Clients on one injected HTTP client: every regime URL shares its pool."""

    def make() -> tuple[Any, Any]:
        http = factory()
        clients = ClientPerURL(lambda url: fluxstream.AsyncClient(url, API_KEY, http_client=http))

        async def close() -> None:
            await clients.aclose()
            await http.aclose()

        return clients, close

    return make


CONTENDERS = [
    Contender("raw-aiohttp", _make_raw_aiohttp, raw_aiohttp, "floor"),
    Contender("floor-parse", _make_raw_aiohttp, floor_parse, "not a client"),
    Contender("floor-bulk", _make_raw_aiohttp, floor_bulk, "not a client"),
    Contender("raw-httpx", lambda: _closing(httpx.AsyncClient(limits=LIMITS, timeout=TIMEOUT)),
              raw_httpx),
    Contender("httpx-sse+json.loads",
              lambda: _closing(httpx.AsyncClient(limits=LIMITS, timeout=TIMEOUT)),
              httpx_sse_loop),
    Contender("openai", _make_openai, openai_loop),
    Contender("fluxstream", _make_fluxstream(), fluxstream_loop, "default"),
]
OPTIONS = [
    Contender("fluxstream[httpx]", _make_fluxstream(transport="httpx"), fluxstream_loop),
    Contender("fluxstream[httpx-aiohttp]", _make_fluxstream_on(
        lambda: HttpxAiohttpClient(limits=LIMITS, timeout=TIMEOUT)), fluxstream_loop),
]
if httpx2 is not None:
    OPTIONS += [
        Contender("raw-httpx2", lambda: _closing(httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=POOL, max_keepalive_connections=POOL),
            timeout=60.0)), raw_httpx),
        Contender("fluxstream[httpx2]", _make_fluxstream_on(lambda: httpx2.AsyncClient(
            limits=httpx2.Limits(max_connections=POOL, max_keepalive_connections=POOL),
            timeout=60.0)), fluxstream_loop),
    ]
TRIO_CONTENDERS = ("raw-httpx", "fluxstream")


# --------------------------------------------------------------------------------- running


@dataclass
class Round:
    cpu: float
    wall: float
    server_cpu: float
    results: list[Any] = field(repr=False)


async def run_round(contender: Contender, state: Any, base_url: str, concurrency: int,
                    streams: int, deltas: int, server: ServerProcess) -> Round:
    results: list[Any] = []

    async def one() -> None:
        results.append(await contender.one(state, base_url, deltas, None))

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


def check(name: str, results: list[Any], streams: int, expected: str,
          raw: dict[Any, int], key: Any) -> None:
    if len(results) != streams:
        raise RuntimeError(f"{name}: {len(results)} of {streams} streams")
    for r in results:
        if isinstance(r, tuple):
            _, nbytes, tail = r
            if b"[DONE]" not in tail:
                raise RuntimeError(f"{name}: body did not end with [DONE]")
            if raw.setdefault(key, nbytes) != nbytes:
                raise RuntimeError(f"{name}: {nbytes} bytes, other raw drain {raw[key]}")
        elif r != expected:
            raise RuntimeError(f"{name}: text differs from the expected reply "
                               f"({len(r)} vs {len(expected)} chars)")


def expected_text(deltas: int) -> str:
    request = {"model": MODEL, "messages": MESSAGES, "max_tokens": deltas, "stream": True}
    return expected_reply(request, "openai").choices[0].text


Table = dict[tuple[str, int, str], list[Round]]


async def bench(args: argparse.Namespace, server: ServerProcess, contenders: list[Contender],
                plan: dict[int, tuple[int, int, float]], regimes: tuple[str, ...]) -> Table:
    table: Table = {}
    raw: dict[Any, int] = {}
    for concurrency, (streams, deltas, pace) in plan.items():
        expected = expected_text(deltas)
        states = {}
        warmed: set[tuple[str, str]] = set()
        try:
            for contender in contenders:
                states[contender.name] = contender.make()
                state = states[contender.name][0]
                warm = await run_round(contender, state, server.url("packed"), concurrency,
                                       streams, 2, server)
                check(contender.name, warm.results, streams, expected_text(2), {}, None)
                warmed.add((contender.name, server.url("packed")))
            for r in range(args.repeats):
                for regime in regimes:
                    url = server.url(mode_path(regime, pace))
                    shift = r % len(contenders)
                    order = contenders[shift:] + contenders[:shift]
                    if r % 2:
                        order.reverse()
                    for contender in order:
                        if (contender.name, url) not in warmed:
                            # a client per URL (ClientPerURL) is made and its connections opened
                            # here, untimed, like everyone's just before their first timed round
                            warm = await run_round(contender, states[contender.name][0], url,
                                                   concurrency, streams, 2, server)
                            check(contender.name, warm.results, streams, expected_text(2), {},
                                  None)
                            warmed.add((contender.name, url))
                        rnd = await run_round(contender, states[contender.name][0], url,
                                              concurrency, streams, deltas, server)
                        check(contender.name, rnd.results, streams, expected, raw,
                              (regime, concurrency))
                        rnd.results = []
                        table.setdefault((regime, concurrency, contender.name), []).append(rnd)
                    line = "  ".join(
                        f"{c.name} {table[(regime, concurrency, c.name)][-1].cpu / (streams * deltas) * 1e6:.0f}"
                        for c in contenders)
                    print(f"  round {r + 1} {regime:<8} c={concurrency:<3} us/delta: {line}",
                          flush=True)
        finally:
            for _, close in states.values():
                with anyio.move_on_after(20, shield=True):
                    await close()
    return table


def per_delta(rounds: list[Round], total: int) -> float:
    return statistics.median(r.cpu for r in rounds) / total * 1e6


def paired_ratio(table: Table, regime: str, k: int, a: str, b: str) -> float | None:
    if (regime, k, a) not in table or (regime, k, b) not in table:
        return None
    pairs = zip(table[(regime, k, a)], table[(regime, k, b)], strict=True)
    return statistics.median(x.cpu / y.cpu for x, y in pairs if y.cpu > 0)


def report(table: Table, plan: dict[int, tuple[int, int, float]], regimes: tuple[str, ...],
           names: list[str], backend: str) -> list[str]:
    """Print the tables; return the target lines that failed."""
    failed = []
    for regime in regimes:
        concs = [k for k in plan if any((regime, k, n) in table for n in names)]
        print(f"\n### {backend}, regime `{regime}`: client CPU per content delta (µs), "
              "median of paired rounds\n")
        head = " | ".join(
            f"c={k} ({plan[k][0]}x{plan[k][1]}"
            + (f", {plan[k][2]:g} ms" if regime == "paced" else "") + ")" for k in concs)
        print(f"| contender | {head} |")
        print("|---|" + "---:|" * len(concs))
        for name in names:
            cells = " | ".join(
                f"{per_delta(table[(regime, k, name)], plan[k][0] * plan[k][1]):.1f}"
                if (regime, k, name) in table else "-" for k in concs)
            print(f"| {name} | {cells} |")
        for label, fn in (
            ("server CPU per delta (µs)", lambda rs, t: statistics.median(
                r.server_cpu for r in rs) / t * 1e6),
            ("server CPU / wall (busiest contender)", None),
        ):
            cells = []
            for k in concs:
                total = plan[k][0] * plan[k][1]
                rows = [table[(regime, k, n)] for n in names if (regime, k, n) in table]
                if fn is not None:
                    cells.append(f"{statistics.median(fn(rs, total) for rs in rows):.1f}")
                else:
                    util = max(statistics.median(r.server_cpu / r.wall for r in rs)
                               for rs in rows)
                    cells.append(f"{util:.0%}")
            print(f"| ({label}) | " + " | ".join(cells) + " |")
        print("\n| ratio (median of per-round ratios) | target | "
              + " | ".join(f"c={k}" for k in concs) + " |")
        print("|---|---|" + "---:|" * len(concs))
        for a, b, target, limit_at in (
            ("fluxstream", "openai", "≤ 0.5x", set(concs)),
            ("fluxstream", "raw-aiohttp", "≤ 2x at c=100, 500", {100, 500}),
            ("floor-bulk", "raw-aiohttp", "- (the least any reader costs)", set()),
            ("floor-parse", "raw-aiohttp", "-", set()),
            ("fluxstream", "floor-bulk", "-", set()),
            ("fluxstream", "httpx-sse+json.loads", "-", set()),
            ("fluxstream", "raw-httpx", "-", set()),
            ("fluxstream[httpx]", "openai", "-", set()),
            ("fluxstream[httpx2]", "openai", "-", set()),
            ("fluxstream[httpx-aiohttp]", "raw-aiohttp", "-", set()),
        ):
            cells = []
            shown = False
            for k in concs:
                ratio = paired_ratio(table, regime, k, a, b)
                if ratio is None:
                    cells.append("-")
                    continue
                shown = True
                limit = 0.5 if b == "openai" else 2.0
                miss = k in limit_at and ratio > limit
                if miss:
                    failed.append(f"{regime} c={k}: {a} / {b} = {ratio:.2f}x ({target})")
                cells.append(f"**{ratio:.2f}x** (miss)" if miss else f"{ratio:.2f}x")
            if shown:
                print(f"| {a} / {b} | {target} | " + " | ".join(cells) + " |")
    return failed


# --------------------------------------------------------------------------------- targets


@dataclass
class Target:
    """One of the issue's targets, measured: the ratio of each paired round (fluxstream over
    what it is compared with), and the server's CPU share meanwhile."""

    what: str
    target: str
    limit: float
    ratios: list[float] = field(default_factory=list)
    server_share: float | None = None
    #: Which cell it is, when the row is the worst of several (``packed c=500``).
    where: str = ""

    def cells(self) -> tuple[str, str, str, str]:
        if not self.ratios:
            return "not measured", "-", "-", "-"
        med = statistics.median(self.ratios)
        spread = f"{min(self.ratios):.2f}-{max(self.ratios):.2f}x ({len(self.ratios)})"
        share = "-" if self.server_share is None else f"{self.server_share:.0%}"
        status = "met" if med <= self.limit else "**not met**"
        where = f" ({self.where})" if self.where else ""
        return f"{med:.2f}x{where}", spread, share, status


#: The targets' rows in the order the table shows them (their ratios come from the runs).
TARGET_ROWS = (
    ("ttft1", "first token at c=1: fluxstream / raw aiohttp first byte", "≤ 1.2x", 1.2),
    ("packed100", "packed c=100, CPU per delta: fluxstream / raw aiohttp drain", "≤ 3.0x", 3.0),
    ("paced100", "paced c=100, CPU per delta: fluxstream / raw aiohttp drain", "≤ 2x", 2.0),
    ("burst", f"first token in a burst of {BURST}: fluxstream / openai (median)", "≤ 1x", 1.0),
    ("openai", "CPU per delta: fluxstream / openai (worst regime and concurrency)", "≤ 0.5x",
     0.5),
    ("memory", "memory per open stream: fluxstream / raw httpx (worst size)", "≤ 1.2x", 1.2),
)


def new_targets() -> dict[str, Target]:
    return {key: Target(what, target, limit) for key, what, target, limit in TARGET_ROWS}


def print_targets(targets: dict[str, Target]) -> None:
    """The issue's targets side by side: the median of the paired rounds' ratios, their
    spread (min-max, and how many rounds), the server's CPU share meanwhile (CPU / wall of
    the server process: never the bottleneck while well under 100%), and the verdict."""
    print("\n### Targets (median of paired rounds; spread min-max (rounds); server CPU / wall)\n")
    print("| target | limit | result | spread | server CPU | status |")
    print("|---|---|---:|---:|---:|---|")
    for t in targets.values():
        result, spread, share, status = t.cells()
        print(f"| {t.what} | {t.target} | {result} | {spread} | {share} | {status} |")


def round_ratios(table: Table, regime: str, k: int, a: str, b: str) -> list[float]:
    """``a``'s CPU over ``b``'s, round by round (the rounds ran seconds apart)."""
    if (regime, k, a) not in table or (regime, k, b) not in table:
        return []
    pairs = zip(table[(regime, k, a)], table[(regime, k, b)], strict=True)
    return [x.cpu / y.cpu for x, y in pairs if y.cpu > 0]


def server_share(table: Table, regime: str, k: int, names: tuple[str, ...]) -> float | None:
    """The server's CPU / wall in the rounds of ``names`` (the busiest one's median)."""
    rows = [table[(regime, k, n)] for n in names if (regime, k, n) in table]
    if not rows:
        return None
    return max(statistics.median(r.server_cpu / r.wall for r in rs) for rs in rows)


def cpu_targets(table: Table, targets: dict[str, Target]) -> None:
    """The CPU rows of the targets, from the paired rounds of the CPU tables."""
    for key, regime in (("packed100", "packed"), ("paced100", "paced")):
        ratios = round_ratios(table, regime, 100, "fluxstream", "raw-aiohttp")
        if ratios:
            targets[key].ratios = ratios
            targets[key].server_share = server_share(
                table, regime, 100, ("fluxstream", "raw-aiohttp"))
    worst: tuple[float, str, int] | None = None
    for regime, k, name in table:
        if name != "fluxstream":
            continue
        ratios = round_ratios(table, regime, k, "fluxstream", "openai")
        if ratios and (worst is None or statistics.median(ratios) > worst[0]):
            worst = (statistics.median(ratios), regime, k)
    if worst is not None:
        _, regime, k = worst
        t = targets["openai"]
        t.ratios = round_ratios(table, regime, k, "fluxstream", "openai")
        t.server_share = server_share(table, regime, k, ("fluxstream", "openai"))
        t.where = f"{regime} c={k}"


# --------------------------------------------------------------------------------- first token


async def ttft_burst(contender: Contender, state: Any, base_url: str, n: int,
                     deltas: int = BURST_DELTAS) -> list[float]:
    """``n`` requests at once; seconds from each request's start to its first token."""
    times: list[float] = []

    async def one() -> None:
        t0 = time.perf_counter()
        seen: list[float] = []
        await contender.one(state, base_url, deltas,
                            lambda: seen.append(time.perf_counter() - t0))
        times.append(seen[0])

    with anyio.fail_after(RUN_TIMEOUT):
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
    return times


#: Requests of each contender in one paired round of the c=1 first-token comparison.
SINGLE_ROUND = 25


async def bench_ttft(args: argparse.Namespace, server: ServerProcess,
                     contenders: list[Contender], targets: dict[str, Target]) -> list[str]:
    failed = []
    names = ["fluxstream", "openai", "raw-aiohttp", "raw-httpx", "fluxstream[httpx]"]
    chosen = [c for c in contenders if c.name in names]
    url = server.url(f"burst-{BURST_PACE_MS:g}")
    states = {c.name: c.make() for c in chosen}
    med: dict[str, list[float]] = {c.name: [] for c in chosen}
    p90: dict[str, list[float]] = {c.name: [] for c in chosen}
    burst_share = 0.0
    try:
        for c in chosen:  # warm: every connection of the burst opened
            await ttft_burst(c, states[c.name][0], url, BURST)
        for r in range(args.repeats):
            order = chosen if r % 2 == 0 else chosen[::-1]
            for c in order:
                s0, w0 = server.cpu(), time.perf_counter()
                times = sorted(await ttft_burst(c, states[c.name][0], url, BURST))
                if c.name in ("fluxstream", "openai"):
                    burst_share = max(burst_share, (server.cpu() - s0) / (
                        time.perf_counter() - w0))
                med[c.name].append(statistics.median(times))
                p90[c.name].append(times[int(len(times) * 0.9) - 1])
        print(f"\n### Time to first token, a burst of {BURST} requests at once (warm clients; "
              f"server sends the first 3 events with the head, then one every "
              f"{BURST_PACE_MS:g} ms; {BURST_DELTAS} deltas per request), median of "
              f"{args.repeats} bursts\n")
        print("| contender | median TTFT (ms) | p90 TTFT (ms) |")
        print("|---|---:|---:|")
        for c in chosen:
            print(f"| {c.name} | {statistics.median(med[c.name]) * 1e3:.1f} | "
                  f"{statistics.median(p90[c.name]) * 1e3:.1f} |")
        if "openai" in med:
            f, o = statistics.median(med["fluxstream"]), statistics.median(med["openai"])
            verdict = "met" if f <= o else "MISS"
            print(f"\nfluxstream / openai median TTFT in the burst: {f / o:.2f}x "
                  f"(target ≤ 1x: {verdict})")
            if f > o:
                failed.append(f"TTFT burst: fluxstream {f * 1e3:.1f} ms > openai {o * 1e3:.1f} ms")
            if "fluxstream" in med:
                targets["burst"].ratios = [
                    x / y for x, y in zip(med["fluxstream"], med["openai"], strict=True)]
                targets["burst"].server_share = burst_share

        # c=1: fluxstream's first TextDelta vs the raw transport's first body byte, interleaved.
        pairs = [c for c in chosen if c.name in ("fluxstream", "raw-aiohttp")]
        single: dict[str, list[float]] = {c.name: [] for c in pairs}
        s0, w0 = server.cpu(), time.perf_counter()
        for i in range(args.single):
            for c in pairs if i % 2 == 0 else pairs[::-1]:
                # 2 deltas: the whole reply is in the server's first write
                single[c.name].extend(await ttft_burst(c, states[c.name][0], url, 1, 2))
        single_share = (server.cpu() - s0) / (time.perf_counter() - w0)
        if len(pairs) == 2:
            # Paired rounds: consecutive blocks of SINGLE_ROUND requests of each, the ratio
            # of their medians (the ratio of two single requests is mostly noise).
            flux, raw = single["fluxstream"], single["raw-aiohttp"]
            blocks = range(0, max(1, len(flux) - SINGLE_ROUND + 1), SINGLE_ROUND)
            targets["ttft1"].ratios = [
                statistics.median(flux[b:b + SINGLE_ROUND])
                / statistics.median(raw[b:b + SINGLE_ROUND]) for b in blocks]
            targets["ttft1"].server_share = single_share
            f = statistics.median(single["fluxstream"])
            a = statistics.median(single["raw-aiohttp"])
            verdict = "met" if f <= 1.2 * a else "MISS"
            print(f"\nc=1, {args.single} requests each, interleaved: fluxstream first TextDelta "
                  f"{f * 1e3:.3f} ms (median), raw aiohttp first body byte {a * 1e3:.3f} ms: "
                  f"{f / a:.2f}x (target ≤ 1.2x: {verdict})")
            if f > 1.2 * a:
                failed.append(f"TTFT c=1: {f / a:.2f}x the raw first byte")
    finally:
        for _, close in states.values():
            with anyio.move_on_after(20, shield=True):
                await close()
    return failed


# --------------------------------------------------------------------------------- split

SPLIT_CONTENDERS = ("raw-aiohttp", "floor-bulk", "fluxstream")
SPLIT_DELTAS = (2, 40, 100)


async def bench_split(args: argparse.Namespace, server: ServerProcess,
                      contenders: list[Contender]) -> None:
    """Client CPU per request and per delta, apart: the ``packed`` regime at c=100 and 500 with
    replies of 2, 40 and 100 deltas (paired rounds); the slope between 2 and 100 deltas is
    the cost of a delta, what is left at 2 deltas the cost of a request."""
    chosen = [c for c in contenders if c.name in SPLIT_CONTENDERS]
    url = server.url("packed")
    print(f"\n### Per request and per delta apart (`packed`, replies of "
          f"{', '.join(map(str, SPLIT_DELTAS))} deltas, median of {args.repeats} paired "
          "rounds), client CPU µs\n")
    print("| contender | c | per request, 2 deltas | 40 deltas | 100 deltas | per delta "
          "(slope) | per request (intercept) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for concurrency in (100, 500):
        states = {c.name: c.make() for c in chosen}
        cost: dict[tuple[str, int], list[float]] = {}
        try:
            for c in chosen:
                await run_round(c, states[c.name][0], url, concurrency, concurrency, 2, server)
            for r in range(args.repeats):
                for deltas in SPLIT_DELTAS:
                    for c in chosen if r % 2 == 0 else chosen[::-1]:
                        rnd = await run_round(c, states[c.name][0], url, concurrency,
                                              concurrency, deltas, server)
                        check(c.name, rnd.results, concurrency, expected_text(deltas), {}, None)
                        cost.setdefault((c.name, deltas), []).append(rnd.cpu / concurrency * 1e6)
        finally:
            for _, close in states.values():
                with anyio.move_on_after(20, shield=True):
                    await close()
        for c in chosen:
            per = [statistics.median(cost[(c.name, d)]) for d in SPLIT_DELTAS]
            slope = (per[-1] - per[0]) / (SPLIT_DELTAS[-1] - SPLIT_DELTAS[0])
            print(f"| {c.name} | {concurrency} | {per[0]:.0f} | {per[1]:.0f} | {per[2]:.0f} | "
                  f"{slope:.2f} | {per[0] - SPLIT_DELTAS[0] * slope:.0f} |")


# --------------------------------------------------------------------------------- cold


async def bench_cold(args: argparse.Namespace) -> None:
    """A fresh ``StreamParser`` fed the first read of a c=1 reply (the head events: ``id:``,
    ``retry:``, the role chunk and two deltas), back to back and after the process slept
    0.6 ms (about a request's round trip here) in ``time.sleep`` or in the event loop. No
    server runs meanwhile: what the wait alone does to the same Python work."""
    sys.path.insert(0, str(HERE))
    from bench_server import events_for

    from fluxstream._parser import StreamParser

    first = b"".join(events_for(_body(2))[:3])
    rows = []
    for label in ("back to back", "after time.sleep(0.6 ms)", "after asyncio.sleep(0.6 ms)"):
        times = []
        for _ in range(args.single * 4):
            if label.startswith("after time"):
                time.sleep(0.0006)  # noqa: ASYNC251 - the point: a wait outside the loop
            elif label.startswith("after asyncio"):
                await asyncio.sleep(0.0006)
            parser = StreamParser()
            t0 = time.perf_counter()
            events = parser.feed(first)
            times.append(time.perf_counter() - t0)
            if not any(type(e) is TextDelta for e in events):
                raise RuntimeError("the first read holds no TextDelta")
        rows.append((label, statistics.median(times) * 1e6, min(times) * 1e6))
    print(f"\n### The first read through a fresh parser ({len(first)} bytes), "
          f"{args.single * 4} times each, µs\n")
    print("| when | median | min |")
    print("|---|---:|---:|")
    for label, med, low in rows:
        print(f"| {label} | {med:.1f} | {low:.1f} |")


# --------------------------------------------------------------------------------- timeline


class _Marks:
    """First-time stamps of a request's phases, set by thin wrappers around aiohttp's
    ``ClientSession._request``, the socket transport's ``write`` and aiohttp's protocol
    ``data_received`` (the same wrappers for both contenders, installed only here)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}

    def install(self) -> Callable[[], None]:
        from asyncio import selector_events

        from aiohttp.client_proto import ResponseHandler

        at = self.at
        request, write = aiohttp.ClientSession._request, selector_events._SelectorSocketTransport.write
        received = ResponseHandler.data_received

        def _request(session: Any, *a: Any, **k: Any) -> Any:
            at.setdefault("aiohttp", time.perf_counter())
            return request(session, *a, **k)

        def _write(transport: Any, data: Any) -> None:
            at.setdefault("write", time.perf_counter())
            write(transport, data)

        def _received(protocol: Any, data: bytes) -> None:
            at.setdefault("received", time.perf_counter())
            received(protocol, data)

        aiohttp.ClientSession._request = _request  # type: ignore[method-assign]
        selector_events._SelectorSocketTransport.write = _write  # type: ignore[method-assign]
        ResponseHandler.data_received = _received  # type: ignore[method-assign]

        def restore() -> None:
            aiohttp.ClientSession._request = request  # type: ignore[method-assign]
            selector_events._SelectorSocketTransport.write = write  # type: ignore[method-assign]
            ResponseHandler.data_received = received  # type: ignore[method-assign]

        return restore


async def bench_timeline(args: argparse.Namespace, server: ServerProcess) -> None:
    """Where the c=1 first token's time goes: for raw aiohttp and fluxstream, interleaved
    request by request (2-delta replies, the whole reply in the server's first write), the
    median time from the request's start to aiohttp's ``_request`` (what the client does
    before aiohttp), to the request's first socket write, to the first bytes received and to
    the first token (raw: the first body bytes; fluxstream: the first ``TextDelta``). Then
    what running first after a wake-up costs: after each raw request (the process woke from
    ``epoll`` for its last read), ``client.chat.stream(...)`` is built three times in a row
    (nothing sent) and each build timed: the same Python work, first and then warm."""
    url = server.url(f"burst-{BURST_PACE_MS:g}")
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL))
    client = fluxstream.AsyncClient(url, API_KEY, limits=LIMITS)
    marks = _Marks()
    restore = marks.install()
    phases = ("aiohttp", "write", "received")
    rows: dict[str, list[tuple[float, ...]]] = {"raw-aiohttp": [], "fluxstream": []}
    builds: list[tuple[float, float, float]] = []
    try:
        async def one(name: str, keep: bool) -> None:
            marks.at.clear()
            seen: list[float] = []
            t0 = time.perf_counter()
            first = lambda: seen.append(time.perf_counter())  # noqa: E731
            if name == "raw-aiohttp":
                await raw_aiohttp(session, url, 2, first)
            else:
                await fluxstream_loop(ClientPerURL(lambda _: client), url, 2, first)
            if keep:
                rows[name].append((*(marks.at[p] - t0 for p in phases), seen[0] - t0))

        async def cold_builds() -> None:
            stamps = [time.perf_counter()]
            made = []
            for _ in range(3):
                made.append(client.chat.stream(model=MODEL, messages=MESSAGES, max_tokens=2))
                stamps.append(time.perf_counter())
            for stream in made:
                await stream.aclose()
            builds.append((stamps[1] - stamps[0], stamps[2] - stamps[1], stamps[3] - stamps[2]))

        for _ in range(30):  # warm: connections open, lazy imports done
            await one("raw-aiohttp", False)
            await one("fluxstream", False)
        for i in range(args.single):
            for name in ("raw-aiohttp", "fluxstream") if i % 2 == 0 else (
                    "fluxstream", "raw-aiohttp"):
                await one(name, True)
            await one("raw-aiohttp", False)
            await cold_builds()
    finally:
        restore()
        await client.aclose()
        await session.close()
    print(f"\n### Where the c=1 first token goes ({args.single} requests each, interleaved; "
          "median µs from the request's start)\n")
    print("| contender | to aiohttp `_request` | to first write | to first bytes received | "
          "to first token | received → token |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, got in rows.items():
        cols = [statistics.median(r[k] for r in got) * 1e6 for k in range(4)]
        after = statistics.median((r[3] - r[2]) for r in got) * 1e6
        print(f"| {name} | {cols[0]:.0f} | {cols[1]:.0f} | {cols[2]:.0f} | {cols[3]:.0f} | "
              f"{after:.0f} |")
    med = [statistics.median(b[k] for b in builds) * 1e6 for k in range(3)]
    print(f"\n`client.chat.stream(...)` (nothing sent) right after a raw request's last read, "
          f"three in a row: {med[0]:.1f} / {med[1]:.1f} / {med[2]:.1f} µs (median of "
          f"{len(builds)})")


# --------------------------------------------------------------------------------- memory

MEMORY_CLIENTS = ("fluxstream", "openai", "raw-httpx", "raw-aiohttp")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def memory_child(name: str, n: int, base_url: str) -> dict[str, Any]:
    """In a subprocess: RSS growth while ``n`` streams are open (each past its first token)."""
    contender = next(c for c in CONTENDERS if c.name == name)
    state, close = contender.make()
    release = anyio.Event()
    firsts = 0
    all_first = anyio.Event()

    async def one() -> None:
        nonlocal firsts

        def first() -> None:
            nonlocal firsts
            firsts += 1
            if firsts == n:
                all_first.set()

        async def hold() -> None:
            await contender.one(state, base_url, 200, first)

        async with anyio.create_task_group() as tg:
            tg.start_soon(hold)
            await release.wait()
            tg.cancel_scope.cancel()

    try:
        # warm-up: one stream open and closed, so code paths and pools exist before measuring
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                n_saved = n
                n = 1
                tg.start_soon(one)
                await all_first.wait()
                release.set()
        n = n_saved
        firsts = 0
        all_first = anyio.Event()
        release = anyio.Event()
        gc.collect()
        before = _rss()
        with anyio.fail_after(RUN_TIMEOUT):
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(one)
                await all_first.wait()
                gc.collect()
                after = _rss()
                release.set()
    finally:
        with anyio.move_on_after(20, shield=True):
            await close()
    return {"name": name, "n": n, "before": before, "after": after,
            "per_stream": (after - before) / n}


def bench_memory(args: argparse.Namespace, server: ServerProcess,
                 targets: dict[str, Target]) -> list[str]:
    failed = []
    rows: dict[tuple[str, int], list[float]] = {}
    s0, w0 = server.cpu(), time.perf_counter()
    for rep in range(args.memory_repeats):
        for n in args.memory:
            clients = [c for c in MEMORY_CLIENTS if not args.only or c in args.only]
            names = clients if rep % 2 == 0 else clients[::-1]
            for name in names:
                cmd = [sys.executable, __file__, "--memory-child", name, str(n),
                       server.url("hold")]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
                if out.returncode != 0:
                    raise RuntimeError(f"memory child {name} {n}: {out.stderr[-2000:]}")
                result = json.loads(out.stdout.strip().splitlines()[-1])
                rows.setdefault((name, n), []).append(result["per_stream"])
    print(f"\n### Memory per open stream (RSS growth / streams, one subprocess per client and "
          f"size, median of {args.memory_repeats}), KiB\n")
    print("| client | " + " | ".join(f"{n} streams" for n in args.memory) + " |")
    print("|---|" + "---:|" * len(args.memory))
    for name in [c for c in MEMORY_CLIENTS if (c, args.memory[0]) in rows]:
        print(f"| {name} | " + " | ".join(
            f"{statistics.median(rows[(name, n)]) / 1024:.1f}" for n in args.memory) + " |")
    cells = []
    for n in args.memory:
        ratio = statistics.median(rows[("fluxstream", n)]) / statistics.median(
            rows[("raw-httpx", n)])
        cells.append(f"{ratio:.2f}x")
        if ratio > 1.2:
            failed.append(f"memory at {n}: fluxstream {ratio:.2f}x raw httpx")
    print("| fluxstream / raw-httpx (target ≤ 1.2x) | " + " | ".join(cells) + " |")
    worst = max(args.memory, key=lambda n: statistics.median(rows[("fluxstream", n)])
                / statistics.median(rows[("raw-httpx", n)]))
    t = targets["memory"]
    t.ratios = [x / y for x, y in zip(rows[("fluxstream", worst)], rows[("raw-httpx", worst)],
                                      strict=True)]
    t.server_share = (server.cpu() - s0) / (time.perf_counter() - w0)
    t.where = f"{worst} streams"
    for name, under in (("fluxstream", "raw-aiohttp"), ("openai", "raw-httpx")):
        if (name, args.memory[0]) in rows and (under, args.memory[0]) in rows:
            cells = [f"{statistics.median(rows[(name, n)]) / statistics.median(rows[(under, n)]):.2f}x"
                     for n in args.memory]
            print(f"| {name} / {under} | " + " | ".join(cells) + " |")
    return failed


# --------------------------------------------------------------------------------- profile


async def profile_one(args: argparse.Namespace, server: ServerProcess,
                      plan: dict[int, tuple[int, int, float]]) -> None:
    """cProfile one round of one contender (client process only)."""
    contender = next(c for c in CONTENDERS + OPTIONS if c.name == args.profile)
    concurrency = args.concurrency[0] if args.concurrency else 1
    streams, deltas, pace = plan[concurrency]
    url = server.url(mode_path(args.regime, pace))
    state, close = contender.make()
    try:
        await run_round(contender, state, url, concurrency, streams, 2, server)
        prof = cProfile.Profile()
        prof.enable()
        r = await run_round(contender, state, url, concurrency, streams, deltas, server)
        prof.disable()
    finally:
        await close()
    total = streams * deltas
    print(f"{contender.name} {args.regime} c={concurrency}: {r.cpu / total * 1e6:.2f} us/delta "
          f"under cProfile ({total} deltas, wall {r.wall:.2f} s, server CPU "
          f"{r.server_cpu:.2f} s)")
    stats = pstats.Stats(prof)
    stats.sort_stats(args.sort).print_stats(args.lines)
    print("Where the transport's time goes (cumulative, selected):")
    stats.sort_stats("cumulative").print_stats(
        r"connection_pool|_backends/anyio|_backends/_asyncio.py.*(__enter__|__exit__)|"
        r"http11.py.*(_receive|is_idle|has_expired)|is_socket_readable|aiter_bytes|"
        r"_aiohttp|client_proto|streams.py|events.py.*__init__|_run_once", 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: c=1 and 100, small sizes, 1 round, 500-stream memory")
    parser.add_argument("--repeats", type=int, default=None, help="paired rounds (default 3)")
    parser.add_argument("--concurrency", type=int, nargs="*", default=None,
                        help="subset of 1 100 500")
    parser.add_argument("--regimes", nargs="*", default=list(REGIMES), choices=REGIMES)
    parser.add_argument("--only", nargs="*", default=None, help="contender names")
    parser.add_argument("--options", action="store_true",
                        help="also the transport options (httpx, httpx2, httpx-aiohttp)")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU tables")
    parser.add_argument("--no-ttft", action="store_true", help="skip time to first token")
    parser.add_argument("--no-memory", action="store_true", help="skip memory per stream")
    parser.add_argument("--memory", type=int, nargs="*", default=None,
                        help="open streams for the memory figures (default 500 2000)")
    parser.add_argument("--memory-repeats", type=int, default=None)
    parser.add_argument("--single", type=int, default=None,
                        help="requests per client for the c=1 first-token comparison")
    parser.add_argument("--trio", action="store_true",
                        help="also raw-httpx and fluxstream on trio (paced, c=1 and 100)")
    parser.add_argument("--split", action="store_true",
                        help="also the cost per request and per delta apart (packed, c=100/500)")
    parser.add_argument("--timeline", action="store_true",
                        help="where the c=1 first token's time goes, raw aiohttp vs fluxstream")
    parser.add_argument("--cold", action="store_true",
                        help="also the first read's parse back to back and after a 0.6 ms wait")
    parser.add_argument("--profile", default=None, help="cProfile one contender instead")
    parser.add_argument("--regime", default="paced", choices=REGIMES, help="for --profile")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--memory-child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.memory_child:
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000), hard))
        name, n, url = args.memory_child
        print(json.dumps(anyio.run(memory_child, name, int(n), url, backend="asyncio")))
        return

    plan = dict(QUICK_PLAN if args.quick else FULL_PLAN)
    if args.concurrency and not args.profile:
        plan = {k: v for k, v in plan.items() if k in args.concurrency}
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.memory is None:
        args.memory = [500] if args.quick else [500, 2000]
    if args.memory_repeats is None:
        args.memory_repeats = 1 if args.quick else 2
    if args.single is None:
        args.single = 30 if args.quick else 150
    contenders = CONTENDERS + (OPTIONS if args.options else [])
    if args.only:
        contenders = [c for c in contenders if c.name in args.only]
    load = os.getloadavg()
    print(f"Python {platform.python_version()} {platform.machine()} ({os.cpu_count()} CPU), "
          f"httpx {httpx.__version__}, aiohttp {aiohttp.__version__}, openai {openai.__version__}"
          f" (httpx2 {getattr(httpx2, '__version__', '-')}), fluxstream "
          f"{getattr(fluxstream, '__version__', '?')}; {args.repeats} paired rounds; plan "
          f"{plan}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    started = time.perf_counter()
    random.seed(0)
    failed: list[str] = []
    targets = new_targets()
    with ServerProcess() as server:
        print(f"server: pid {server.proc.pid} on port {server.port}", flush=True)
        if args.profile:
            full = dict(FULL_PLAN)
            anyio.run(profile_one, args, server, full, backend="asyncio")
            return
        if not args.no_cpu:
            regimes = tuple(args.regimes)
            table = anyio.run(bench, args, server, contenders, plan, regimes, backend="asyncio")
            failed += report(table, plan, regimes, [c.name for c in contenders], "asyncio")
            cpu_targets(table, targets)
        if args.trio:
            trio_plan = {k: v for k, v in plan.items() if k in (1, 100)}
            chosen = [c for c in contenders if c.name in TRIO_CONTENDERS]
            table = anyio.run(bench, args, server, chosen, trio_plan, ("paced",),
                              backend="trio")
            report(table, trio_plan, ("paced",), [c.name for c in chosen], "trio")
        if args.split:
            anyio.run(bench_split, args, server, contenders, backend="asyncio")
        if args.cold:
            anyio.run(bench_cold, args, backend="asyncio")
        if args.timeline:
            anyio.run(bench_timeline, args, server, backend="asyncio")
        if not args.no_ttft:
            failed += anyio.run(bench_ttft, args, server, contenders, targets,
                                backend="asyncio")
        if not args.no_memory:
            failed += bench_memory(args, server, targets)
    print_targets(targets)
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"total {time.perf_counter() - started:.1f} s")
    print("targets missed: " + ("; ".join(failed) if failed else "none"))


if __name__ == "__main__":
    main()
