"""A resume token names which API it continues; the request path always comes from the client.

Tokens travel through databases, browsers and other workers, so a token is input. It used to
choose the request path itself: ``client.chat.resume(token)`` POSTed to ``base_url +
token["path"]``, so a forged token sent ``POST /admin/...`` (or any other path of the
service) with the client's key. A token may now name only one of the APIs the client knows
(Chat Completions, Responses, Messages); the path sent is the client's own for that API, and a
token given to an endpoint of another API is refused with ``ResumeTokenError``. The relay's
takeover, which resumes stored tokens, goes through the same check.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import ResumeTokenError
from fluxstream.relay import Entry, MemoryReplyLog
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
#: (endpoint attribute, keyword arguments, the path the server must see)
ENDPOINTS = [
    ("chat", {"messages": MSG, "max_tokens": 12}, "/v1/chat/completions"),
    ("responses", {"input": "hello there", "max_output_tokens": 12}, "/v1/responses"),
    ("messages", {"messages": MSG, "max_tokens": 12}, "/v1/messages"),
]
IDS = [e[0] for e in ENDPOINTS]
#: How a resumed stream may end: a token can be ahead of the events delivered (a whole read
#: is parsed before its events are handed out), and one that already holds the finish
#: resumes to the rest of the bytes only, without the end marker.
ENDED = (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)
FORGED = [
    "admin/keys",
    "/admin/keys",
    "chat/completions/../../admin",
    "../admin",
    "chat/completions?purge=1",
    "https://evil.example/v1/chat/completions",
    "responses/resp_1/cancel",
    "CHAT/COMPLETIONS",
    "chat/completions\r\nx: y",
    "x" * 5000,
]


async def token_of(client: fluxstream.AsyncClient, endpoint: str, kwargs: dict[str, Any],
                   ) -> dict[str, Any]:
    """A real token, taken after the first content of a stream of ``endpoint``."""
    stream = getattr(client, endpoint).stream(model="m", **kwargs)
    with anyio.fail_after(10):
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    break
            return stream.resume_token()


@pytest.mark.parametrize("path", FORGED, ids=range(len(FORGED)))
@pytest.mark.parametrize("endpoint", IDS)
async def test_a_token_naming_an_unknown_path_is_refused_and_nothing_is_sent(
    server: ServerThread, endpoint: str, path: str, anyio_backend: str
) -> None:
    kwargs = dict(ENDPOINTS[IDS.index(endpoint)][1])
    async with fluxstream.AsyncClient(server.base_url, api_key="sk-SERVICE-KEY") as client:
        token = await token_of(client, endpoint, kwargs)
        token["path"] = path
        before = len(server.records.requests)
        for resume in (client.chat.resume, getattr(client, endpoint).resume):
            with pytest.raises(ResumeTokenError) as info:
                async with resume(token) as stream:
                    await stream.complete()
            assert "SERVICE" not in str(info.value)
            assert len(str(info.value)) < 300  # a 5,000-character path is not echoed whole
    assert server.records.requests[before:] == []


@pytest.mark.parametrize(
    ("named", "given"),
    [(named, given) for named in IDS for given in ("responses", "messages") if named != given],
)
async def test_a_token_of_another_api_is_refused_by_an_endpoint(
    server: ServerThread, named: str, given: str, anyio_backend: str
) -> None:
    """``client.responses.resume`` and ``client.messages.resume`` read a token as their own
    wire format: one of another API would be sent to the wrong API, so it is refused."""
    kwargs = dict(ENDPOINTS[IDS.index(named)][1])
    async with fluxstream.AsyncClient(server.base_url) as client:
        token = await token_of(client, named, kwargs)
        before = len(server.records.requests)
        with pytest.raises(ResumeTokenError, match="another API"):
            getattr(client, given).resume(token)
    assert server.records.requests[before:] == []


@pytest.mark.parametrize(("endpoint", "kwargs", "path"), ENDPOINTS, ids=IDS)
@pytest.mark.parametrize("via", ["chat", "own"])
async def test_a_real_token_resumes_on_its_own_api(
    server: ServerThread, endpoint: str, kwargs: dict[str, Any], path: str, via: str,
    anyio_backend: str,
) -> None:
    """``client.chat.resume`` takes any token the client made (it hands Responses and
    Messages tokens to their endpoints, as the relay relies on); each endpoint its own."""
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        direct = await getattr(client, endpoint).complete(model="m", **kwargs)
        token = await token_of(client, endpoint, kwargs)
        before = len(server.records.requests)
        resume = client.chat.resume if via == "chat" else getattr(client, endpoint).resume
        with anyio.fail_after(10):  # a restart: the embedded server sends the same reply
            async with resume(token, resume=ResumePolicy(restart=True)) as stream:
                reply = await stream.complete()
    assert reply.text == direct.text and reply.outcome in ENDED
    assert [r.path for r in server.records.requests[before:]] == [path]


@pytest.mark.parametrize("path", [None, "", "chat/completions", "/chat/completions/"])
async def test_a_chat_token_without_a_path_or_with_slashes_still_reads(
    server: ServerThread, path: str | None, anyio_backend: str
) -> None:
    """Tokens made before endpoints existed had no path (Chat Completions)."""
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        token = await token_of(client, "chat", dict(ENDPOINTS[0][1]))
        if path is None:
            del token["path"]
        else:
            token["path"] = path
        before = len(server.records.requests)
        with anyio.fail_after(10):
            async with client.chat.resume(token, resume=ResumePolicy(restart=True)) as stream:
                reply = await stream.complete()
    assert reply.outcome in ENDED
    assert [r.path for r in server.records.requests[before:]] == ["/v1/chat/completions"]


# ------------------------------------------------------------------ the relay's takeover


async def follow_taking_over(log: MemoryReplyLog, key: str, client: Any) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(20):
        async for item in log.follow(key, takeover=client):
            seen.append(item)
    return seen


@pytest.mark.parametrize("stored", ["token", "base"])
@pytest.mark.asyncio_only  # the relay runs on asyncio
async def test_a_takeover_of_a_forged_token_sends_nothing(
    server: ServerThread, stored: str, anyio_backend: str
) -> None:
    """The relay stores the token (or, before the first entry, the request) in Redis; one
    written there by someone else must not choose where the taking-over worker posts."""
    log = MemoryReplyLog(lease=0.2)
    key = "forged"
    async with fluxstream.AsyncClient(server.base_url, api_key="sk-SERVICE-KEY") as client:
        token = await token_of(client, "chat", dict(ENDPOINTS[0][1]))
        token["key"] = key
        token["path"] = "admin/keys"
        base = {k: v for k, v in token.items() if k != "reply"}
        await log._create(key, "gone", base)
        if stored == "token":
            entry = Entry(1, (fluxstream.TextDelta(key, 0, 0, "Hel"),))
            await log._append(key, "gone", entry, token=token, final=False)
        before = len(server.records.requests)
        seen = await follow_taking_over(log, key, client)
    assert server.records.requests[before:] == []
    end = seen[-1].event
    assert isinstance(end, fluxstream.End)
    assert end.outcome is fluxstream.Outcome.TRUNCATED and end.reason == "producer lost"


@pytest.mark.asyncio_only  # the relay runs on asyncio
async def test_a_takeover_of_a_real_token_still_resumes(
    server: ServerThread, anyio_backend: str
) -> None:
    log = MemoryReplyLog(lease=0.2)
    key = "real"
    async with fluxstream.AsyncClient(server.base_url) as client:
        kwargs = dict(ENDPOINTS[0][1])
        direct = await client.chat.complete(model="m", **kwargs)
        token = await token_of(client, "chat", {**kwargs, "content_key": key})
        await log._create(key, "gone", {k: v for k, v in token.items() if k != "reply"})
        text = token["reply"]["choices"][0]["text"]
        entry = Entry(1, (fluxstream.TextDelta(key, 0, 0, text),))
        await log._append(key, "gone", entry, token=token, final=False)
        before = len(server.records.requests)
        seen = await follow_taking_over(log, key, client)
    assert [r.path for r in server.records.requests[before:]] == ["/v1/chat/completions"]
    got = "".join(e.event.text for e in seen if isinstance(e.event, fluxstream.TextDelta))
    assert got == direct.text
    assert seen[-1].event.outcome in ENDED
