"""A relay takeover resumes a signed token with the client's secret, and only with it.

A producer records a reply into the log, storing its stream's resume token now and then;
when it dies, a follower given ``takeover=client`` resumes the upstream from that token. With
``token_secret`` the stored token is signed: a taking-over client with the same secret goes
on exactly; one with another secret refuses the token before sending anything, and the reply
ends ``producer lost`` for its followers, as for any token a client cannot resume. (The
producer here is simulated the way the relay suite does: the log's entries and token written
as the dead producer left them.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.relay import Entry, MemoryReplyLog
from fluxstream.server import ServerThread

pytestmark = [pytest.mark.anyio, pytest.mark.asyncio_only]  # the relay runs on asyncio

SECRET = "relay-secret-" + "r" * 24
OTHER = "other-secret-" + "x" * 24
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "relay me, then take over"}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


async def died_after_some_text(upstream: ServerThread, key: str) -> tuple[dict[str, Any], str]:
    """The signed token and the text of a producer's stream cut after some events."""
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=SECRET,
                                      resume=ResumePolicy.off(),
                                      retry=RetryPolicy.off()) as client:
        stream = client.chat.stream(
            **REQUEST, content_key=key,
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=10"})
        async with stream:
            async for _ in stream:
                pass
    token: dict[str, Any] = json.loads(json.dumps(stream.resume_token()))
    assert token["signature"] and stream.reply.text
    return token, stream.reply.text


@pytest.mark.parametrize("secret", [SECRET, [OTHER, SECRET], None, OTHER],
                         ids=["same", "rotated", "none", "another"])
async def test_a_takeover_resumes_a_signed_token_only_with_a_secret_that_signed_it(
    upstream: ServerThread, secret: Any
) -> None:
    key = f"taken-{secret is None}-{len(str(secret))}"
    token, delivered = await died_after_some_text(upstream, key)
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        whole = await client.chat.complete(**REQUEST)
    log = MemoryReplyLog(lease=0.2)
    base = {name: value for name, value in token.items() if name != "reply"}
    await log._create(key, "died", base)
    await log._append(key, "died", Entry(1, (fluxstream.TextDelta(key, 0, 0, delivered),)),
                      token=token, final=False)
    sent = len(upstream.records.requests)
    seen: list[fluxstream.Event] = []
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=secret) as client:
        with anyio.fail_after(20):
            async for item in log.follow(key, takeover=client):
                seen.append(item.event)
    text = "".join(e.text for e in seen if isinstance(e, fluxstream.TextDelta))
    end = seen[-1]
    assert isinstance(end, fluxstream.End)
    if secret == OTHER:
        assert text == delivered
        assert (end.outcome, end.reason) == (fluxstream.Outcome.TRUNCATED, "producer lost")
        assert len(upstream.records.requests) == sent  # refused before any request
    else:
        assert text == whole.text
        assert end.outcome is fluxstream.Outcome.DONE
        assert len(upstream.records.requests) == sent + 1


@pytest.fixture(scope="module")
def dropping() -> Iterator[ServerThread]:
    """An upstream that drops every stream after ten events, the resumed one too."""
    with ServerThread(profile="openai", faults="drop-after-events=10") as running:
        yield running


@pytest.mark.parametrize("stored", ["token", "request"])
async def test_a_takeover_client_that_raises_for_outcomes_still_relays_a_cut_reply(
    dropping: ServerThread, stored: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``raise_for_outcome`` is for a caller's own loop: the takeover's stream has no caller,
    so its client's setting must not turn a reply that ended ``truncated`` into a "takeover
    failed" (the outcome is the followers' to read, as for any takeover)."""
    key = f"raising-{stored}"
    token, delivered = await died_after_some_text(dropping, key)
    log = MemoryReplyLog(lease=0.2)
    base = {name: value for name, value in token.items() if name != "reply"}
    await log._create(key, "died", base)
    if stored == "token":
        await log._append(key, "died", Entry(1, (fluxstream.TextDelta(key, 0, 0, delivered),)),
                          token=token, final=False)
    seen: list[fluxstream.Event] = []
    # One resume: the token's (by Last-Event-ID); the resumed stream's own drop ends it.
    async with fluxstream.AsyncClient(dropping.base_url, token_secret=SECRET,
                                      resume=ResumePolicy(max_resumes=1, default_delay=0),
                                      retry=RetryPolicy.off(), raise_for_outcome=True) as client:
        with anyio.fail_after(20):
            async for item in log.follow(key, takeover=client):
                seen.append(item.event)
    end = seen[-1]
    assert isinstance(end, fluxstream.End) and end.outcome is fluxstream.Outcome.TRUNCATED
    assert "".join(e.text for e in seen if isinstance(e, fluxstream.TextDelta))
    assert not [r for r in caplog.records if "takeover of" in r.getMessage()]
