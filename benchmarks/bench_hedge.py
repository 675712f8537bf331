"""Benchmark hedged first tokens: time to first token with and without ``hedge_after``.

Run from the repository root::

    .venv/bin/python benchmarks/bench_hedge.py                 # 200 requests a run (~30 s)
    .venv/bin/python benchmarks/bench_hedge.py --n 400 --concurrency 20 --seed 7

Method:

* Two embedded servers (``fluxstream.server.ServerThread``, profile ``openai``) on 127.0.0.1,
  each in its own thread. The **primary**'s first token comes after a head delay drawn per
  request from a seeded generator (uniform 80 to 260 ms, in 20 ms steps) and, for exactly 10% of
  the requests (a seeded shuffle), 3 s later: the head and the first (role-only) event come,
  then a 3 s stall before any content, as a queued or cold replica does. The **fallback**
  answers every request after a constant 200 ms head delay.
* The delays are the servers' fault header (``X-Fluxstream-Fault``); so that the fallback never
  sees the primary's, each delay class has its own client (client headers carry the
  primary's, the fallback ``Upstream``'s own headers replace them there).
* ``--concurrency`` requests at a time. A calibration pass of the whole schedule on the
  primary without hedging gives its p90 time to first token: that is ``hedge_after``. Then
  ``--rounds`` paired rounds, each a slice of the schedule run three ways in a rotating order
  (the fallback alone: its own time to first token; the primary without hedging; the primary
  with ``failover=Failover(hedge_after=p90)``), so that load from elsewhere on the shared
  machine falls on all three alike. Time to first token is from the call to the first text
  event; every reply's text is checked against the servers' deterministic answer.
* Extra requests: the fallback's requests during the hedged run, over the requests made.
* Goal (issue "failover mid-reply and hedged first tokens"): p99 with hedging within 1.5x of
  ``hedge_after`` plus the fallback's own p50 TTFT, with at most ~12% extra requests.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import time
from collections.abc import Sequence
from typing import Any

import fluxstream
from fluxstream import Failover, Upstream
from fluxstream.server import ServerThread

MSG = [{"role": "user", "content": "hello there"}]
SLOW_STALL = 3.0
FALLBACK_DELAY = 0.2


def schedule(n: int, seed: int) -> list[str]:
    """Each request's fault spec at the primary: a head delay, and for exactly 10% of them
    a 3 s stall before the first content."""
    rng = random.Random(seed)
    slow = [True] * (n // 10) + [False] * (n - n // 10)
    rng.shuffle(slow)
    specs = []
    for is_slow in slow:
        delay = 0.08 + 0.02 * rng.randrange(10)
        spec = f"delay={delay:.2f}"
        if is_slow:
            spec += f",stall={SLOW_STALL},stall-after-events=1"
        specs.append(spec)
    return specs


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


async def run(
    clients: dict[str, Any], specs: list[str], concurrency: int, expected: str,
    failover: Failover | None,
) -> list[float]:
    """Time to first token of each request, ``concurrency`` at a time."""
    ttft: list[float] = [0.0] * len(specs)
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            started = time.monotonic()
            stream = clients[specs[i]].chat.stream(model="m", messages=MSG, failover=failover)
            first = None
            text = ""
            async with stream:
                async for event in stream:
                    if event.type == "text":
                        if first is None:
                            first = time.monotonic()
                        text += event.text
            assert text == expected, (i, text[:40])
            assert first is not None
            ttft[i] = first - started

    await asyncio.gather(*(one(i) for i in range(len(specs))))
    return ttft


def show(name: str, ttft: list[float]) -> None:
    print(f"{name:<28} p50 {percentile(ttft, 50) * 1000:7.0f} ms   "
          f"p90 {percentile(ttft, 90) * 1000:7.0f} ms   p99 {percentile(ttft, 99) * 1000:7.0f} ms"
          f"   max {max(ttft) * 1000:7.0f} ms")


async def main(n: int, concurrency: int, seed: int, rounds: int) -> None:
    specs = schedule(n, seed)
    with ServerThread(profile="openai") as primary, \
            ServerThread(profile="openai", faults=f"delay={FALLBACK_DELAY}") as fallback:
        own = {"x-fluxstream-fault": f"delay={FALLBACK_DELAY}"}
        clients = {
            spec: fluxstream.AsyncClient(
                primary.base_url, api_key="k", headers={"x-fluxstream-fault": spec},
                fallbacks=[Upstream(fallback.base_url, api_key="k", headers=own)],
            )
            for spec in sorted(set(specs))
        }
        direct = fluxstream.AsyncClient(fallback.base_url, api_key="k")
        alone = {s: direct for s in specs}
        try:
            expected = (await direct.chat.complete(model="m", messages=MSG)).text
            print(f"{n} requests, concurrency {concurrency}, seed {seed}: "
                  f"{sum('stall' in s for s in specs)} with a {SLOW_STALL:.0f} s first token "
                  f"at the primary; the fallback's head delay {FALLBACK_DELAY * 1000:.0f} ms\n")
            calibration = await run(clients, specs, concurrency, expected, None)
            after = percentile(calibration, 90)
            show("calibration (no hedging)", calibration)
            hedging = Failover(hedge_after=after)
            # Paired rounds: each runs a slice of the schedule three ways, in a rotating
            # order, so a load spike from elsewhere on the machine hits them alike.
            results: dict[str, list[float]] = {"alone": [], "plain": [], "hedged": []}
            extra = 0
            took = 0.0
            size = -(-n // rounds)
            for r in range(rounds):
                part = specs[r * size:(r + 1) * size]
                order = ["alone", "plain", "hedged"]
                order = order[r % 3:] + order[:r % 3]
                for name in order:
                    before = len(fallback.records.requests)
                    started = time.monotonic()
                    if name == "alone":
                        results[name] += await run(alone, part, concurrency, expected, None)
                    else:
                        results[name] += await run(
                            clients, part, concurrency, expected,
                            hedging if name == "hedged" else None,
                        )
                    if name == "hedged":
                        extra += len(fallback.records.requests) - before
                        took += time.monotonic() - started
        finally:
            for client in [*clients.values(), direct]:
                await client.aclose()
    print()
    show("fallback alone", results["alone"])
    show("primary, no hedging", results["plain"])
    show(f"hedge_after={after * 1000:.0f} ms (p90)", results["hedged"])
    hedged, plain = results["hedged"], results["plain"]
    goal = 1.5 * (after + percentile(results["alone"], 50))
    p99 = percentile(hedged, 99)
    print(f"\nextra requests: {extra} of {n} ({100 * extra / n:.1f}%; goal at most ~12%)")
    print(f"p99 with hedging {p99 * 1000:.0f} ms; goal: within 1.5 x (hedge_after + the "
          f"fallback's p50) = {goal * 1000:.0f} ms: {'met' if p99 <= goal else 'NOT met'}")
    print(f"p99 without hedging {percentile(plain, 99) * 1000:.0f} ms "
          f"({percentile(plain, 99) / p99:.1f}x); hedged runs {took:.1f} s; "
          f"mean TTFT {statistics.fmean(plain) * 1000:.0f} -> "
          f"{statistics.fmean(hedged) * 1000:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=200, help="requests per run")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--rounds", type=int, default=4, help="paired rounds")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.concurrency, args.seed, args.rounds))
