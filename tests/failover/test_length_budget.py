"""The length cap of a reply that moved between upstreams, and the bill of every upstream.

A continuation asks for what is left of the request's cap: the cap minus the output already
delivered (each part's reported usage, else its estimate), in the field the continuing API
keeps it in (Gemini's ``generationConfig.maxOutputTokens``), never more than that upstream's
own ``max_tokens``; when nothing is left, the reply ends ``finished`` with stop ``length``
and nothing is asked. Every part that delivered content carries its usage or, when none
(or only an early snapshot) came, its estimate, and ``reply.total_usage`` adds them up,
saying when any of it is estimated.

The primary is an Anthropic-style embedded server cut after exactly 8 text deltas (its
``message_start`` sent the placeholder ``output_tokens: 1``): 8 tokens shown. Real sockets,
asyncio and trio, aiohttp and httpx (``--transport httpx``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from raw_upstream import upstream
from shown_text import CONTINUES, read_shown
from test_resume_after_handoff import _cut_primary, _ignoring_fallback

import fluxstream
from fluxstream import Failover, Handoff, Outcome, Upstream
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
#: message_start, content_block_start, ping, then eight text deltas: the cut follows them.
EIGHT_DELTAS = "drop-after-events=11"
CAP = 40
SHOWN_TOKENS = 8


@pytest.fixture(scope="module")
def fallback() -> Iterator[ServerThread]:
    with ServerThread(profile=CONTINUES) as running:
        yield running


def last_request(server: ServerThread, path: str) -> Any:
    return [r for r in server.records.requests if r.path.endswith(path)][-1].json


async def cut_after_eight(
    fallbacks: list[Upstream], *, cap: int = CAP
) -> tuple[fluxstream.ReplyStream, str, list[Any]]:
    with ServerThread(faults=EIGHT_DELTAS) as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=fallbacks,
            failover=Failover(per_upstream_attempts=1),
        ) as client:
            stream = client.messages.stream(model="m", messages=MSG, max_tokens=cap)
            shown, others = await read_shown(stream)
    return stream, shown, others


async def test_a_continuation_asks_for_the_cap_minus_what_was_shown(
    fallback: ServerThread,
) -> None:
    stream, shown, others = await cut_after_eight([Upstream(fallback.base_url, api_key="k2")])
    reply = stream.reply
    assert reply.outcome is Outcome.DONE and shown == reply.text
    (handoff,) = [e for e in others if isinstance(e, Handoff)]
    assert handoff.offset == reply.segments[0].end and not handoff.restarted
    sent = last_request(fallback, "/chat/completions")
    assert sent["messages"][-1]["role"] == "assistant"  # the continuation
    assert sent["max_tokens"] == CAP - SHOWN_TOKENS


@pytest.mark.parametrize(("own", "asked"), [(10, 10), (1000, CAP - SHOWN_TOKENS)])
async def test_an_upstreams_own_max_tokens_bounds_what_is_left(
    fallback: ServerThread, own: int, asked: int
) -> None:
    await cut_after_eight([Upstream(fallback.base_url, api_key="k2", max_tokens=own)])
    assert last_request(fallback, "/chat/completions")["max_tokens"] == asked


@pytest.mark.parametrize(("api", "path"), [
    ("gemini", ":streamGenerateContent"), ("responses", "/responses"),
])
async def test_each_api_is_asked_in_its_own_cap_field(api: str, path: str) -> None:
    with ServerThread() as other:
        stream, shown, _ = await cut_after_eight([Upstream(other.base_url, api=api)])
        sent = last_request(other, path)
    assert stream.reply.outcome is Outcome.DONE and shown == stream.reply.text
    if api == "gemini":
        assert sent["generationConfig"]["maxOutputTokens"] == CAP - SHOWN_TOKENS
        assert "maxOutputTokens" not in sent  # Google refuses fields it does not know
    else:
        assert sent["max_output_tokens"] == CAP - SHOWN_TOKENS


async def test_a_cap_already_spent_ends_the_reply_at_length_without_asking(
    fallback: ServerThread,
) -> None:
    before = len(fallback.records.requests)
    stream, shown, others = await cut_after_eight(
        [Upstream(fallback.base_url, api_key="k2")], cap=SHOWN_TOKENS)
    assert len(fallback.records.requests) == before  # nothing left to ask for
    reply = stream.reply
    assert reply.outcome is Outcome.FINISHED, (reply.outcome, reply.end_reason)
    assert shown == reply.text and reply.text
    (choice,) = reply.choices
    assert (choice.finish_reason, choice.stop) == ("length", "length")
    assert not any(isinstance(e, Handoff) for e in others)
    finishes = [e for e in others if e.type == "finish"]
    assert len(finishes) == 1 and finishes[0].stop == "length"
    assert others[-1].type == "end" and others[-1].outcome is Outcome.FINISHED
    (only,) = reply.segments
    assert only.kind == "dropped" and only.end == len(shown)
    assert only.usage_estimate is not None and only.usage_estimate.output_tokens == 8


async def test_a_primary_killed_mid_reply_is_billed_by_its_estimate(
    fallback: ServerThread,
) -> None:
    stream, _, _ = await cut_after_eight([Upstream(fallback.base_url, api_key="k2")])
    reply = stream.reply
    first, second = reply.segments
    # Its message_start said output_tokens 1: a placeholder, never its bill.
    assert first.usage_estimate is not None and first.usage_estimate.estimated
    assert first.usage_estimate.output_tokens == SHOWN_TOKENS
    assert first.usage_estimate.input_tokens == 3  # the snapshot's input count is real
    assert second.usage is not None and second.usage_estimate is None  # reported, final
    total = reply.total_usage
    assert total is not None and total.estimated is True
    assert total.completion_tokens == SHOWN_TOKENS + (second.usage.completion_tokens or 0)
    assert total.prompt_tokens == 3 + (second.usage.prompt_tokens or 0)


async def test_a_primary_that_never_reports_usage_is_billed_by_its_estimate(
    fallback: ServerThread,
) -> None:
    """A Chat Completions primary sends its usage only at the end: cut, it sent none."""
    with ServerThread(profile="openai", faults="drop-after-events=9") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
            failover=Failover(per_upstream_attempts=1),
            resume=fluxstream.ResumePolicy(last_event_id=False),
        ) as client:
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=CAP,
                                               include_usage=True)
    first, second = reply.segments
    assert first.usage is None and first.usage_estimate is not None
    assert first.usage_estimate.output_tokens > 0
    total = reply.total_usage
    assert total is not None and total.estimated
    assert second.usage is not None
    assert total.completion_tokens == (first.usage_estimate.output_tokens
                                       + (second.usage.completion_tokens or 0))


async def test_reported_usage_everywhere_is_no_estimate(fallback: ServerThread) -> None:
    with ServerThread(profile="openai") as primary:
        async with fluxstream.AsyncClient(
            primary.base_url, api_key="k", fallbacks=[Upstream(fallback.base_url)],
        ) as client:
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=CAP)
    (only,) = reply.segments
    assert only.usage is not None and only.usage_estimate is None
    total = reply.total_usage
    assert total is not None and total.estimated is False
    assert total.completion_tokens == only.usage.completion_tokens


# ---------------------------------------------------------------- continuing where it is


async def test_continuing_on_the_same_upstream_counts_what_it_delivered_too() -> None:
    seen: list[tuple[dict[str, str], Any]] = []
    async with upstream(_cut_primary) as primary, upstream(_ignoring_fallback(seen)) as fb:
        async with fluxstream.AsyncClient(
            primary.base, api_key="k", fallbacks=[Upstream(fb.base)],
        ) as client:
            reply = await client.chat.complete(model="m", messages=MSG, max_tokens=CAP)
    assert reply.text == "Hello, world, and more text." and reply.outcome is Outcome.DONE
    (_, first), (_, again), (_, third) = seen
    # Two deltas shown by the primary, then two by the fallback before it broke off.
    assert first["max_tokens"] == again["max_tokens"] == CAP - 2
    assert third["messages"][-1]["content"] == "Hello, world, and more"
    assert third["max_tokens"] == CAP - 4
