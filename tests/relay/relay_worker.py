"""A relay worker in its own OS process, for the multi-process relay tests.

``produce REDIS BASE_URL LEASE KEY[,KEY...] TOKENS DRIP[,DRIP...] [only]``: records one stream
per key (each with its own server drip; ``only``: recorded as the stream's only consumer), prints
``ready`` once every key is recorded, then ``done KEY OUTCOME`` per stream.
``follow REDIS KEY JOIN[,JOIN...] [CANCEL_AFTER]``: follows ``KEY`` once per join (``start``: at
once; ``middle``: once a few entries exist; ``end``: once it ended) and prints one JSON summary
per join; with ``CANCEL_AFTER`` > 0 it cancels the reply after that many
text deltas and prints the ``time.monotonic()`` of the call first (the clock is system-wide).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

import fluxstream
from fluxstream.relay import RedisReplyLog, ReplyLog

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from relay_support import request


def say(obj: Any) -> None:
    print(obj if isinstance(obj, str) else json.dumps(obj), flush=True)


async def produce(url: str, base_url: str, lease: float, keys: list[str], tokens: int,
                  drips: list[float], only: bool) -> None:
    log = RedisReplyLog(url, lease=lease)
    async with fluxstream.AsyncClient(base_url) as client:
        async with anyio.create_task_group() as tg:
            ready = 0

            async def one(key: str, drip: float) -> None:
                nonlocal ready
                headers = {"X-Fluxstream-Fault": f"drip={drip}"}
                stream = client.chat.stream(
                    content_key=key, extra_headers=headers, **request(tokens=tokens)
                )
                async with log.record(stream, only_consumer=only) as recorded:
                    ready += 1
                    if ready == len(keys):
                        say("ready")
                    async for _ in recorded:
                        pass
                say(f"done {key} {recorded.outcome.value if recorded.outcome else None}")

            for key, drip in zip(keys, drips, strict=True):
                tg.start_soon(one, key, drip)
    await log.aclose()


async def wait_for(log: ReplyLog, key: str, join: str) -> bool:
    """Wait until it is time to join; returns whether the reply had ended by then."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = await log._state(key)
        if state.exists and (
            join == "start" or (join == "middle" and state.last >= 5) or state.ended
        ):
            return state.ended
        await anyio.sleep(0.002)
    raise TimeoutError(f"{key} not ready for {join}")


async def follow(url: str, key: str, joins: list[str], cancel_after: int) -> None:
    log = RedisReplyLog(url)
    for join in joins:
        ended = await wait_for(log, key, join)
        text, offsets_ok, positions_ok, deltas = "", True, True, 0
        last_position = None
        end: Any = None
        with anyio.fail_after(30):
            async for item in log.follow(key):
                if last_position is not None and item.position <= last_position:
                    positions_ok = False
                last_position = item.position
                event = item.event
                if isinstance(event, fluxstream.TextDelta):
                    offsets_ok = offsets_ok and event.offset == len(text)
                    text += event.text
                    deltas += 1
                    if deltas == cancel_after:
                        say({"cancel_at": time.monotonic()})
                        await log.cancel(key)
                elif isinstance(event, fluxstream.End):
                    end = event
        say({"join": join, "ended_at_join": ended, "text": text, "offsets_ok": offsets_ok,
             "positions_ok": positions_ok, "outcome": end.outcome.value if end else None,
             "reason": end.reason if end else None})
    await log.aclose()


def main() -> None:
    command, args = sys.argv[1], sys.argv[2:]
    if command == "produce":
        url, base_url, lease, keys, tokens, drips = args[:6]
        anyio.run(produce, url, base_url, float(lease), keys.split(","), int(tokens),
                  [float(d) for d in drips.split(",")], args[6:] == ["only"])
    elif command == "follow":
        url, key, joins = args[:3]
        cancel_after = int(args[3]) if len(args) > 3 else 0
        anyio.run(follow, url, key, joins.split(","), cancel_after)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
