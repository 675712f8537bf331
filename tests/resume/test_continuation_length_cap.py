"""Every continuation asks for what is left of the length cap, with or without fallbacks.

A continuation is a new request, and a provider counts its cap from there: asked for the whole
cap again after text was delivered, it delivers past the cap the caller set (and bills for it).
So the ``continuation`` resume strategy of a stream without fallbacks, and a continuation
resumed from a token (continued where it was served, or by that strategy), ask for the cap
minus the output already delivered (its estimate: a token per delta here, or a token per four
characters of a token's text), and a reply with nothing left ends ``finished`` with stop
``length`` instead of asking (as failover's continuations do: tests/failover/test_length_budget.py).

The embedded server's ``prefix-as-input`` profile counts a continuation's cap as providers
count a prefill's (only what it generates), so a client asking for what is left ends with
exactly the uninterrupted reply. Real sockets, asyncio and trio, aiohttp and httpx
(``--transport httpx``).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest
from raw_upstream import FINISH, HEAD, LIFE, read_request, text, upstream
from shown_text import CONTINUES, read_shown

import fluxstream
from fluxstream import Outcome, ResumePolicy, Upstream
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
#: message_start, content_block_start, ping, then eight text deltas: the cut follows them.
EIGHT_DELTAS = "drop-after-events=11,fail-first=1"
ONCE = {"X-Fluxstream-Attempt-Key": "continuation-cap"}
CONTINUATION = ResumePolicy(continuation=True, last_event_id=False)
CAP = 40
SHOWN_TOKENS = 8


def messages_sent(server: ServerThread) -> list[Any]:
    return [r.json for r in server.records.requests if r.path.endswith("/messages")]


async def uninterrupted(cap: int) -> str:
    with ServerThread(profile=CONTINUES) as plain:
        async with fluxstream.AsyncClient(plain.base_url, api_key="k") as client:
            reply = await client.messages.complete(model="m", messages=MSG, max_tokens=cap)
    return reply.text


async def cut_after_eight(cap: int) -> tuple[fluxstream.ReplyStream, str, list[Any], list[Any]]:
    """A stream without fallbacks cut after eight deltas, resumed by continuation."""
    with ServerThread(profile=CONTINUES, faults=EIGHT_DELTAS) as server:
        async with fluxstream.AsyncClient(
            server.base_url, api_key="k", headers=ONCE, resume=CONTINUATION,
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=cap)
            shown, others = await read_shown(stream)
        return stream, shown, others, messages_sent(server)


async def test_the_continuation_strategy_asks_for_what_is_left_of_the_cap() -> None:
    stream, shown, _, sent = await cut_after_eight(CAP)
    reply = stream.reply
    assert reply.outcome is Outcome.DONE, (reply.outcome, stream.cause)
    assert shown == reply.text == await uninterrupted(CAP)
    first, continued = sent
    assert first["max_tokens"] == CAP
    assert continued["messages"][-1]["role"] == "assistant"  # the prefill
    assert continued["max_tokens"] == CAP - SHOWN_TOKENS


async def test_the_continuation_strategy_with_the_cap_spent_ends_at_length() -> None:
    stream, shown, others, sent = await cut_after_eight(SHOWN_TOKENS)
    assert len(sent) == 1  # nothing left to ask for
    reply = stream.reply
    assert reply.outcome is Outcome.FINISHED, (reply.outcome, reply.end_reason)
    assert shown == reply.text and reply.text
    (choice,) = reply.choices
    assert (choice.finish_reason, choice.stop) == ("length", "length")
    assert [e.type for e in others][-2:] == ["finish", "end"]
    assert stream.stats.resumes == 0


# ---------------------------------------------------------------- from a resume token

#: Three deltas of sixteen characters: 48 code points, counted as 12 tokens (no delta count
#: travels in a token), past a cap of 10. A real tokenizer cuts some text finer than four
#: characters a token (code, CJK): the text shown can reach the cap by its own count.
LONG = ("sixteen chars ab", "cdefghijklmnopqr", "stuvwxyz01234567")
SPENT_CAP = 10


def _primary(asked: list[int]) -> Any:
    """The first connection streams :data:`LONG` and waits for the client to leave; any
    later one (a continuation that should not be asked) answers a short finished reply."""

    async def script(sock: anyio.abc.SocketStream, index: int) -> None:
        await read_request(sock)
        asked.append(index)
        if index:
            await sock.send(HEAD + text(" more") + FINISH + b"data: [DONE]\n\n")
            return
        await sock.send(HEAD + b"".join(text(t) for t in LONG))
        with anyio.move_on_after(LIFE):  # until the client leaves (the token is taken)
            try:
                while await sock.receive():
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                pass

    return script


async def token_of_long_text(client: fluxstream.AsyncClient) -> dict[str, Any]:
    stream = client.chat.stream(model="m", messages=MSG, max_tokens=SPENT_CAP)
    shown = ""
    with anyio.fail_after(LIFE):
        async with stream:
            async for event in stream:
                if event.type == "text":
                    shown += event.text
                    if shown == "".join(LONG):
                        break
            return stream.resume_token()


@pytest.mark.parametrize("fallbacks", [False, True], ids=["continuation-strategy", "route"])
async def test_a_token_whose_cap_is_spent_ends_at_length(fallbacks: bool) -> None:
    """Continued where it was served (a client with fallbacks: the reply's own upstream),
    or by the continuation strategy (no fallbacks): nothing is asked, the reply ends at
    ``length`` (it used to raise "nothing to resume" on a route, or ask the whole cap)."""
    asked: list[int] = []
    async with upstream(_primary(asked)) as primary, upstream(_primary([])) as other:
        extra: dict[str, Any] = (
            {"fallbacks": [Upstream(other.base)]} if fallbacks else {"resume": CONTINUATION}
        )
        async with fluxstream.AsyncClient(primary.base, api_key="k", **extra) as client:
            token = await token_of_long_text(client)
            assert token["reply"]["choices"][0]["text"] == "".join(LONG)
            resumed = client.chat.resume(token)
            with anyio.fail_after(LIFE):
                async with resumed:
                    events = [event async for event in resumed]
        assert asked == [0] and other.connections == 0  # nothing asked of anyone
    reply = resumed.reply
    assert reply.outcome is Outcome.FINISHED, (reply.outcome, reply.end_reason)
    assert reply.text == "".join(LONG)
    assert not any(e.type == "text" for e in events)  # nothing new was shown
    (choice,) = reply.choices
    assert (choice.finish_reason, choice.stop) == ("length", "length")
    assert [e.type for e in events][-2:] == ["finish", "end"]
