"""A frame's writes in one script call (``WRITES``, one Redis) against one ``EVALSHA`` per
write (``APPEND`` / ``REFRESH`` / ``RELEASE``, what a cluster runs): the same writes give the
same results and leave the same keys, on a real Redis, whatever each write meets (a lease
that is another's, entries lost, an entry that exists, a cancel, the end, a release)."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from relay_support import RedisServer

from fluxstream._events import End, Outcome, TextDelta
from fluxstream.errors import RelayLeaseLostError, RelayUnavailableError
from fluxstream.relay import RedisReplyLog
from fluxstream.relay._redis_writes import WRITES
from fluxstream.relay.codec import Entry
from fluxstream.relay.writer import Write

pytestmark = pytest.mark.anyio

KEYS = ["r0", "r1", "r{2} x"]


def shown(result: Any) -> Any:
    """A write's result, comparable across the two paths (an error by its type and what it
    says of the reply; the script's own wording differs)."""
    if isinstance(result, RelayLeaseLostError):
        return ("lease lost", "exists" in str(result))
    if isinstance(result, RelayUnavailableError):
        return ("unavailable", "lost entries" in str(result))
    assert not isinstance(result, Exception), result
    return result


async def state(log: RedisReplyLog, key: str) -> dict[str, Any]:
    """Everything the writes may change of ``key``'s reply (TTLs as set or not)."""
    k = log.keys(key)
    redis = log.redis
    entries = await redis.xrange(k["stream"])
    return {
        "entries": entries,
        "meta": await redis.hgetall(k["meta"]),
        "lease": await redis.get(k["lease"]),
        "ttls": [await redis.pttl(k[name]) > 0 for name in ("stream", "meta", "lease")],
        "cancel": await redis.exists(k["cancel"]),
    }


def frames(seed: int, *, repeats: bool = False) -> list[list[tuple[str, Any]]]:
    """A random run of frames: per frame, operations on some of the replies (``repeats``:
    several on one reply, as a stream's entry and its end in one frame)."""
    rng = random.Random(seed)
    plan = []
    for _ in range(25):
        frame = []
        count = rng.randint(1, len(KEYS))
        chosen = rng.choices(KEYS, k=count + 2) if repeats else rng.sample(KEYS, count)
        for key in chosen:
            frame.append((key, rng.choices(
                ["append", "append+token", "refresh", "gap", "again", "steal", "cancel",
                 "final", "release"],
                weights=[8, 2, 2, 1, 1, 1, 1, 1, 1],
            )[0]))
        plan.append(frame)
    return plan


async def play(log: RedisReplyLog, plan: list[list[tuple[str, Any]]]) -> list[Any]:
    """Create the replies, then write the plan frame by frame; every result, and the state
    after each frame."""
    numbers = dict.fromkeys(KEYS, 0)
    seen: list[Any] = []
    for key in KEYS:
        await log._create(key, "me", {"base": key})
    offset = 0
    for frame in plan:
        writes = []
        for key, op in frame:
            k = log.keys(key)
            if op == "steal":  # another producer holds the lease now
                await log.redis.set(k["lease"], "other", px=5000)
                op = "append"
            if op == "cancel":
                await log.redis.set(k["cancel"], "1", px=5000)
                op = "append"
            if op == "refresh":
                writes.append(Write(key, "me"))
            elif op == "release":
                writes.append(Write(key, "me", release=True))
            elif op == "final":
                numbers[key] += 1
                end = {"outcome": "done", "reason": None, "reply": None, "token": None}
                entry = Entry(numbers[key], (End(Outcome.DONE, None),), end)
                writes.append(Write(key, "me", entry, None, True))
            else:
                number = {"gap": numbers[key] + 2, "again": max(1, numbers[key])}.get(
                    op, numbers[key] + 1)
                if op.startswith("append"):
                    numbers[key] = number
                text = f"t{offset} é\"" if offset % 5 else ""  # an empty one now and then
                entry = Entry(number, (TextDelta("text", 0, offset, text),))
                offset += 1
                token = {"at": offset, "text": "é😀"} if op == "append+token" else None
                writes.append(Write(key, "me", entry, token))
        seen.append([shown(r) for r in await log._write_many(writes)])
        seen.append([await state(log, key) for key in KEYS])
    return seen


@pytest.mark.parametrize(("seed", "repeats"), [(seed, False) for seed in range(6)] + [
    (seed, True) for seed in range(6, 10)
])
async def test_one_script_per_frame_writes_what_one_script_per_write_does(
    redis_server: RedisServer, seed: int, repeats: bool
) -> None:
    plan = frames(seed, repeats=repeats)
    batched = RedisReplyLog(redis_server.url, prefix=f"batch{seed}:")
    single = RedisReplyLog(redis_server.url, prefix=f"single{seed}:")
    single._write_channel = None  # each write its own EVALSHA, as on a cluster
    try:
        assert await play(batched, plan) == await play(single, plan)
    finally:
        await batched.aclose()
        await single.aclose()


async def test_the_writes_of_a_frame_go_in_one_command(redis_server: RedisServer) -> None:
    """One Redis: a frame of writes to five replies is one script call (``INFO
    commandstats``: one ``evalsha`` more, whatever the number of streams)."""
    log = RedisReplyLog(redis_server.url, prefix="onecall:")
    keys = [f"k{i}" for i in range(5)]
    for key in keys:
        await log._create(key, "me", {})
    writes = [
        Write(key, "me", Entry(1, (TextDelta("text", 0, 0, "x"),))) for key in keys
    ]
    await log._write_many(writes[:1])  # the scripts loaded, the connection open

    async def evalsha_calls() -> int:
        stats = await log.redis.info("commandstats")
        return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

    before = await evalsha_calls()
    assert await log._write_many([
        Write(key, "me", Entry(2 if key == keys[0] else 1, (TextDelta("text", 0, 1, "y"),)))
        for key in keys
    ]) == [False] * 5
    assert await evalsha_calls() - before == 1
    await log.aclose()


def test_each_write_of_the_script_touches_only_the_keys_declared_for_it() -> None:
    """As every script of one reply names its keys as ``KEYS[n]``: here each write's
    function touches only its own four parameters, and is only given ``KEYS[k + 1..4]``."""
    functions = dict(re.findall(r"local function (\w+)\(s, m, l, c, ([^)]*)\)", WRITES))
    assert set(functions) == {"append", "refresh", "release"}
    calls = re.findall(r"redis\.call\('([A-Z]+)',\s*([^,)]+)", WRITES)
    assert calls
    for command, first in calls:
        assert first.strip() in ("s", "m", "l", "c"), (command, first)
    given = re.findall(r"pcall\((\w+), ([^\n]*)", WRITES)
    assert {name for name, _ in given} == set(functions)
    for _, args in given:
        assert args.startswith("KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4],"), args
    assert "KEYS[" not in WRITES.split("local out")[0]  # none inside the functions
