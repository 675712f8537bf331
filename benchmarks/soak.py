"""Soak: many streams with random faults and cancellations; resources must stay flat.

Run from the repository root::

    .venv/bin/python benchmarks/soak.py                     # 1,000 streams per run, all runs
    .venv/bin/python benchmarks/soak.py --streams 200       # a shorter soak
    .venv/bin/python benchmarks/soak.py --runs trio-httpx --json soak.json
    .venv/bin/python benchmarks/soak.py --runs trio-httpx --patterns events --cancels break \
        --clean-only --streams 60                           # narrow down a finding

Method (see benchmarks/README.md, "Soak"):

* One embedded server (``python -m fluxstream serve``) in its own process on 127.0.0.1, shared
  by every run; each run is a fresh child process of this script, so its RSS is its own:
  ``asyncio-default`` (no ``http_client``: fluxstream's default client, its own aiohttp
  adapter, pool sized by ``limits=``; what users run on asyncio), ``trio-httpx`` and
  ``asyncio-httpx`` (an injected ``httpx.AsyncClient``), and ``asyncio-httpx-aiohttp`` (an
  injected httpx-aiohttp ``HttpxAiohttpClient``, for comparison).
* ``--concurrency`` workers share one ``AsyncClient`` whose HTTP pool holds exactly that many
  connections (``max_connections`` = concurrency, ``pool`` timeout 10 s): a stream that never
  gives its connection back shows up as a ``PoolTimeout`` (a failed stream) within a few
  streams, not as a slow creep.
* Every stream draws, from a seeded RNG: a reading pattern (``async for`` over events,
  ``text(coalesce=...)``, ``complete()``, or ``text(coalesce=...)`` without ``async with``
  then ``aclose()``), a fault (none, drops mid-body or mid-event with FIN or RST -- some only on
  the first attempt so a ``Last-Event-ID`` resume finishes the reply --, a malformed chunk
  (a chunk-size line that is not hex) after 0, 200 or 300 body bytes, a kept-alive
  connection the server closes 0, 5 or 50 ms after each response without saying so (as
  llama.cpp's server does), one-byte writes, drip, a stall with heartbeats, an oversized
  event, 503/500/400, a slow response head) or a quirk profile (heartbeats, CRLF, multi-line
  data, no ``[DONE]``, an error mid-stream, Azure's filter chunk), and a cancellation (none,
  ``cancel()`` from another task, ``aclose()`` from another task, ``break`` after a few
  pieces, ``abandon``: ``break`` after a few pieces without ``async with`` or ``aclose()``,
  then every reference dropped, so that only the garbage collector can close it, or a
  timeout around the stream), at a random moment. Each stream is bounded by
  ``--stream-timeout``.
* Checked per stream: no exception other than fluxstream's typed errors (and, for the timeout
  pattern, the cancellation itself); the text delivered equals ``reply.text`` and is a prefix
  of the server's deterministic reply (never a character twice); a stream with no fault, quirk
  or cancellation ends ``done`` with exactly that reply, as does a drop that a resume repairs,
  and a stream whose connection the server closed after the previous response
  (``close-after``): with one request (``stats.attempts == 1``: a request that fails on a
  reused connection is sent again at once, no retry spent); a malformed chunk ends the stream
  ``truncated`` (or a resume finishes it ``done``) within ``--prompt`` seconds, never by a
  timeout; a cancelled stream never ends ``failed``. Every violation is counted as an
  anomaly, by kind.
* Sampled every ``--sample-every`` finished streams, after ``gc.collect()``: open file
  descriptors (``/proc/self/fd``), live tasks (``asyncio.all_tasks()``; trio's
  ``current_statistics().tasks_living``), RSS (``/proc/self/statm``), the pool's connections,
  and the number of tracked objects. Reported as the mean of the first and of the last decile
  of samples: flat means the last decile is not above the first beyond noise. A warm-up of
  ``--warmup`` streams runs before sampling begins (imports, pools, caches).
* Also counted: ``ResourceWarning``s, unraisable exceptions (unfinished async generators), and
  asyncio's "Task was destroyed but it is pending" / "exception was never retrieved" reports;
  and, once every stream ended, the pool's connections still checked out (a leak each). The
  ``ResourceWarning`` fluxstream gives a stream collected while open (``unclosed
  <ReplyStream ...>``, as for a file) is expected of the ``abandon`` streams and counted
  apart; more of them than abandoned open streams is an anomaly. Whether each abandoned
  stream was freed at once (reference counting) or left to the cycle collector is counted
  too (not an anomaly: either closes it).
* The exit status is 1 when any anomaly, leak report or checked-out connection was counted. ``--tracemalloc N`` (with ``--child``)
  prints the N source lines whose memory grew most between the first sample and the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import time
import traceback
import tracemalloc
import warnings
import weakref
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, if not installed

import anyio
import anyio.lowlevel
import httpx

import fluxstream
from fluxstream.server import expected_reply

MODEL = "fluxstream-echo"
API_KEY = "soak-key"
# asyncio-default: what users run on asyncio (no http_client: fluxstream's own aiohttp adapter,
# pool sized by ``limits=``); the others inject an HTTP client. asyncio-httpx-aiohttp (an
# injected httpx-aiohttp ``HttpxAiohttpClient``) is an extra run, for comparison.
RUNS = ("asyncio-default", "trio-httpx", "asyncio-httpx", "asyncio-httpx-aiohttp")

# (weight, fault header or None, profile or None, kind). kind says what the outcome may be:
#   clean   -> done, exactly the expected reply
#   healed  -> the fault hits the first attempt only; retry/resume must give the clean reply
#   lossy   -> anything typed, but the text must be a prefix of the expected one
#   broken  -> a drop: truncated (or resumed to done) within --prompt seconds, never a timeout
FAULTS: list[tuple[int, str | None, str | None, str]] = [
    (30, None, None, "clean"),
    (6, None, "heartbeats", "clean"),
    (4, None, "crlf,multiline", "clean"),
    (4, None, "azure", "clean"),
    (3, None, "no-done", "clean"),  # ends `finished`, not `done`
    (5, "write-size=7", None, "clean"),
    (5, "drip=0.002", None, "clean"),
    (4, "delay=0.05", None, "clean"),
    (4, "stall=0.2,stall-heartbeat=0.05", None, "clean"),
    (5, "drop-after=300,fail-first=1", None, "healed"),
    (4, "drop-after-events=4,drop-reset=1,fail-first=1", None, "healed"),
    (4, "status=503,fail-first=1", None, "healed"),
    (5, "drop-after=250", None, "lossy"),
    (4, "drop-after-events=3,drop-reset=1", None, "lossy"),
    (3, "oversize=20000", None, "lossy"),
    (3, "status=500", None, "lossy"),
    (3, "status=400", None, "lossy"),
    (4, None, "error-midstream", "lossy"),
    # A kept-alive connection closed after each response (llama.cpp's server): the next
    # request on it fails before any byte; the client sends it again at once, no retry spent.
    (4, "close-after=0", None, "clean"),
    (4, "close-after=0.005", None, "clean"),
    (4, "close-after=0.05", None, "clean"),
    # A malformed chunk (bad chunk-size line), then the close: noticed at once.
    (4, "bad-chunk-after=300", None, "broken"),
    (2, "bad-chunk-after=0", None, "broken"),
    (3, "bad-chunk-after=200,fail-first=1", None, "healed"),
]
PATTERNS = (("events", 4), ("coalesce", 4), ("complete", 2), ("bare-coalesce", 2))
CANCELS = ((None, 8), ("cancel", 3), ("aclose", 2), ("break", 3), ("abandon", 3),
           ("timeout", 2))
#: The warning fluxstream gives a stream collected while open (``abandon`` streams).
ABANDONED_WARNING = "unclosed <ReplyStream"


class Recent(OrderedDict[str, str]):
    """The last :data:`RECENT` entries only: the soak's own bookkeeping must not grow with the
    number of streams, or it would be the RSS creep it reports. A stream's warning comes when
    it is freed: at once, or at the next sample's ``gc.collect()`` (every few streams)."""

    def __setitem__(self, key: str, value: str) -> None:
        super().__setitem__(key, value)
        if len(self) > RECENT:
            self.popitem(last=False)


RECENT = 256
#: Content keys of the recent streams ``abandon`` dropped unclosed (their warning is
#: expected), and of every recent stream with its plan (to say where an unexpected one came
#: from).
DROPPED_OPEN = Recent()
PLAN_OF_KEY = Recent()


@dataclass
class Plan:
    index: int
    pattern: str
    fault: str | None
    profile: str | None
    kind: str
    cancel: str | None
    cancel_at: float  # seconds (cancel, aclose, timeout) or pieces (break)
    max_tokens: int


def make_plan(rng: random.Random, index: int, patterns: set[str] | None = None,
              cancels: set[str] | None = None, clean_only: bool = False,
              fault_match: str | None = None) -> Plan:
    """A random plan; ``patterns``/``cancels``/``clean_only`` narrow the draw (to find which
    combination leaks)."""

    def pick(options: Any, allowed: set[str] | None) -> Any:
        options = [o for o in options if allowed is None or str(o[0]).lower() in allowed]
        return rng.choices([o[0] for o in options], [o[1] for o in options])[0]

    faults = [f for f in FAULTS if not clean_only or (f[1] is None and f[2] is None)]
    if fault_match:
        faults = [f for f in faults if fault_match in f"{f[1]} {f[2]} {f[3]}"]
    _, fault, profile, kind = faults[rng.choices(range(len(faults)), [f[0] for f in faults])[0]]
    pattern = pick(PATTERNS, patterns)
    cancel = None if pattern == "complete" else pick(CANCELS, cancels)
    cancel_at = rng.randint(1, 12) if cancel in ("break", "abandon") else rng.uniform(0.0, 0.06)
    return Plan(index, pattern, fault, profile, kind, cancel, cancel_at, rng.randint(5, 80))


# ------------------------------------------------------------------------------- resources


def open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        return -1


def rss_mib() -> float:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return -1.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def live_tasks() -> int:
    try:
        import asyncio

        return len(asyncio.all_tasks())
    except RuntimeError:  # no asyncio loop: trio
        import trio

        return int(trio.lowlevel.current_statistics().tasks_living)


def _own_connector(http: Any) -> Any:
    """aiohttp's connector under fluxstream's default client (``AutoClient`` on asyncio)."""
    session = getattr(getattr(http, "_aio", None), "_session", None)
    return getattr(session, "connector", None)


def pool_connections(http: Any) -> int:
    """Connections held by the client's pool (httpx/httpcore, or aiohttp's connector)."""
    own = _own_connector(http)
    if own is not None:
        return sum(len(v) for v in own._conns.values()) + len(own._acquired)
    pool = getattr(getattr(http, "_transport", None), "_pool", None)
    if pool is not None and hasattr(pool, "connections"):
        return len(pool.connections)
    transport = getattr(http, "_transport", None)
    for holder in (transport, getattr(transport, "client", None), http):
        connector = getattr(holder, "connector", None) or getattr(holder, "_connector", None)
        if connector is not None:
            conns = getattr(connector, "_conns", {})
            acquired = getattr(connector, "_acquired", ())
            return sum(len(v) for v in conns.values()) + len(acquired)
    return -1


def pool_busy(http: Any) -> int:
    """Connections the pool still counts as in use (after every stream ended: leaked)."""
    own = _own_connector(http)
    if own is not None:
        return len(own._acquired)
    pool = getattr(getattr(http, "_transport", None), "_pool", None)
    if pool is not None and hasattr(pool, "connections"):
        return len(busy_httpcore_connections(http))
    connector = getattr(getattr(getattr(http, "_transport", None), "client", None),
                        "connector", None)
    if connector is not None:
        return len(getattr(connector, "_acquired", ()))
    return -1


def busy_httpcore_connections(http: Any) -> list[str]:
    """What httpcore's pool holds that is not idle, by its own ``info()`` (``CONNECTING``: a
    connection whose request was cancelled before it connected, which no cleanup removes)."""
    pool = getattr(getattr(http, "_transport", None), "_pool", None)
    return [str(c.info()) for c in getattr(pool, "connections", ()) if not c.is_idle()]


@dataclass
class Sample:
    done: int
    t: float
    fds: int
    tasks: int
    rss_mib: float
    pool: int
    objects: int


def take_sample(done: int, start: float, http: Any) -> Sample:
    gc.collect()
    return Sample(done, round(time.monotonic() - start, 3), open_fds(), live_tasks(),
                  round(rss_mib(), 2), pool_connections(http), len(gc.get_objects()))


# ------------------------------------------------------------------------------- one stream


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # typed errors raised, by class
    anomalies: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    #: ``abandon`` streams: dropped while open, and when the last reference went.
    abandoned: Counter[str] = field(default_factory=Counter)
    #: The longest a stream of each such fault took (seconds), cancellations included.
    slowest: dict[str, float] = field(default_factory=dict)

    def anomaly(self, kind: str, plan: Plan, detail: str) -> None:
        self.anomalies[kind] += 1
        self.examples.setdefault(kind, f"{plan}: {detail}"[:600])


async def run_stream(client: fluxstream.AsyncClient, plan: Plan, tally: Tally,
                     stream_timeout: float, prompt: float) -> None:
    request: dict[str, Any] = {
        # fill-max-tokens: the reply as long as max_tokens asks (the answer alone is 30 deltas)
        "model": f"{MODEL}@{','.join(filter(None, (plan.profile, 'fill-max-tokens')))}",
        "messages": [{"role": "user", "content": f"soak stream {plan.index}"}],
        "max_tokens": plan.max_tokens,
    }
    expected = expected_reply({**request, "stream": True,
                               "stream_options": {"include_usage": True}}).choices[0].text
    headers = {"X-Fluxstream-Fault": plan.fault} if plan.fault else {}
    delivered: list[str] = []
    stream: fluxstream.ReplyStream | None = None
    abandoned: Abandoned | None = None
    raised: BaseException | None = None
    timed_out = False
    started = time.monotonic()
    try:
        with anyio.fail_after(stream_timeout):
            if plan.pattern == "complete":
                reply = await client.chat.complete(**request, extra_headers=headers)
                delivered.append(reply.text)
            elif plan.cancel == "abandon":
                abandoned = await _abandon(client, request, headers, plan, delivered, tally)
            else:
                stream = client.chat.stream(**request, extra_headers=headers)
                PLAN_OF_KEY[stream.content_key] = str(plan)
                timeout = plan.cancel_at if plan.cancel == "timeout" else None
                with anyio.move_on_after(timeout) as scope:
                    await _consume(stream, plan, delivered, tally)
                timed_out = scope.cancelled_caught
    except fluxstream.FluxstreamError as exc:
        raised = exc
        tally.errors[type(exc).__name__] += 1
    except TimeoutError:
        tally.anomaly("hang", plan, f"no end within {stream_timeout}s")
        return
    except Exception as exc:
        tally.anomaly(f"untyped {type(exc).__name__}", plan, repr(exc))
        return
    except BaseException as exc:  # an exception group, a stray cancellation
        if isinstance(exc, anyio.get_cancelled_exc_class()):
            raise
        tally.anomaly(f"untyped {type(exc).__name__}", plan, repr(exc))
        return
    took = time.monotonic() - started
    broken_chunk = plan.fault is not None and "bad-chunk-after" in plan.fault
    # The slowest malformed-chunk stream, and for scale the slowest with no fault at all.
    slow = "bad-chunk-after" if broken_chunk else (
        "no fault" if plan.fault is None and plan.profile is None else None)
    if slow is not None:
        tally.slowest[slow] = round(max(took, tally.slowest.get(slow, 0.0)), 3)
    if broken_chunk and took > prompt:
        tally.anomaly("malformed chunk not noticed promptly", plan, f"{took:.2f}s {raised!r}")

    attempts: int | None = None
    if abandoned is not None:
        reply, attempts = abandoned.reply, abandoned.attempts
    elif stream is not None:
        reply, attempts = stream.reply, stream.stats.attempts
    elif isinstance(raised, fluxstream.StreamError) and raised.reply is not None:
        reply = raised.reply
    elif raised is not None:  # complete() before any stream: a status error
        tally.outcomes["error before stream"] += 1
        if plan.kind != "lossy":
            tally.anomaly(f"error on a {plan.kind} plan", plan, repr(raised))
        return
    outcome = reply.outcome.value if reply.outcome is not None else "none"
    left_open = abandoned is not None and abandoned.left_open
    tally.outcomes["abandoned open" if left_open else outcome] += 1
    text = "".join(delivered)
    if abandoned is not None:  # as for break: it owes only a prefix once it broke out
        cancelled = abandoned.broke
    else:
        cancelled = plan.cancel is not None and (plan.cancel != "timeout" or timed_out)
    if plan.pattern == "complete":
        text = reply.text
    elif not reply.text.startswith(text) or (text != reply.text and not cancelled):
        # Cut short, text() may not have yielded its last frame: a prefix is all it owes.
        tally.anomaly("delivered != reply.text", plan, f"{text!r} vs {reply.text!r}")
    if not expected.startswith(reply.text):
        tally.anomaly("text not a prefix of the reply", plan, f"{reply.text!r}")
    if cancelled and outcome == "failed" and plan.kind == "clean":
        # (with a fault, an error may legitimately arrive before the cancel takes effect)
        tally.anomaly("cancel ended failed", plan, repr(reply.end_reason))
    if outcome == "none" and not left_open:
        tally.anomaly("no outcome", plan, "stream ended without an outcome")
    if plan.kind in ("clean", "healed") and not cancelled:
        want = "finished" if plan.profile == "no-done" else "done"
        if outcome != want or reply.text != expected:
            tally.anomaly(f"{plan.kind} plan not {want}", plan,
                          f"{outcome} {reply.end_reason!r} {raised!r} text={len(reply.text)}/"
                          f"{len(expected)}")
    if plan.kind == "broken" and not cancelled and not (
        outcome == "truncated" or (outcome == "done" and reply.text == expected)
    ):
        tally.anomaly("malformed chunk not truncated", plan,
                      f"{outcome} {reply.end_reason!r} {raised!r} after {took:.2f}s")
    if plan.fault is not None and plan.fault.startswith("close-after") and (attempts or 0) > 1:
        # A request that fails on a reused connection before any byte is sent again at once,
        # without spending a retry: more than one attempt means a retry paid for it.
        tally.anomaly("close-after spent a retry", plan, f"{attempts} attempts, {outcome}")


@dataclass
class Abandoned:
    """What is left of an ``abandon`` stream once every reference to it is gone."""

    reply: fluxstream.Reply
    attempts: int
    left_open: bool  # it had not ended when it was dropped: only the collector can close it
    broke: bool  # the loop was left by ``break`` (not by the stream's end or an error)


async def _abandon(client: fluxstream.AsyncClient, request: dict[str, Any],
                   headers: dict[str, str], plan: Plan, delivered: list[str],
                   tally: Tally) -> Abandoned:
    """Break out of ``async for`` after ``cancel_at`` pieces with no ``async with`` and no
    ``aclose()``, and keep nothing that refers to the stream (not even an exception: its
    traceback holds this frame), so that the garbage collector is what closes it. Counts
    whether the last reference went at once (reference counting), after a few ticks of the
    loop, or only in the cycle collector (the sampling's ``gc.collect()``)."""
    stream = client.chat.stream(**request, extra_headers=headers)
    PLAN_OF_KEY[stream.content_key] = str(plan)
    limit = int(plan.cancel_at)
    broke = False
    try:
        if plan.pattern == "events":
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta) and event.choice == 0:
                    delivered.append(event.text)
                    if len(delivered) >= limit:
                        broke = True
                        break
        else:
            async for piece in stream.text(coalesce=0.005):
                delivered.append(piece)
                if len(delivered) >= limit:
                    broke = True
                    break
    except fluxstream.FluxstreamError as exc:
        tally.errors[type(exc).__name__] += 1
    left = Abandoned(stream.reply, stream.stats.attempts, stream.outcome is None, broke)
    # Left by break, the stream is not closed even when its reply has ended (the response is
    # closed when iteration reaches the end): a file read to EOF but not closed warns too.
    if broke:
        DROPPED_OPEN[stream.content_key] = ""
    ref = weakref.ref(stream)
    del stream
    if broke:
        tally.abandoned["dropped open"] += 1
        if ref() is None:
            tally.abandoned["freed at once"] += 1
        else:
            for _ in range(3):
                await anyio.lowlevel.checkpoint()
            tally.abandoned["freed after a tick" if ref() is None else "left to gc"] += 1
    return left


async def _consume(stream: fluxstream.ReplyStream, plan: Plan, delivered: list[str],
                   tally: Tally) -> None:
    """Read as the plan says; a canceller task (when there is one) fires at ``cancel_at``.

    The reading runs inside the task group's body, so its exception is caught there and
    re-raised outside: a task group would wrap it in an exception group.
    """

    async def later(action: Callable[[], Awaitable[None] | None]) -> None:
        await anyio.sleep(plan.cancel_at)
        try:
            result = action()
            if result is not None:
                await result
        except Exception as exc:  # cancel()/aclose() from another task must not raise
            tally.anomaly(f"{plan.cancel} from another task raised {type(exc).__name__}",
                          plan, repr(exc))

    error: BaseException | None = None
    async with anyio.create_task_group() as tg:
        if plan.cancel == "cancel":
            tg.start_soon(later, stream.cancel)
        elif plan.cancel == "aclose":
            tg.start_soon(later, stream.aclose)
        try:
            await _read(stream, plan, delivered)
        except Exception as exc:
            error = exc
        tg.cancel_scope.cancel()  # a cancel/aclose that has not fired yet is not needed
    if error is not None:
        raise error


async def _read(stream: fluxstream.ReplyStream, plan: Plan, delivered: list[str]) -> None:
    limit = int(plan.cancel_at) if plan.cancel == "break" else None
    if plan.pattern == "events":
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta) and event.choice == 0:
                    delivered.append(event.text)
                    if limit is not None and len(delivered) >= limit:
                        break
    elif plan.pattern == "coalesce":
        async with stream:
            async for piece in stream.text(coalesce=0.005):
                delivered.append(piece)
                if limit is not None and len(delivered) >= limit:
                    break
    else:  # bare-coalesce: no `async with`; the documented aclose() when done
        try:
            async for piece in stream.text(coalesce=0.005):
                delivered.append(piece)
                if limit is not None and len(delivered) >= limit:
                    break
        finally:
            await stream.aclose()


# ------------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    run: str
    streams: int
    warmup: int
    concurrency: int
    wall: float
    finished_streams: int
    outcomes: dict[str, int]
    errors: dict[str, int]
    anomalies: dict[str, int]
    examples: dict[str, str]
    warnings: dict[str, int]
    expected_warnings: dict[str, int]
    abandoned: dict[str, int]
    slowest: dict[str, float]
    baseline: dict[str, float]
    pool_busy_after_drain: int
    after_close: dict[str, float]
    samples: list[dict[str, Any]]


class Watch:
    """Counts what leaks announce: ResourceWarnings, unraisable exceptions, asyncio reports."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        #: What the soak provokes on purpose: the warning of an abandoned open stream.
        self.expected: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def note(self, kind: str, text: str) -> None:
        self.counts[kind] += 1
        self.examples.setdefault(kind, text[:400])

    def install(self) -> None:
        warnings.simplefilter("always", ResourceWarning)
        show = warnings.showwarning

        def showwarning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            text = str(message)
            if issubclass(category, ResourceWarning) and text.startswith(ABANDONED_WARNING):
                found = re.search(r"key='([^']*)'", text)
                key = found[1] if found else ""
                if key in DROPPED_OPEN:
                    self.expected["ResourceWarning (abandoned stream)"] += 1
                    self.examples.setdefault("expected: abandoned stream", text[:400])
                    return
                plan = PLAN_OF_KEY.get(key, "not a recent stream of the soak's (complete()?)")
                self.note("ResourceWarning: unclosed stream not abandoned", f"{text} {plan}")
                return
            self.note(category.__name__, str(message))
            if not issubclass(category, ResourceWarning):
                show(message, category, *args, **kwargs)

        warnings.showwarning = showwarning

        def unraisable(info: Any) -> None:
            self.note(f"unraisable {type(info.exc_value).__name__}",
                      f"{info.err_msg}: {info.exc_value!r} ({info.object!r})")

        sys.unraisablehook = unraisable
        watch = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                message = record.getMessage()
                if "destroyed but it is pending" in message:
                    watch.note("asyncio task destroyed pending", message)
                elif "never retrieved" in message:
                    watch.note("asyncio exception never retrieved", message)
                elif record.levelno >= logging.ERROR:
                    watch.note("asyncio error log", message)

        logging.getLogger("asyncio").addHandler(Handler())


async def soak(args: argparse.Namespace, run: str, watch: Watch) -> RunResult:
    transport = run.split("-", 1)[1]
    limits = httpx.Limits(max_connections=args.concurrency,
                          max_keepalive_connections=args.concurrency)
    timeout = httpx.Timeout(10.0, pool=10.0)
    injected: Any = None
    if transport == "httpx-aiohttp":
        from httpx_aiohttp import HttpxAiohttpClient

        injected = HttpxAiohttpClient(limits=limits, timeout=timeout)
    elif transport == "httpx":
        injected = httpx.AsyncClient(limits=limits, timeout=timeout)
    gc.collect()
    baseline = {"fds": open_fds(), "tasks": live_tasks(), "rss_mib": round(rss_mib(), 2)}
    # "default": no http_client, as users run it; the pool is sized by ``limits=``.
    options: dict[str, Any] = (
        {"http_client": injected} if injected is not None else {"limits": limits}
    )
    http_fields = {name: getattr(timeout, name) for name in ("connect", "read", "write", "pool")}
    client = fluxstream.AsyncClient(
        base_url=args.base_url, api_key=API_KEY, **options,
        retry=fluxstream.RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05,
                                     total_timeout=5),
        timeouts=fluxstream.Timeouts(
            **(http_fields if injected is None else {}), finish_grace=0.5
        ),
    )
    http = client.http_client  # the injected client, or fluxstream's own
    rng = random.Random(f"{args.seed}-{run}")
    total = args.warmup + args.streams
    patterns = set(args.patterns.split(",")) if args.patterns else None
    cancels = set(args.cancels.split(",")) if args.cancels else None
    plans = [make_plan(rng, i, patterns, cancels, args.clean_only, args.fault_match)
             for i in range(total)]
    tally = Tally()
    samples: list[Sample] = []
    start = time.monotonic()
    deadline = start + args.time_limit
    state = {"next": 0, "done": 0}
    warm_tally = Tally()
    snapshots: list[tracemalloc.Snapshot] = []

    async def worker() -> None:
        while state["next"] < total and time.monotonic() < deadline:
            plan = plans[state["next"]]
            state["next"] += 1
            target = warm_tally if plan.index < args.warmup else tally
            await run_stream(client, plan, target, args.stream_timeout, args.prompt)
            state["done"] += 1
            measured = state["done"] - args.warmup
            # Sampled only while every worker is still busy (streams left to start), so the
            # last decile is not the drain at the end, when workers exit one by one.
            busy = state["next"] < total
            if busy and measured >= 0 and measured % args.sample_every == 0:
                samples.append(take_sample(measured, start, http))
                if args.tracemalloc and measured == 0:
                    snapshots.append(tracemalloc.take_snapshot())

    async with anyio.create_task_group() as tg:
        for _ in range(args.concurrency):
            tg.start_soon(worker)
    wall = time.monotonic() - start
    if snapshots:  # what grew between the first sample and the end, by line
        gc.collect()
        top = tracemalloc.take_snapshot().compare_to(snapshots[0], "lineno")[:args.tracemalloc]
        sys.stderr.write("tracemalloc, growth since the first sample:\n")
        for stat in top:
            sys.stderr.write(f"  {stat}\n")
    await anyio.sleep(0.2)
    busy_after = pool_busy(http)
    if busy_after > 0:
        states = Counter(busy_httpcore_connections(http))
        tally.examples["pool busy after drain"] = ", ".join(
            f"{state} x{count}" for state, count in states.items()) or "(not httpcore)"
    await client.aclose()
    if injected is not None:
        await injected.aclose()
    await anyio.sleep(0.2)  # let closed transports finish (aiohttp closes on the next tick)
    gc.collect()
    after = {"fds": open_fds(), "tasks": live_tasks(), "rss_mib": round(rss_mib(), 2)}
    for kind, count in warm_tally.anomalies.items():  # a warm-up anomaly is still one
        tally.anomalies[f"(warm-up) {kind}"] += count
        tally.examples.setdefault(f"(warm-up) {kind}", warm_tally.examples[kind])
    # Every stream is collected by now: the abandoned-stream warnings are all in, and there
    # is one for each stream dropped open at most (warm-up included: one Watch for both).
    abandoned = tally.abandoned + warm_tally.abandoned
    if sum(watch.expected.values()) > abandoned["dropped open"]:
        tally.anomalies["more abandoned-stream warnings than abandoned streams"] += 1
    for kind, seconds in warm_tally.slowest.items():
        tally.slowest[kind] = max(seconds, tally.slowest.get(kind, 0.0))
    return RunResult(
        run=run, streams=args.streams, warmup=args.warmup, concurrency=args.concurrency,
        wall=round(wall, 2), finished_streams=max(0, state["done"] - args.warmup),
        outcomes=dict(tally.outcomes), errors=dict(tally.errors),
        anomalies=dict(tally.anomalies), examples={**tally.examples, **watch.examples},
        warnings=dict(watch.counts), expected_warnings=dict(watch.expected),
        abandoned=dict(abandoned), slowest=tally.slowest, baseline=baseline, pool_busy_after_drain=busy_after,
        after_close=after,
        samples=[asdict(s) for s in samples],
    )


def child(args: argparse.Namespace) -> int:
    # Retries and resumes log a warning each: thousands of lines that say nothing here.
    logging.getLogger("fluxstream").setLevel(logging.ERROR)
    if args.tracemalloc:
        tracemalloc.start(8)
    watch = Watch()
    watch.install()
    backend = args.child.split("-")[0]
    result = anyio.run(soak, args, args.child, watch, backend=backend)
    sys.stdout.write(json.dumps(asdict(result)) + "\n")
    return 0


# ------------------------------------------------------------------------------- the parent


class ServerProcess:
    """``python -m fluxstream serve`` on a free loopback port, in its own process."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fluxstream", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--profile", "openai"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
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


def _deciles(samples: list[dict[str, Any]], key: str) -> tuple[float, float]:
    values = [s[key] for s in samples]
    if not values:
        return (float("nan"), float("nan"))
    n = max(1, len(values) // 10)
    return statistics.fmean(values[:n]), statistics.fmean(values[-n:])


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| run | streams | wall s | outcomes | typed errors | anomalies | leak reports "
        "| abandoned open: warned (freed at once/after a tick/by gc) "
        "| slowest bad-chunk (no-fault) stream s "
        "| fds first→last decile | tasks | RSS MiB | pool conns | objects (k) "
        "| pool busy after drain | fds/tasks after close (baseline) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        s = r["samples"]

        def pair(key: str, fmt: str = "{:.0f}", scale: float = 1.0,
                 s: list[dict[str, Any]] = s) -> str:
            a, b = _deciles(s, key)
            return f"{fmt.format(a / scale)} → {fmt.format(b / scale)}"

        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "-"
        anomalies = ", ".join(f"{k} {v}" for k, v in sorted(r["anomalies"].items())) or "none"
        reports = ", ".join(f"{k} {v}" for k, v in sorted(r["warnings"].items())) or "none"
        base, after = r["baseline"], r["after_close"]
        gone = r["abandoned"]
        abandoned = (
            f"{gone.get('dropped open', 0)}: {sum(r['expected_warnings'].values())} "
            f"({gone.get('freed at once', 0)}/{gone.get('freed after a tick', 0)}/"
            f"{gone.get('left to gc', 0)})"
        )
        slowest = r["slowest"].get("bad-chunk-after")
        clean = r["slowest"].get("no fault")
        rows.append(
            f"| {r['run']} | {r['finished_streams']}/{r['streams']} (c={r['concurrency']}) "
            f"| {r['wall']:.0f} | {outcomes} | {errors} | {anomalies} | {reports} "
            f"| {abandoned} | {'-' if slowest is None else f'{slowest:.2f}'} "
            f"({'-' if clean is None else f'{clean:.2f}'}) "
            f"| {pair('fds')} | {pair('tasks')} | {pair('rss_mib', '{:.1f}')} | {pair('pool')} "
            f"| {pair('objects', '{:.0f}', 1000.0)} | {r['pool_busy_after_drain']} "
            f"| {after['fds']:.0f}/{after['tasks']:.0f} ({base['fds']:.0f}/{base['tasks']:.0f}) |"
        )
    return "\n".join(rows)


def parent(args: argparse.Namespace) -> int:
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    for run in runs:
        if run not in RUNS:
            raise SystemExit(f"unknown run {run!r} (known: {', '.join(RUNS)})")
    results: list[dict[str, Any]] = []
    with ServerProcess() as server:
        for run in runs:
            command = [
                sys.executable, __file__, "--child", run, "--base-url", server.base_url,
                "--streams", str(args.streams), "--warmup", str(args.warmup),
                "--concurrency", str(args.concurrency), "--seed", str(args.seed),
                "--sample-every", str(args.sample_every), "--time-limit", str(args.time_limit),
                "--stream-timeout", str(args.stream_timeout), "--prompt", str(args.prompt),
                "--patterns", args.patterns or "", "--cancels", args.cancels or "",
                *(["--clean-only"] if args.clean_only else []),
                *(["--fault-match", args.fault_match] if args.fault_match else []),
            ]
            sys.stderr.write(f"soak: {run} ...\n")
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=args.time_limit + 120)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                raise SystemExit(f"soak run {run} failed with {done.returncode}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results.append(result)
            sys.stderr.write(f"soak: {run} done in {result['wall']} s\n")
    sys.stdout.write(table(results) + "\n")
    for r in results:
        for kind, example in sorted(r["examples"].items()):
            sys.stdout.write(f"\n{r['run']}: {kind}: {example}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    bad = sum(sum(r["anomalies"].values()) + sum(r["warnings"].values())
              + max(0, r["pool_busy_after_drain"]) for r in results)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--streams", type=int, default=1000, help="measured streams per run")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--seed", default="fluxstream-soak")
    p.add_argument("--sample-every", type=int, default=10)
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds per run")
    p.add_argument("--stream-timeout", type=float, default=30.0, help="seconds per stream")
    p.add_argument("--prompt", type=float, default=3.0,
                   help="seconds within which a malformed chunk must end its stream (httpx "
                   "takes ~0.2 s; the read timeout here is 10 s)")
    p.add_argument("--patterns", help="only these reading patterns, e.g. coalesce,events "
                   f"(of {', '.join(x[0] for x in PATTERNS)})")
    p.add_argument("--cancels", help="only these cancellations, e.g. none,break (of "
                   f"{', '.join(str(x[0]).lower() for x in CANCELS)})")
    p.add_argument("--clean-only", action="store_true", help="no faults, no quirk profiles")
    p.add_argument("--fault-match", help="only faults/profiles/kinds containing this text, "
                   "e.g. healed, drop-after, heartbeats")
    p.add_argument("--json", help="also write the full results (samples included) here")
    p.add_argument("--tracemalloc", type=int, default=0, metavar="N",
                   help="(one run, with --child) print the N lines whose memory grew most")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--base-url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        try:
            return child(args)
        except Exception:
            traceback.print_exc()
            return 2
    return parent(args)


if __name__ == "__main__":
    raise SystemExit(main())
