"""Failover between upstreams on real sockets, two embedded servers: before content (a
retryable failure moves on once the upstream's own attempts are spent), after content (the
reply is continued on the next upstream, across APIs, with the exact text and contiguous
offsets at every cut point), a cut inside a tool call (restarted there with a ``Reset``), the
circuit breaker, and what the caller sees (one stream, a ``Handoff`` event, ``reply.segments``,
the resume token naming the serving upstream). Run on asyncio and trio, and on httpx with
``--transport httpx``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from shown_text import CONTINUES, read_shown

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Reset, Upstream
from fluxstream._reply import SegmentEnd
from fluxstream.apis import UnknownApiError
from fluxstream.errors import APIStatusError
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def fallback() -> Iterator[ServerThread]:
    with ServerThread(profile=CONTINUES) as running:
        yield running


def requests_to(server: ServerThread, path: str) -> int:
    return sum(1 for r in server.records.requests if r.path.endswith(path))


async def expected_chat(server: ServerThread, **extra: Any) -> fluxstream.Reply:
    """What the fallback answers the request by itself (the scripts are deterministic)."""
    async with fluxstream.AsyncClient(server.base_url, api_key="k") as client:
        return await client.chat.complete(model="m", messages=MSG, max_tokens=1024, **extra)



def test_upstream_is_a_checked_value_that_hides_its_key() -> None:
    up = Upstream("http://127.0.0.1:9/v1", api="anthropic_messages", api_key="sk-secret",
                  model="m2", max_tokens=99, headers={"X-A": "b"})
    assert "sk-secret" not in repr(up) and "sk-secret" not in up.label
    assert up.label == "127.0.0.1:9/v1/anthropic_messages"
    # the path is part of the place: two APIs behind one proxy host are two upstreams
    assert Upstream("http://u:p@h:1/openai/v1?key=k").label == "h:1/openai/v1/chat_completions"
    assert Upstream("http://h:1/anthropic/v1/").label == "h:1/anthropic/v1/chat_completions"
    assert up.header_map == {"x-a": "b"}
    assert hash(up) == hash(Upstream("http://127.0.0.1:9/v1", api="anthropic_messages",
                                     api_key="sk-secret", model="m2", max_tokens=99,
                                     headers={"X-A": "b"}))
    with pytest.raises(UnknownApiError):
        Upstream("http://h/v1", api="gemini-ish")
    with pytest.raises(ValueError):
        Upstream("ftp://h/v1")
    with pytest.raises(ValueError):
        Upstream("http://h/v1", max_tokens=0)
    with pytest.raises(ValueError):
        Failover(per_upstream_attempts=0)
    with pytest.raises(TypeError):
        fluxstream.AsyncClient("http://h/v1", fallbacks=["http://other/v1"])  # type: ignore[list-item]


async def test_without_fallbacks_nothing_changes(fallback: ServerThread) -> None:
    async with fluxstream.AsyncClient(fallback.base_url, api_key="k") as client:
        reply = await client.chat.complete(model="m", messages=MSG)
    assert reply.outcome is Outcome.DONE and reply.segments == []


async def test_before_content_moves_on_once_own_attempts_are_spent(
    fallback: ServerThread,
) -> None:
    expected = await expected_chat(fallback)
    with ServerThread(profile="openai", faults="status=503") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k",
            fallbacks=[Upstream(fallback.base_url, api_key="k2")],
            failover=Failover(per_upstream_attempts=2),
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024)
            shown, others = await read_shown(stream)
        assert requests_to(primary, "/messages") == 2
    reply = stream.reply
    assert shown == reply.text == expected.text
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert len(handoffs) == 1 and handoffs[0].offset == 0 and "503" in handoffs[0].reason
    first, second = reply.segments
    assert (first.api, first.start, first.end, first.requests) == ("anthropic_messages", 0, 0, 2)
    # the client's own base URL is named in the fallbacks' style (host:port/path/api)
    assert first.upstream == Upstream(primary.base_url, api="anthropic_messages").label
    assert second.upstream == Upstream(fallback.base_url).label
    assert (second.api, second.start, second.end, second.kind, second.ended) == (
        "chat_completions", 0, len(expected.text), SegmentEnd.DONE, "done")
    assert first.kind is SegmentEnd.FAILED and first.detail.startswith("APIStatusError")
    assert first.ended == f"failed: {first.detail}"


async def test_when_every_upstream_fails_before_content_the_last_failure_is_raised() -> None:
    """The error names what the last upstream said (the first one's is its cause), and the
    segments list every upstream asked."""
    with ServerThread(profile="openai", faults="status=503") as primary, ServerThread(
        profile="openai", faults="status=500"
    ) as broken:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(broken.base_url, api_key="k2")],
            failover=Failover(per_upstream_attempts=1),
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=64)
            with pytest.raises(APIStatusError) as raised:
                await read_shown(stream)
    assert raised.value.status_code == 500
    assert isinstance(raised.value.__cause__, APIStatusError)
    assert raised.value.__cause__.status_code == 503
    assert [s.api for s in stream.reply.segments] == ["anthropic_messages", "chat_completions"]


async def test_a_status_the_policy_would_not_retry_does_not_move_on(
    fallback: ServerThread,
) -> None:
    before = requests_to(fallback, "/chat/completions")
    with ServerThread(profile="openai", faults="status=400") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as client:
            with pytest.raises(APIStatusError):
                await client.chat.complete(model="m", messages=MSG)
    assert requests_to(fallback, "/chat/completions") == before


def _cuts() -> list[int]:
    # The Messages body of the reply is a few KB: cut at the head, in every early event,
    # and further on, where it is mid-event, mid-line and mid-UTF-8.
    return [*range(200, 1200, 37), 1500, 2600]


@pytest.mark.parametrize("cut", _cuts())
async def test_mid_reply_continued_across_apis_at_every_cut(
    fallback: ServerThread, cut: int, anyio_backend: str
) -> None:
    if anyio_backend == "trio" and cut % 3:
        pytest.skip("every third cut on trio: the asyncio run covers them all")
    expected = await expected_chat(fallback)
    with ServerThread(profile="openai", faults=f"drop-after={cut}") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k",
            fallbacks=[Upstream(fallback.base_url, api="chat_completions", api_key="k2")],
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=1024)
            shown, others = await read_shown(stream)
            token = stream.resume_token()
    reply = stream.reply
    assert reply.outcome is Outcome.DONE
    assert shown == reply.text == expected.text  # every character once, none missing
    assert not any(isinstance(e, Reset) for e in others)
    handoffs = [e for e in others if isinstance(e, Handoff)]
    assert len(handoffs) == 1
    first, second = reply.segments
    assert first.api == "anthropic_messages" and second.api == "chat_completions"
    assert first.start == 0 and first.end == second.start == handoffs[0].offset
    assert second.end == len(expected.text) and second.kind is SegmentEnd.DONE
    # broken off after its content, or before any (the earliest cuts): dropped, or failed
    assert first.kind is (SegmentEnd.DROPPED if first.end else SegmentEnd.FAILED)
    assert first.detail
    assert token["api"] == "chat_completions" and token["upstream"] == second.upstream
    assert reply.total_usage is not None


async def test_cut_inside_a_tool_call_restarts_it_on_the_next_upstream(
    fallback: ServerThread,
) -> None:
    tool = {"name": "lookup", "description": "look up",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}},
                             "required": ["q"]}}
    chat_tool = {"type": "function", "function": {"name": "lookup", "description": "look up",
                 "parameters": tool["input_schema"]}}
    expected = await expected_chat(fallback, tools=[chat_tool])
    assert expected.choices[0].tool_calls
    with ServerThread(profile="openai", faults="drop-after-events=6") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as client:
            stream = client.messages.stream(
                model="m", messages=MSG, max_tokens=1024, tools=[tool],
                tool_choice={"type": "tool", "name": "lookup"},
            )
            _, others = await read_shown(stream)
    reply = stream.reply
    kinds = [e.type for e in others]
    assert "handoff" in kinds and "reset" in kinds
    handoff = next(e for e in others if isinstance(e, Handoff))
    assert handoff.restarted
    assert kinds.index("reset") == kinds.index("handoff") + 1
    assert reply.outcome is Outcome.DONE
    assert [(c.name, c.arguments) for c in reply.choices[0].tool_calls] == [
        (c.name, c.arguments) for c in expected.choices[0].tool_calls
    ]


async def test_cool_down_skips_a_failing_upstream_for_a_while(fallback: ServerThread) -> None:
    with ServerThread(profile="openai", faults="status=503") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
            failover=Failover(per_upstream_attempts=1, cooldown_failures=1, cooldown=60),
        ) as client:
            first = await client.chat.complete(model="m", messages=MSG)
            assert requests_to(primary, "/chat/completions") == 1
            second = await client.chat.complete(model="m", messages=MSG)
            assert requests_to(primary, "/chat/completions") == 1  # skipped
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as other:  # the breaker is per client
            await other.chat.complete(model="m", messages=MSG)
            assert requests_to(primary, "/chat/completions") > 1
    assert first.segments[0].kind is SegmentEnd.FAILED
    assert first.segments[0].detail.startswith("APIStatusError")
    assert (second.segments[0].kind, second.segments[0].detail) == (SegmentEnd.COOLING_DOWN, "")
    assert second.segments[0].requests == 0
    assert second.outcome is Outcome.DONE and second.text == first.text


async def test_a_reply_cut_where_it_is_served_says_so_in_its_segment(
    fallback: ServerThread,
) -> None:
    """A sentinel without a finish reason (llama-cpp-python's interrupted stream) ends the
    reply ``truncated`` where it is: the serving segment's kind says so, with the reason."""
    from raw_upstream import HEAD, read_request, text, upstream

    async def interrupted(sock: Any, index: int) -> None:
        await read_request(sock)
        await sock.send(HEAD + text("Hello") + b"data: [DONE]\n\n")

    async with upstream(interrupted) as primary:
        async with fluxstream.AsyncClient(
            primary.base, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as client:
            reply = await client.chat.stream(model="m", messages=MSG).until_done()
    assert reply.outcome is Outcome.TRUNCATED and reply.text == "Hello"
    (only,) = reply.segments
    assert only.kind is SegmentEnd.TRUNCATED and "finish reason" in only.detail
    assert only.ended == f"truncated: {only.detail}" and (only.start, only.end) == (0, 5)
    assert only.usage is None and only.usage_estimate is not None  # estimated: it generated
