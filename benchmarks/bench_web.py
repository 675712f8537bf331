"""Pages following replies through one web worker: ``fluxstream.web`` against sse-starlette.

One **worker** process (uvicorn, started and ended by pid) holds ``--replies`` replies in a
:class:`~fluxstream.relay.MemoryReplyLog`, written by producer tasks in the worker. By default
(``--source synthetic``) each appends one text delta per entry at ``--rate`` deltas/s, so
both contenders get the same events in the same entries whatever the load;
``--source server`` drains ``log.record(client.chat.stream(...))`` from a paced upstream
(``bench_server.py``'s ``paced-<ms>`` regime in a process of its own), the recipe's own
path, whose producer merges deltas when it is starved. ``--pages`` pages per reply follow
each reply over HTTP, through one of two contenders, the same events from the same log:

* ``fluxstream``: ``EventStreamResponse.follow(log, key)``;
* ``sse-starlette``: ``EventSourceResponse`` (ping on, its default 15 s, and a 30 s send
  timeout like fluxstream's) over an async generator written by hand, as a team would: each
  event of ``log.follow(key)`` as ``{"id", "event", "data": json.dumps(asdict(event))}``
  (``--hand to_json``: ``pydantic_core.to_json(event)``, the leanest a team would write).

The pages are this process (the benchmark itself): an ``asyncio.Protocol`` per connection
that counts bytes and reads each text event's ``offset`` with a regular expression, nothing
else (no SSE decoder, no JSON), so its cost per delta stays far below the pace; its CPU share
is printed to show it. A run: start a worker, create the replies (the keys exist, nothing
flows), open every page and wait for every response's head, then ``/go`` starts the
producers; the run ends when every page has read the ``end`` event (or ``--timeout``).

* **CPU per delta delivered**: the worker's user+system time (``/proc/<pid>/stat``) from
  ``/go`` to the last page's ``end``, over the text deltas the pages received. A ``bare`` run
  (the producers alone, no page) gives the producers' own cost; ``net`` subtracts it.
* **Added latency**: a page's ``time.monotonic()`` when a read brought a delta, minus the
  worker's when that delta's entry was appended to the log (one clock for every process on
  Linux); p50/p99 over every delta of every page.
* **Exact**: every page got every delta the producer wrote, once (checked, not assumed).

Rounds interleave the contenders (order alternating), each run in a fresh worker; medians
over rounds, and the ratio fluxstream / sse-starlette. ``--lockstep`` calls both responses
as ASGI apps in this process (no server, no client), each delta appended once every page has
the one before, so the work per delta does not depend on the load; ``--instructions``
counts it under cachegrind.

    python benchmarks/bench_web.py --pages 1,5,10 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # this checkout's fluxstream

from bench_relay import spawn, wait_port  # noqa: E402 - benchmarks/ is the script's dir
from bench_relay_follow import cpu_of, free_port, stop  # noqa: E402

CONTENDERS = ("fluxstream", "sse-starlette")
#: The text of every synthetic delta (a token of English is about four characters).
TEXT = "tok "
OFFSET = re.compile(rb'"offset": ?(\d+)')


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


# ---------------------------------------------------------------------------- the worker


def worker_app(source: str, upstream: str, tokens: int, rate: float, profile: str | None) -> Any:
    """The worker's Starlette app: ``POST /prepare`` (create the replies), ``POST /go`` (start
    the producers), ``GET /stats`` (what was appended when), and the two contenders'
    ``GET /fluxstream/{key}`` and ``GET /sse-starlette/{key}``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    import fluxstream
    from fluxstream import End, Finish, Outcome, TextDelta
    from fluxstream.relay import MemoryReplyLog
    from fluxstream.relay.codec import Entry, end_record
    from fluxstream.web import EventStreamResponse

    # A long lease: on this shared machine a worker's loop may be starved for seconds, and
    # its followers would then end the replies ``producer lost``; the cost is measured here.
    log = MemoryReplyLog(lease=60.0)
    appended: dict[str, list[tuple[int, float]]] = {}
    state: dict[str, Any] = {"producers": [], "tasks": [], "done": 0, "errors": 0}
    profiler: Any = None
    if source == "server":
        append = log._append

        async def timed_append(key: str, owner: str, entry: Any, **kw: Any) -> bool:
            """The producer's write of each delta, timed (one clock read per entry)."""
            now = time.monotonic()
            got = appended.setdefault(key, [])
            for event in entry.events:
                if event.type == "text":
                    got.append((event.offset, now))
            return await append(key, owner, entry, **kw)

        log._append = timed_append  # type: ignore[method-assign]

    async def prepare(request: Request) -> JSONResponse:
        replies = int(request.query_params["replies"])
        keys = [f"reply-{i}" for i in range(replies)]
        if source == "server":
            client = fluxstream.AsyncClient(upstream)
            body = {"model": "m", "messages": [{"role": "user", "content": "bench"}],
                    "max_tokens": tokens}
            for key in keys:
                recorded = log.record(client.chat.stream(content_key=key, **body),
                                      only_consumer=True)
                await recorded.start()  # the key exists: pages may follow it
                state["producers"].append(functools.partial(drain, recorded))
        else:
            for n, key in enumerate(keys):
                owner = f"bench-{n}"
                await log._create(key, owner, {})
                # Each reply at its own phase of the pace, evenly spread (no random draw).
                state["producers"].append(functools.partial(
                    synthetic, key, owner, n / replies / rate))
        return JSONResponse({"keys": keys})

    async def drain(recorded: Any) -> None:
        async with recorded:
            async for _ in recorded:
                pass
        state["errors"] += recorded.log_error is not None
        state["done"] += 1

    async def synthetic(key: str, owner: str, phase: float) -> None:
        """``tokens`` text deltas, one entry each, at ``rate`` per second from ``go``: the
        same events in the same entries for every contender, whatever the load (a late
        producer catches up one entry at a time). Then the finish and the end."""
        start = state["t0"] + phase
        got = appended[key] = []
        for n in range(tokens):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            offset = n * len(TEXT)
            got.append((offset, time.monotonic()))
            await log._append(key, owner, Entry(n + 1, (TextDelta(key, 0, offset, TEXT),)),
                              token=None, final=False)
        await log._append(
            key, owner,
            Entry(tokens + 1, (Finish(key, 0, "stop"), End(Outcome.DONE, "stop")),
                  end_record(Outcome.DONE, "stop", None, None)),
            token=None, final=True)
        state["done"] += 1

    async def go(request: Request) -> JSONResponse:
        nonlocal profiler
        gc.collect()
        if profile:
            import cProfile

            profiler = cProfile.Profile(time.process_time)
            profiler.enable()
        loop = asyncio.get_running_loop()
        state["t0"] = time.monotonic()
        state["tasks"] = [loop.create_task(producer()) for producer in state["producers"]]
        return JSONResponse({"started": len(state["tasks"])})

    async def stats(request: Request) -> JSONResponse:
        done = state["done"] == len(state["producers"])
        if done and profiler is not None and request.query_params.get("final"):
            profiler.disable()
            profiler.dump_stats(profile)
        return JSONResponse({
            "done": done, "errors": state["errors"],
            "appended": appended if request.query_params.get("final") else None,
        })

    async def with_fluxstream(request: Request) -> Any:
        return EventStreamResponse.follow(log, request.path_params["key"])

    async def with_sse_starlette(request: Request) -> Any:
        return by_hand(log, request.path_params["key"], request.headers.get("last-event-id"))

    return Starlette(routes=[
        Route("/prepare", prepare, methods=["POST"]),
        Route("/go", go, methods=["POST"]),
        Route("/stats", stats),
        Route("/fluxstream/{key}", with_fluxstream),
        Route("/sse-starlette/{key}", with_sse_starlette),
    ])


def by_hand(log: Any, key: str, last_event_id: str | None) -> Any:
    """The sse-starlette contender: what a team writes by hand around ``log.follow``."""
    from sse_starlette import EventSourceResponse

    encode = HAND_ENCODERS[HAND[0]]

    async def events() -> Any:
        async for item in log.follow(key, last_event_id=last_event_id):
            event = item.event
            yield {"id": str(item.position), "event": event.type, "data": encode(event)}

    return EventSourceResponse(events(), ping=15, send_timeout=30)


def pydantic_dict(value: Any) -> Any:
    """What ``json.dumps`` is told for the pydantic models inside events (a usage event's
    ``usage``), as a hand-written endpoint does once it meets one."""
    return value.model_dump(mode="json")


def _lean(event: Any) -> str:
    from pydantic_core import to_json

    return to_json(event).decode()


#: How the hand-written contender makes an event's ``data`` (``--hand``): ``asdict`` is what
#: most code does; ``to_json`` the leanest a team would find (pydantic-core, as fluxstream).
HAND_ENCODERS: dict[str, Any] = {
    "asdict": lambda event: json.dumps(dataclasses.asdict(event), default=pydantic_dict),
    "to_json": _lean,
}
HAND = ["asdict"]


def run_worker(args: argparse.Namespace) -> None:
    import uvicorn

    if args.worker_log:
        with open(args.worker_log, "ab") as log:
            os.dup2(log.fileno(), 2)

    app = worker_app(args.source, args.upstream, args.tokens, args.rate, args.profile)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning",
                            lifespan="off", backlog=4096, loop="asyncio", access_log=False)
    uvicorn.Server(config).run()


# ---------------------------------------------------------------------------- the pages


class Page(asyncio.Protocol):
    """One browser's connection: the response's head, then its bytes counted and each text
    delta's offset noted with the time of the read that completed it."""

    def __init__(self, path: str) -> None:
        self.request = f"GET {path} HTTP/1.0\r\nhost: bench\r\naccept: text/event-stream\r\n\r\n"
        self.head: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.buf = b""
        self.in_body = False
        self.bytes = 0
        self.received: list[tuple[int, float]] = []
        self.ended = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.request.encode())

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.bytes += len(data)
        buf = self.buf + data
        if not self.in_body:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            status = int(buf.split(b" ", 2)[1])
            self.in_body = True
            if not self.head.done():
                self.head.set_result(status)
            buf = buf[end + 4:]
        # Complete events only: up to the last blank line (LF or CRLF line ends).
        cut = max(buf.rfind(b"\n\n"), buf.rfind(b"\n\r\n"))
        if cut < 0:
            self.buf = buf
            return
        complete, self.buf = buf[:cut], buf[cut:]
        got = self.received
        for match in OFFSET.finditer(complete):
            got.append((int(match.group(1)), now))
        if b"event: end" in complete:
            self.ended = True
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_result(0)
        if not self.closed.done():
            self.closed.set_result(None)


def http(port: int, method: str, path: str, timeout: float = 60.0) -> Any:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


async def run_once(args: argparse.Namespace, contender: str, pages_per_reply: int,
                   upstream: str, upstream_pid: int | None) -> dict[str, Any]:
    """One run in a fresh worker: ``contender`` (or ``bare``: the producers, no page)."""
    loop = asyncio.get_running_loop()
    port = free_port()
    options = ["--profile", args.profile_dir + f"/{contender}-{pages_per_reply}.prof"] \
        if args.profile_dir else []
    worker = spawn(__file__, "--role", "worker", "--port", str(port), "--upstream", upstream,
                   "--tokens", str(args.tokens), "--rate", str(args.rate),
                   "--source", args.source, "--hand", args.hand, *options,
                   *(["--worker-log", args.worker_log] if args.worker_log else []))
    pages: list[Page] = []
    try:
        await loop.run_in_executor(None, wait_port, port, 60.0)
        keys = (await loop.run_in_executor(
            None, http, port, "POST", f"/prepare?replies={args.replies}"))["keys"]
        if contender != "bare":
            for start in range(0, len(keys) * pages_per_reply, 100):  # 100 connects at a time
                batch = []
                for n in range(start, min(start + 100, len(keys) * pages_per_reply)):
                    page = Page(f"/{contender}/{keys[n % len(keys)]}")
                    batch.append(loop.create_connection(lambda p=page: p, "127.0.0.1", port))
                    pages.append(page)
                await asyncio.gather(*batch)
            statuses = await asyncio.wait_for(
                asyncio.gather(*(p.head for p in pages)), args.timeout)
            bad = [s for s in statuses if s != 200]
            if bad:
                raise RuntimeError(f"{len(bad)} pages refused: {sorted(set(bad))}")
        gc.collect()
        load = load_average()
        upstream_cpu0 = cpu_of(upstream_pid) if upstream_pid else 0.0
        worker_cpu0, client_cpu0, wall0 = cpu_of(worker.pid), time.process_time(), \
            time.monotonic()
        await loop.run_in_executor(None, http, port, "POST", "/go")
        deadline = wall0 + args.timeout
        if pages:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(p.closed for p in pages)),
                                       max(0.0, deadline - time.monotonic()))
        else:
            while time.monotonic() < deadline:
                if (await loop.run_in_executor(None, http, port, "GET", "/stats"))["done"]:
                    break
                await asyncio.sleep(0.05)
        wall = time.monotonic() - wall0
        worker_cpu, client_cpu = cpu_of(worker.pid) - worker_cpu0, \
            time.process_time() - client_cpu0
        upstream_cpu = cpu_of(upstream_pid) - upstream_cpu0 if upstream_pid else None
        final = await loop.run_in_executor(None, http, port, "GET", "/stats?final=1")
        for _ in range(200):  # the producers end right after the pages' ``end``
            if final["done"]:
                break
            await asyncio.sleep(0.05)
            final = await loop.run_in_executor(None, http, port, "GET", "/stats?final=1")
    finally:
        for page in pages:
            if page.transport is not None:
                page.transport.close()
        stop(worker)
    appended: dict[str, list[tuple[int, float]]] = final["appended"] or {}
    produced = sum(len(v) for v in appended.values())
    latencies: list[float] = []
    delivered = 0
    exact = bool(final["done"]) and not final["errors"]
    for n, page in enumerate(pages):
        written = dict(appended.get(keys[n % len(keys)], []))
        offsets = [offset for offset, _ in page.received]
        if not page.ended or sorted(offsets) != sorted(written) or len(set(offsets)) != \
                len(offsets):
            exact = False
        delivered += len(page.received)
        for offset, at in page.received:
            if offset in written:
                latencies.append(at - written[offset])
    latencies.sort()
    return {
        "contender": contender, "pages": len(pages), "replies": len(keys),
        "ended": sum(p.ended for p in pages), "producers_done": final["done"],
        "produced": produced, "delivered": delivered, "exact": exact,
        "worker_cpu": worker_cpu, "client_cpu": client_cpu, "wall": wall, "load": load,
        "upstream_cpu": upstream_cpu,
        "bytes": sum(p.bytes for p in pages),
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)] if latencies else None,
        "max_ms": 1000 * latencies[-1] if latencies else None,
    }


def summarize(runs: list[dict[str, Any]], bare: list[dict[str, Any]]) -> dict[str, Any]:
    bare_cpu = statistics.median(r["worker_cpu"] for r in bare) if bare else 0.0
    out: dict[str, Any] = {}
    for contender in CONTENDERS:
        mine = [r for r in runs if r["contender"] == contender]
        if not mine:
            continue
        per = [1e6 * r["worker_cpu"] / max(1, r["delivered"]) for r in mine]
        net = [1e6 * (r["worker_cpu"] - bare_cpu) / max(1, r["delivered"]) for r in mine]
        out[contender] = {
            "cpu_us_per_delta": statistics.median(per), "range": (min(per), max(per)),
            "net_us_per_delta": statistics.median(net),
            "p50_ms": statistics.median(r["p50_ms"] for r in mine),
            "p99_ms": statistics.median(r["p99_ms"] for r in mine),
            "p99_range": (min(r["p99_ms"] for r in mine), max(r["p99_ms"] for r in mine)),
            "client_us_per_delta": statistics.median(
                1e6 * r["client_cpu"] / max(1, r["delivered"]) for r in mine),
            "client_share": statistics.median(r["client_cpu"] / r["wall"] for r in mine),
            "worker_share": statistics.median(r["worker_cpu"] / r["wall"] for r in mine),
            "bytes_per_delta": statistics.median(r["bytes"] / max(1, r["delivered"])
                                                 for r in mine),
            "exact": all(r["exact"] for r in mine),
            "loads": [r["load"] for r in mine],
        }
    if len(out) == 2:
        a, b = out["fluxstream"], out["sse-starlette"]
        out["ratio"] = {
            "cpu": a["cpu_us_per_delta"] / b["cpu_us_per_delta"],
            "net_cpu": a["net_us_per_delta"] / b["net_us_per_delta"],
            "p99": a["p99_ms"] / b["p99_ms"],
            "per_round_cpu": [
                x["worker_cpu"] / x["delivered"] / (y["worker_cpu"] / y["delivered"])
                for x, y in zip([r for r in runs if r["contender"] == "fluxstream"],
                                [r for r in runs if r["contender"] == "sse-starlette"],
                                strict=True)
            ],
        }
    out["bare_worker_cpu_s"] = bare_cpu
    return out


async def bench(args: argparse.Namespace) -> None:
    port = free_port()
    upstream_proc = spawn(str(HERE / "bench_server.py"), "--port", str(port),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) \
        if args.source == "server" else None
    upstream = f"http://127.0.0.1:{port}/paced-{1000 / args.rate:g}/v1"
    upstream_pid = upstream_proc.pid if upstream_proc is not None else None
    results: dict[str, Any] = {"regime": {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "replies": args.replies,
        "rate": args.rate, "tokens": args.tokens, "source": args.source, "hand": args.hand,
        "rounds": args.rounds, "cpus": os.cpu_count(),
    }}
    try:
        if upstream_proc is not None:
            wait_port(port)
        bare: list[dict[str, Any]] = []
        for pages in args.pages:
            runs: list[dict[str, Any]] = []
            for n in range(args.rounds):
                order = CONTENDERS if n % 2 == 0 else CONTENDERS[::-1]
                if args.bare and not bare_done(bare, n):
                    bare.append(await run_once(args, "bare", 0, upstream, upstream_pid))
                    print(json.dumps(bare[-1]), file=sys.stderr, flush=True)
                for contender in order:
                    if contender not in args.only:
                        continue
                    run = await run_once(args, contender, pages, upstream, upstream_pid)
                    print(json.dumps(run), file=sys.stderr, flush=True)
                    runs.append(run)
            results[f"c={pages * args.replies}"] = summarize(runs, bare)
            print(json.dumps({f"c={pages * args.replies}": results[f"c={pages * args.replies}"]},
                             indent=1), flush=True)
    finally:
        if upstream_proc is not None:
            stop(upstream_proc)
    results["load_after"] = load_average()
    if args.out:
        with open(args.out, "w") as out:  # noqa: ASYNC230 - once, after every run
            json.dump(results, out, indent=1)


def bare_done(bare: list[dict[str, Any]], round_number: int) -> bool:
    """One ``bare`` run per round (the producers' cost does not depend on the pages)."""
    return len(bare) > round_number


# ---------------------------------------------------------------------------- lockstep


async def lockstep(contender: str, replies: int, pages: int, tokens: int) -> dict[str, Any]:
    """Both responses as plain ASGI apps in this process, no HTTP server and no clock: each
    reply's next delta is appended only once every page has been sent the one before, so
    the work per delta does not depend on the machine's load (one entry per wake-up of
    every follower: the least batching there is) and can be counted in instructions."""
    from fluxstream import End, Finish, Outcome, TextDelta
    from fluxstream.relay import MemoryReplyLog
    from fluxstream.relay.codec import Entry, end_record
    from fluxstream.web import EventStreamResponse

    log = MemoryReplyLog(lease=600.0)
    keys = [f"reply-{i}" for i in range(replies)]
    for n, key in enumerate(keys):
        await log._create(key, f"bench-{n}", {})
    loop = asyncio.get_running_loop()
    counted = {"deltas": 0, "bytes": 0, "target": 0}
    reached = asyncio.Event()
    left = asyncio.Event()  # the pages never leave: ``receive`` waits for ever

    async def send(message: Any) -> None:
        body = message.get("body", b"")
        if body:
            counted["bytes"] += len(body)
            if b'"offset"' in body:
                counted["deltas"] += 1
                if counted["deltas"] >= counted["target"]:
                    reached.set()

    async def receive() -> Any:
        await left.wait()
        return {"type": "http.disconnect"}

    def scope_of(key: str) -> dict[str, Any]:
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                "method": "GET", "scheme": "http", "path": f"/{contender}/{key}",
                "raw_path": f"/{contender}/{key}".encode(), "query_string": b"",
                "root_path": "", "headers": [(b"accept", b"text/event-stream")],
                "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}

    tasks = []
    for n in range(replies * pages):
        key = keys[n % replies]
        app = EventStreamResponse.follow(log, key) if contender == "fluxstream" \
            else by_hand(log, key, None)
        tasks.append(loop.create_task(app(scope_of(key), receive, send)))
    for _ in range(100):  # every page is following (waiting for the first entry)
        await asyncio.sleep(0)
    gc.collect()
    cpu0 = time.process_time()
    for t in range(tokens):
        counted["target"] = (t + 1) * replies * pages
        reached.clear()
        for n, key in enumerate(keys):
            await log._append(key, f"bench-{n}", Entry(t + 1, (
                TextDelta(key, 0, t * len(TEXT), TEXT),)), token=None, final=False)
        await asyncio.wait_for(reached.wait(), 600)
    for n, key in enumerate(keys):
        await log._append(
            key, f"bench-{n}",
            Entry(tokens + 1, (Finish(key, 0, "stop"), End(Outcome.DONE, "stop")),
                  end_record(Outcome.DONE, "stop", None, None)),
            token=None, final=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 600)
    cpu = time.process_time() - cpu0
    return {"contender": contender, "pages": replies * pages, "deltas": counted["deltas"],
            "bytes": counted["bytes"], "cpu_us_per_delta": 1e6 * cpu / max(1, counted["deltas"])}


def instructions(args: argparse.Namespace, contender: str, tokens: int) -> int:
    """Instructions of one lockstep run under cachegrind (the whole process)."""
    out = Path(args.valgrind_dir) / f"cg-{contender}-{args.replies}x{args.pages[0]}-{tokens}.out"
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no",
               f"--cachegrind-out-file={out}", sys.executable, __file__, "--role", "lockstep",
               "--contender", contender, "--replies", str(args.replies), "--hand", args.hand,
               "--pages", str(args.pages[0]), "--tokens", str(tokens)]
    subprocess.run(command, check=True, timeout=args.timeout, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONHASHSEED": "0"})
    for line in out.read_text().splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise RuntimeError(f"no summary in {out}")


def count_instructions(args: argparse.Namespace) -> None:
    """Instructions per delta delivered: the difference of two run lengths (``--tokens`` and
    three times as many) over the deltas between them, so start-up and set-up cancel."""
    Path(args.valgrind_dir).mkdir(parents=True, exist_ok=True)
    short, long = args.tokens, 3 * args.tokens
    deltas = (long - short) * args.replies * args.pages[0]
    result: dict[str, Any] = {"replies": args.replies, "pages": args.replies * args.pages[0],
                              "tokens": (short, long)}
    for contender in CONTENDERS:
        if contender in args.only:
            counts = [instructions(args, contender, n) for n in (short, long)]
            result[contender] = (counts[1] - counts[0]) / deltas
            print(json.dumps({contender: counts}), file=sys.stderr, flush=True)
    if len(result) == 5:
        result["ratio"] = result["fluxstream"] / result["sse-starlette"]
    print(json.dumps(result, indent=1), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", default="bench", choices=["bench", "worker", "lockstep"])
    parser.add_argument("--lockstep", action="store_true",
                        help="in-process ASGI, no server, each delta once every page has the "
                        "one before: CPU per delta (with --instructions: cachegrind counts)")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--valgrind-dir", default="/tmp/bench-web-cachegrind")
    parser.add_argument("--contender", default="fluxstream", choices=CONTENDERS)
    parser.add_argument("--replies", type=int, default=100)
    parser.add_argument("--pages", default="1,5,10",
                        help="pages per reply, one c per value (c = replies x pages)")
    parser.add_argument("--rate", type=float, default=5.0, help="deltas/s per reply")
    parser.add_argument("--tokens", type=int, default=40, help="deltas per reply")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hand", default="asdict", choices=sorted(HAND_ENCODERS),
                        help="how the hand-written contender encodes an event's data")
    parser.add_argument("--source", default="synthetic", choices=["synthetic", "server"],
                        help="synthetic: deltas appended in the worker at the pace, one entry "
                        "each; server: streams from bench_server.py recorded by log.record")
    parser.add_argument("--timeout", type=float, default=120.0, help="bound of one run, s")
    parser.add_argument("--only", default=",".join(CONTENDERS))
    parser.add_argument("--no-bare", dest="bare", action="store_false")
    parser.add_argument("--profile-dir", default=None, help="cProfile each worker (CPU time)")
    parser.add_argument("--worker-log", default=None, help="append the workers' stderr here")
    parser.add_argument("--out", default=None, help="write every result as JSON here")
    # the worker's own
    parser.add_argument("--port", type=int)
    parser.add_argument("--upstream")
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    HAND[0] = args.hand
    if args.role == "worker":
        run_worker(args)
        return
    args.pages = [int(p) for p in args.pages.split(",")]
    args.only = args.only.split(",")
    if args.role == "lockstep":
        result = asyncio.run(lockstep(args.contender, args.replies, args.pages[0], args.tokens))
        print(json.dumps(result), flush=True)
        return
    if args.instructions:
        count_instructions(args)
        return
    if args.lockstep:
        for pages in args.pages:
            for n in range(args.rounds):
                order = CONTENDERS if n % 2 == 0 else CONTENDERS[::-1]
                for contender in order:
                    if contender in args.only:
                        print(json.dumps(asyncio.run(lockstep(
                            contender, args.replies, pages, args.tokens))), flush=True)
        return
    if args.profile_dir:
        Path(args.profile_dir).mkdir(parents=True, exist_ok=True)
    asyncio.run(bench(args))


if __name__ == "__main__":
    main()
