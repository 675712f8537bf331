"""Usage on every outcome and cost (``fluxstream._usage``): the estimate when no usage came, the
input tokens remembered per content key, prices per model; the log lines of a stream carry its
content key and request id. No OpenTelemetry needed for any of it."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from decimal import Decimal

import pytest

import fluxstream
from fluxstream._reply import Choice, Reply, UsageEstimate
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream._usage import ModelPrice, UsageLedger, estimate_output_tokens
from fluxstream._wire import PromptTokensDetails, Usage
from fluxstream.server import ServerThread

MSG = [{"role": "user", "content": "hi there"}]
NO_RESUME = ResumePolicy(last_event_id=False, starting_after=False)


def test_one_token_per_short_delta_and_four_characters_a_token_past_that() -> None:
    assert estimate_output_tokens(0, 0) == 0
    assert estimate_output_tokens(10, 40) == 10  # 4 characters a delta: a token each
    assert estimate_output_tokens(10, 80) == 10  # 8 still
    assert estimate_output_tokens(10, 400) == 100  # batched deltas: characters / 4
    assert estimate_output_tokens(3, 2) == 3  # never fewer than the deltas


def test_prices_give_a_decimal_cost_with_cached_input_apart() -> None:
    price = ModelPrice(input="2.50", output="10", cached_input="1.25")
    # 600 x 2.50 + 400 x 1.25 + 500 x 10, per million
    assert price.cost(1_000, 500, cached_tokens=400) == Decimal("0.007")
    assert ModelPrice(input=1, output=2).cost(1_000_000, 0, cached_tokens=10) == Decimal(1)


def test_the_ledger_remembers_input_tokens_per_content_key_and_prices_estimates() -> None:
    ledger = UsageLedger({"m": ModelPrice(input="1", output="2")})
    reported = Reply(content_key="k", model="m", usage=Usage(
        prompt_tokens=100, completion_tokens=10,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=0),
    ))
    estimate, cost = ledger.settle(reported, content_events=10, model="m")
    assert estimate is None and cost == Decimal("0.00012")
    bare = Reply(content_key="k", model=None)
    estimate, cost = ledger.settle(bare, content_events=7, model="m")  # the request's model
    assert estimate == UsageEstimate(output_tokens=7, input_tokens=100)
    assert cost == Decimal("0.000114")
    other, _ = ledger.settle(Reply(content_key="other"), content_events=3, model="m")
    assert other is not None and other.input_tokens is None
    unpriced, no_cost = UsageLedger().settle(Reply(content_key="k"), 2, "m")
    assert unpriced == UsageEstimate(output_tokens=2) and no_cost is None


def _settling_replies() -> list[Reply]:
    """Replies of every kind a stream ends with: final usage, a partial snapshot, none, an
    estimate already there (a resumed reply's), content to estimate from, another key."""
    text = [Choice(index=0, text="x" * 37)]
    final = Usage(prompt_tokens=40, completion_tokens=9)
    return [
        Reply(content_key="k", model="m", usage=final, choices=text),
        Reply(content_key="k", model="m", usage=Usage(prompt_tokens=None, completion_tokens=3)),
        Reply(content_key="k", model="m", usage=final, usage_partial=True, choices=text),
        Reply(content_key="k", model="other", choices=text),
        Reply(content_key="k", usage_estimate=UsageEstimate(output_tokens=5)),
        Reply(content_key="", choices=text),
        Reply(content_key="new", model="m", usage=Usage(completion_tokens=2), choices=text),
    ]


@pytest.mark.parametrize("priced", [False, True])
def test_settling_from_the_parts_equals_settling_the_whole_reply(priced: bool) -> None:
    """A stream's end settles from the reply's usage parts (no snapshot unless the content
    must be estimated or priced): the same estimates, costs and remembered input counts as
    settling the whole reply, in any order of replies."""
    prices = {"m": ModelPrice(input="1", output="3")} if priced else None
    whole, parts = UsageLedger(prices), UsageLedger(prices)
    asked = 0

    def snapshot(reply: Reply) -> Reply:
        nonlocal asked
        asked += 1
        return reply

    for reply in _settling_replies() * 2:
        before = asked
        got = parts.settle_parts(
            reply.content_key, reply.usage, reply.usage_estimate, reply.usage_partial,
            4, "m", lambda reply=reply: snapshot(reply),  # type: ignore[misc]
        )
        assert got == whole.settle(reply, 4, "m")
        assert parts._inputs == whole._inputs
        needs_content = reply.usage_estimate is None and (
            reply.usage is None or reply.usage_partial)
        assert asked - before == (1 if needs_content or priced else 0)



@pytest.mark.anyio
async def test_a_reply_with_usage_has_no_estimate_and_a_cost(server: ServerThread) -> None:
    prices = {"m": ModelPrice(input="3", output="15")}
    async with fluxstream.AsyncClient(server.base_url, prices=prices) as client:
        reply = await client.chat.complete(model="m", messages=MSG, max_tokens=8)
    assert reply.usage is not None and reply.usage_estimate is None
    want = prices["m"].cost(reply.usage.prompt_tokens or 0, reply.usage.completion_tokens or 0)
    assert reply.cost == want and isinstance(reply.cost, Decimal)


@pytest.mark.anyio
async def test_a_cut_stream_gets_an_estimate_with_the_keys_input_tokens(
    server: ServerThread,
) -> None:
    prices = {"m": ModelPrice(input="1", output="1")}
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME, prices=prices) as c:
        first = await c.chat.complete(model="m", messages=MSG, max_tokens=30)
        assert first.usage is not None
        cut = await c.chat.stream(
            model="m", messages=MSG, max_tokens=30, content_key=first.content_key,
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=5"},
        ).until_done()
        silent = await c.chat.complete(model="m", messages=MSG, max_tokens=30,
                                       include_usage=False)
    assert cut.outcome is fluxstream.Outcome.TRUNCATED and cut.usage is None
    estimate = cut.usage_estimate
    assert estimate is not None and estimate.estimated
    assert estimate.input_tokens == first.usage.prompt_tokens
    assert 1 <= estimate.output_tokens < (first.usage.completion_tokens or 0)
    assert cut.cost == prices["m"].cost(estimate.input_tokens or 0, estimate.output_tokens)
    # Read to its end without usage: the estimate of a whole reply, no input tokens known.
    assert silent.usage is None and silent.usage_estimate is not None
    assert silent.usage_estimate.input_tokens is None
    assert silent.usage_estimate.output_tokens == first.usage.completion_tokens
    # Serialised, an estimate says it is one.
    assert cut.model_dump(mode="json")["usage_estimate"]["estimated"] is True


@pytest.mark.anyio
async def test_a_cancelled_stream_has_its_estimate_on_the_reply(server: ServerThread) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.chat.stream(model="m", messages=MSG, max_tokens=50,
                                      extra_headers={"X-Fluxstream-Fault": "drip=0.02"}) as s:
            async for event in s:
                if isinstance(event, fluxstream.TextDelta) and event.offset > 10:
                    break
    reply = s.reply
    assert reply.outcome is fluxstream.Outcome.CANCELLED and reply.usage is None
    assert reply.usage_estimate is not None and reply.usage_estimate.output_tokens >= 2
    assert reply.cost is None  # no prices given


@pytest.mark.anyio
async def test_every_log_line_of_a_stream_carries_its_content_key_and_request_id(
    server: ServerThread, caplog: pytest.LogCaptureFixture
) -> None:
    fast = RetryPolicy(max_attempts=3, base_delay=0.0, max_delay=0.0)
    with caplog.at_level(logging.DEBUG, logger="fluxstream"):
        async with fluxstream.AsyncClient(server.base_url, retry=fast) as client:
            await client.chat.complete(model="m", messages=MSG, content_key="key-1",
                                       extra_headers={"X-Fluxstream-Fault": "fail-first=1"})
            await client.chat.complete(
                model="m", messages=MSG, content_key="key-2", max_tokens=20,
                extra_headers={"X-Fluxstream-Fault": "drop-after-events=3,fail-first=1"},
            )
    records = [r for r in caplog.records if r.name == "fluxstream"]
    assert any("retry" in r.getMessage() for r in records)
    assert any("resuming" in r.getMessage() for r in records)
    for record in records:
        assert record.content_key in ("key-1", "key-2"), record.getMessage()  # type: ignore[attr-defined]
        assert hasattr(record, "request_id")
    resumed = next(r for r in records if "resuming" in r.getMessage())
    assert resumed.request_id.startswith("req_")  # type: ignore[attr-defined]


def test_nothing_imports_opentelemetry_unless_it_is_used(server: ServerThread) -> None:
    """A stream of a plain client, and the whole package imported, load no OpenTelemetry."""
    code = textwrap.dedent(f"""
        import sys, anyio, fluxstream, fluxstream._usage, fluxstream._observe
        async def main():
            async with fluxstream.AsyncClient({server.base_url!r}) as client:
                await client.chat.complete(model="m", messages=[{{"role": "user", "content": "x"}}])
        anyio.run(main)
        names = ("opentelemetry", "fluxstream.otel")
        loaded = sorted(m for m in sys.modules if m.startswith(names))
        assert not loaded, loaded
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------------- a snapshot is not the bill

#: message_start, content_block_start, ping, then eight text deltas: the cut follows them.
EIGHT_DELTAS = {"X-Fluxstream-Fault": "drop-after-events=11"}


@pytest.mark.anyio
async def test_an_anthropic_stream_cut_after_message_start_is_billed_by_its_estimate(
    server: ServerThread,
) -> None:
    """``message_start`` says ``output_tokens: 1`` before any text: a placeholder. A stream
    that ends before ``message_delta``'s count is estimated, never billed one token."""
    price = ModelPrice(input="3", output="15")
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME,
                                      prices={"m": price}) as client:
        reply = await client.messages.stream(model="m", messages=MSG, max_tokens=40,
                                             extra_headers=EIGHT_DELTAS).until_done()
    assert reply.outcome is fluxstream.Outcome.TRUNCATED
    assert reply.usage is not None and reply.usage.completion_tokens == 1  # as it came
    assert reply.usage_partial
    estimate = reply.usage_estimate
    assert estimate is not None and estimate.estimated
    assert estimate.output_tokens == 8 and estimate.input_tokens == reply.usage.prompt_tokens
    assert reply.cost == price.cost(estimate.input_tokens or 0, 8)
    total = reply.total_usage
    assert total is not None and total.estimated and total.completion_tokens == 8


@pytest.mark.anyio
async def test_a_cancelled_anthropic_stream_is_billed_by_its_estimate(
    server: ServerThread,
) -> None:
    async with fluxstream.AsyncClient(server.base_url) as client:
        async with client.messages.stream(model="m", messages=MSG, max_tokens=50,
                                          extra_headers={"X-Fluxstream-Fault": "drip=0.02"}
                                          ) as stream:
            deltas = 0
            async for event in stream:
                deltas += event.type == "text"
                if deltas == 5:
                    break
    reply = stream.reply
    assert reply.outcome is fluxstream.Outcome.CANCELLED and reply.usage_partial
    assert reply.usage_estimate is not None and reply.usage_estimate.output_tokens >= 5


@pytest.mark.anyio
async def test_a_gemini_stream_cut_on_its_running_usage_is_estimated(
    server: ServerThread,
) -> None:
    """Gemini's ``usageMetadata`` rides on every event and counts the output so far."""
    async with fluxstream.AsyncClient(server.base_url, resume=NO_RESUME) as client:
        reply = await client.gemini.stream(
            model="m", contents=[{"role": "user", "parts": [{"text": "hi there"}]}],
            maxOutputTokens=40, extra_headers={"X-Fluxstream-Fault": "drop-after-events=6"},
        ).until_done()
    assert reply.outcome is fluxstream.Outcome.TRUNCATED and reply.text
    assert reply.usage is not None and reply.usage_partial
    estimate = reply.usage_estimate
    assert estimate is not None and estimate.output_tokens >= 1
    assert estimate.input_tokens == reply.usage.prompt_tokens
