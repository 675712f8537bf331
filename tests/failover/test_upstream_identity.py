"""One upstream, one identity: two upstreams a route could not tell apart (the same base URL
and API, so the same label, say a second account of one provider) are refused with an error
that names the label, never a key, and asks for a ``name=``; the circuit breaker keeps one
entry per upstream (label and credentials), so a second account with the same label in
another call is neither skipped for the first one's failures nor lets its successes hide
them; a resume token resumes on exactly the upstream it names.

Real sockets (the embedded server, its records read unredacted to tell the accounts apart);
asyncio and trio.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from handoff_token import token_past_handoff

import fluxstream
from fluxstream import Failover, Outcome, ResumePolicy, Upstream
from fluxstream._reply import SegmentEnd
from fluxstream.errors import APIStatusError, RateLimitError
from fluxstream.server import ServerThread

MSG = [{"role": "user", "content": "hello there"}]
KEY_A = "sk-account-A-0001"
KEY_B = "sk-account-B-0002"
RATE_LIMITED = {"X-Fluxstream-Fault": "status=429"}


@pytest.fixture(autouse=True)
def _unredacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server records each request's key as it came (it redacts keys by default)."""
    monkeypatch.setattr("fluxstream.server.responder._redact", lambda value: value)


@pytest.fixture(scope="module")
def provider() -> Iterator[ServerThread]:
    """One provider, two accounts."""
    with ServerThread() as running:
        yield running


@pytest.fixture(scope="module")
def busy() -> Iterator[ServerThread]:
    with ServerThread(faults="status=503") as running:
        yield running


def asked_with(server: ServerThread, key: str, since: int = 0) -> int:
    """Requests ``server`` got with ``key`` (after the first ``since``)."""
    return sum(1 for r in server.records.requests[since:]
               if r.header("authorization") == f"Bearer {key}")


# ----------------------------------------------------------------------- refused when made


def test_a_second_account_without_a_name_is_refused_naming_the_label() -> None:
    base = "http://127.0.0.1:9/v1"
    label = Upstream(base).label
    cases = [
        lambda: fluxstream.AsyncClient(base, api_key=KEY_A,
                                       fallbacks=[Upstream(base, api_key=KEY_B)]),
        lambda: fluxstream.AsyncClient("http://127.0.0.1:8/v1", fallbacks=[
            Upstream(base, api_key=KEY_A), Upstream(base, api_key=KEY_B)]),
        lambda: fluxstream.AsyncClient(base, fallbacks=[Upstream(base + "/", api_key=KEY_B)]),
        lambda: fluxstream.AsyncClient("http://127.0.0.1:8/v1", fallbacks=[
            Upstream(base, api_key=KEY_A, name="same"), Upstream(base, name="same")]),
    ]
    for make in cases:
        with pytest.raises(ValueError) as refused:
            make()
        message = str(refused.value)
        assert "name=" in message and (label in message or "'same'" in message), message
        assert KEY_A not in message and KEY_B not in message


def test_named_apart_or_of_another_api_they_are_two_upstreams() -> None:
    base = "http://127.0.0.1:9/v1"
    client = fluxstream.AsyncClient(base, api_key=KEY_A, fallbacks=[
        Upstream(base, api_key=KEY_B, name="second-account"),
        Upstream(base, api="anthropic_messages", name="claude-account"),
        Upstream("http://127.0.0.1:9/anthropic", api="anthropic_messages"),  # another path
        Upstream("http://127.0.0.1:7/v1", api="anthropic_messages"),
        Upstream("http://127.0.0.1:7/v1"),  # another API at the same URL
    ])
    assert [u.label for u in client.fallbacks] == [
        "second-account", "claude-account", "127.0.0.1:9/anthropic/anthropic_messages",
        "127.0.0.1:7/v1/anthropic_messages", "127.0.0.1:7/v1/chat_completions"]
    # the client's own URL serves every API: an unnamed fallback there of any API is refused
    with pytest.raises(ValueError, match="client's own base URL"):
        fluxstream.AsyncClient(base, fallbacks=[Upstream(base, api="gemini")])


def test_a_call_whose_route_repeats_a_label_is_refused_before_anything_is_sent() -> None:
    base = "http://127.0.0.1:9/v1"
    client = fluxstream.AsyncClient(base, api_key=KEY_A)
    with pytest.raises(ValueError, match="name="):
        client.chat.stream(model="m", messages=MSG, fallbacks=[Upstream(base, api_key=KEY_B)])
    with pytest.raises(ValueError, match="name="):
        client.chat.stream(model="m", messages=MSG, fallbacks=[
            Upstream("http://127.0.0.1:7/v1"), Upstream("http://127.0.0.1:7/v1")])
    # the client's own URL for Messages is another upstream than a chat fallback there
    client.messages.stream(model="m", messages=MSG, max_tokens=8,
                           fallbacks=[Upstream(base, api_key=KEY_B)])
    # a base URL assigned later is checked as the route is made
    other = fluxstream.AsyncClient("http://127.0.0.1:8/v1", fallbacks=[Upstream(base)])
    other.base_url = base
    with pytest.raises(ValueError, match="name="):
        other.chat.stream(model="m", messages=MSG)


# ----------------------------------------------------------------------- the circuit breaker

@pytest.mark.anyio
async def test_the_second_account_serves_while_the_first_cools_down(
    provider: ServerThread,
) -> None:
    """``cooldown_failures=1``: account A answers 429; its second account (same URL, its
    own name) serves all five streams, and A is asked once, then skipped."""
    since = len(provider.records.requests)
    async with fluxstream.AsyncClient(
        provider.base_url, api_key=KEY_A, headers=RATE_LIMITED,
        fallbacks=[Upstream(provider.base_url, api_key=KEY_B, name="account-b")],
        failover=Failover(per_upstream_attempts=1, cooldown_failures=1, cooldown=60),
    ) as client:
        replies = [await client.chat.complete(model="m", messages=MSG) for _ in range(5)]
    assert all(r.outcome is Outcome.DONE for r in replies)
    assert [s.upstream for s in replies[0].segments] == [
        Upstream(provider.base_url).label, "account-b"]
    for reply in replies[1:]:
        first, second = reply.segments
        assert first.kind is SegmentEnd.COOLING_DOWN and second.upstream == "account-b"
    assert asked_with(provider, KEY_A, since) == 1
    assert asked_with(provider, KEY_B, since) == 5


@pytest.mark.anyio
async def test_an_account_that_keeps_failing_cools_down_under_the_default_breaker(
    provider: ServerThread,
) -> None:
    """Default breaker (3 failures in 30 s): the second account's successes do not reset
    the first one's count, so after three failures the first is skipped."""
    since = len(provider.records.requests)
    async with fluxstream.AsyncClient(
        provider.base_url, api_key=KEY_A, headers=RATE_LIMITED,
        fallbacks=[Upstream(provider.base_url, api_key=KEY_B, name="account-b")],
        failover=Failover(per_upstream_attempts=1),
    ) as client:
        replies = [await client.chat.complete(model="m", messages=MSG) for _ in range(5)]
    assert [r.segments[0].kind is SegmentEnd.COOLING_DOWN for r in replies] == [
        False, False, False, True, True]
    assert asked_with(provider, KEY_A, since) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("failures", [1, 3])
async def test_one_label_in_two_calls_is_two_upstreams_to_the_breaker(
    provider: ServerThread, busy: ServerThread, failures: int,
) -> None:
    """Calls give their own fallbacks: account A (rate-limited) in one, account B in the
    next, both unnamed (one per route: the same label). A's failures cool A down only (B is
    never skipped for them), and B's successes never reset A's count."""
    since = len(provider.records.requests)
    account_a = Upstream(provider.base_url, api_key=KEY_A, headers=RATE_LIMITED)
    account_b = Upstream(provider.base_url, api_key=KEY_B)
    assert account_a.label == account_b.label
    skipped_a: list[bool] = []
    async with fluxstream.AsyncClient(
        busy.base_url, api_key="k",
        failover=Failover(per_upstream_attempts=1, cooldown_failures=failures, cooldown=60),
    ) as client:
        for _ in range(failures + 1):
            stream = client.chat.stream(model="m", messages=MSG, fallbacks=[account_a])
            with pytest.raises(APIStatusError) as failed:
                await stream.complete()
            skipped_a.append(stream.reply.segments[-1].kind is SegmentEnd.COOLING_DOWN)
            if not skipped_a[-1]:
                assert isinstance(failed.value, RateLimitError)
            reply = await client.chat.complete(model="m", messages=MSG,
                                               fallbacks=[account_b])
            assert reply.outcome is Outcome.DONE
            assert reply.segments[-1].upstream == account_b.label
            assert reply.segments[-1].kind is SegmentEnd.DONE
    assert skipped_a == [False] * failures + [True]
    assert asked_with(provider, KEY_A, since) == failures
    assert asked_with(provider, KEY_B, since) == failures + 1


# ----------------------------------------------------------------------- resume


@pytest.mark.anyio
async def test_a_token_resumes_on_the_account_it_names(provider: ServerThread) -> None:
    """Account A drops the reply mid-way; it goes on on account B (same URL, named); a token
    taken then resumes on B (with B's key), never on A."""
    drops = {"X-Fluxstream-Fault": "drop-after-events=9"}
    settings: dict[str, Any] = {
        "api_key": KEY_A, "headers": drops,
        "fallbacks": [Upstream(provider.base_url, api_key=KEY_B, name="account-b",
                               headers={"X-Fluxstream-Fault": "drip=0.004"})],
        "resume": ResumePolicy(last_event_id=False),
    }
    async with fluxstream.AsyncClient(provider.base_url, **settings) as client:
        token = await token_past_handoff(client.chat.stream(model="m", messages=MSG))
    assert token["upstream"] == "account-b"
    since = len(provider.records.requests)
    async with fluxstream.AsyncClient(provider.base_url, **settings) as other:
        resumed = other.chat.resume(token)
        async with resumed:
            async for _ in resumed:
                pass
    assert resumed.reply.outcome is Outcome.DONE, resumed.cause
    assert asked_with(provider, KEY_A, since) == 0
    assert asked_with(provider, KEY_B, since) >= 1
