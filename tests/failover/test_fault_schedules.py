"""Failover under random fault schedules: 2-3 embedded servers, each upstream but the last
given a fault drawn at random (a drop after a random number of events, 503, 529, a stall, a
slow first token, an error event mid-reply, or an upstream of another API that ignores the
continuation and starts over); the last one answers. Whatever the schedule: the text is the
scripts' (every dialect scripts the same text for the same request), every character shown
once (``buf[offset:]`` rebuilds it exactly), the outcome is the last upstream's, the segments
are contiguous and name each upstream tried, and every connection the stream left is closed
(the servers record each response's end). asyncio and trio; aiohttp and httpx.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shown_text import CONTINUES

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Timeouts, Upstream
from fluxstream.server import ServerThread

MSG = [{"role": "user", "content": "hello there"}]
#: Fewer deltas than any dialect's default: every dialect scripts the same text, cut ``length``.
TOKENS = 24
#: Deadlines the stall and slow-first-token faults pass (the faults last far longer).
TIMEOUTS = Timeouts(stall=0.5, first_token=0.5)

FAULTS = st.one_of(
    st.integers(min_value=1, max_value=20).map(lambda k: ("drop", f"drop-after-events={k}")),
    st.just(("status", "status=503")),
    st.just(("status", "status=529")),
    st.integers(min_value=1, max_value=12).map(
        lambda k: ("stall", f"stall=4,stall-after-events={k}")),
    st.just(("slow", "delay=4")),
    st.just(("error", "error-midstream")),
    st.just(("restarts", "responses")),
)


@pytest.fixture(scope="module")
def servers() -> Iterator[list[ServerThread]]:
    with ServerThread(profile=CONTINUES) as a, ServerThread(profile=CONTINUES) as b, \
            ServerThread(profile=CONTINUES) as c:
        yield [a, b, c]


def _headers(fault: tuple[str, str] | None) -> dict[str, str]:
    """The per-request fault and profile of one upstream: the client's ``headers=`` for its
    own base URL, each fallback's own ``Upstream.headers`` (the client's never reach a
    fallback, so a clean fallback needs none; neutral ones are sent all the same)."""
    kind, spec = fault or ("clean", "")
    return {
        "x-fluxstream-fault": spec if kind not in ("clean", "error", "restarts") else "delay=0",
        "x-fluxstream-profile": f"error-midstream,{CONTINUES}" if kind == "error" else CONTINUES,
    }


async def _settled(server: ServerThread) -> bool:
    """Every request the server took has its response's end recorded (bounded wait)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if len(server.records.responses) >= len(server.records.requests):
            return True
        await anyio.sleep(0.02)
    return False


async def _scenario(servers: list[ServerThread], faults: list[tuple[str, str]],
                    expected: str) -> None:
    primary, *rest = servers[: len(faults) + 1]
    fallbacks = []
    for i, server in enumerate(rest):
        fault = faults[i + 1] if i + 1 < len(faults) else None
        api = "responses" if fault is not None and fault[0] == "restarts" else "chat_completions"
        fallbacks.append(Upstream(server.base_url, api=api, headers=_headers(fault),
                                  name=f"up{i + 1}"))
    first = faults[0] if faults[0][0] != "restarts" else None
    async with fluxstream.AsyncClient(
        primary.base_url, api_key="k", headers=_headers(first), fallbacks=fallbacks,
        failover=Failover(per_upstream_attempts=1, cooldown_failures=10_000),
        timeouts=TIMEOUTS, resume=fluxstream.ResumePolicy(last_event_id=False),
    ) as client:
        stream = client.messages.stream(model="m", messages=MSG, max_tokens=TOKENS)
        shown = ""
        handoffs: list[Handoff] = []
        with anyio.fail_after(30):
            async with stream:
                async for event in stream:
                    if event.type == "text":
                        assert event.offset == len(shown), (event.offset, len(shown))
                        shown += event.text
                    elif isinstance(event, Handoff):
                        assert event.offset == len(shown)
                        handoffs.append(event)
                    assert event.type != "reset"
    reply = stream.reply
    assert shown == reply.text == expected, faults
    assert reply.outcome is Outcome.DONE
    segments = reply.segments
    # The first healthy upstream serves the rest ("restarts" is healthy: it only ignores the
    # continuation), the last one always is.
    chain = [*faults, None]
    served = next(i for i, f in enumerate(chain) if f is None or f[0] == "restarts")
    assert len(segments) == len(handoffs) + 1 == served + 1, faults
    assert segments[0].start == 0 and segments[-1].end == len(expected)
    assert all(a.end == b.start for a, b in pairwise(segments))
    assert segments[-1].kind == "done"
    assert all(s.kind != "done" for s in segments[:-1])
    for server in servers[: len(segments)]:
        assert await _settled(server), "a connection the stream left was never closed"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_any_fault_schedule_ends_in_one_whole_reply(
    servers: list[ServerThread], backend: str
) -> None:
    async def plain() -> str:
        async with fluxstream.AsyncClient(servers[0].base_url, api_key="k") as client:
            reply = await client.messages.complete(model="m", messages=MSG, max_tokens=TOKENS)
        return reply.text

    expected = anyio.run(plain, backend=backend)

    @settings(max_examples=12, derandomize=True, deadline=None, database=None)
    @given(faults=st.lists(FAULTS, min_size=1, max_size=2))
    def check(faults: list[Any]) -> None:
        anyio.run(_scenario, servers, faults, expected, backend=backend)

    check()
