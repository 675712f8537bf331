"""The registry of APIs: an unknown name is a typed error, older resume tokens still read, and
nothing falls back to another API's behaviour.

Three places used to send a request shaped for some API when they did not recognise the one
they had: structured output became an Anthropic forced tool, a continuation was appended to
``messages``, and the relay's takeover sent a stored request to Chat Completions. Each now asks
the request's own :class:`~fluxstream.apis.Api`, and one that cannot answer fails loudly.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import anyio
import pytest
from pydantic import BaseModel

import fluxstream
from fluxstream import apis
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.apis import Api, ApiFeatureError, UnknownApiError
from fluxstream.apis.portable import convert_body
from fluxstream.errors import FluxstreamError, ResumeTokenError
from fluxstream.relay import Entry, MemoryReplyLog
from fluxstream.server import ServerThread

USER = [{"role": "user", "content": "hello there"}]
ENDED = (fluxstream.Outcome.DONE, fluxstream.Outcome.FINISHED)


class Plan(BaseModel):
    title: str


class Unfinished(Api):
    """An API being added: named, with a path, but no structured output or continuation yet."""

    name = "unfinished"
    title = "Unfinished"
    vendor = "Nobody"
    path = "models/unfinished:stream"
    endpoint = "unfinished"
    headers: ClassVar[dict[str, str]] = {}


# ------------------------------------------------------------------ unknown names


@pytest.mark.parametrize("name", ["cohere", "chat", "messages", "", "CHAT_COMPLETIONS", 3, None])
def test_an_unknown_api_name_is_a_typed_error_listing_the_known_ones(name: Any) -> None:
    with pytest.raises(UnknownApiError) as info:
        apis.get(name)
    assert isinstance(info.value, FluxstreamError) and isinstance(info.value, LookupError)
    for known in apis.names():
        assert known in str(info.value)


def test_the_registry_holds_each_api_under_its_format_name() -> None:
    paths = {"chat_completions": "chat/completions", "responses": "responses",
             "anthropic_messages": "messages"}
    assert apis.names()[: len(paths)] == tuple(paths)  # the first is the CLI's default
    assert [api.name for api in apis.registered()] == list(apis.names())
    assert {name: apis.get(name).path for name in paths} == paths


def test_a_long_unknown_name_is_not_echoed_whole() -> None:
    with pytest.raises(UnknownApiError) as info:
        apis.get("x" * 5000)
    assert len(str(info.value)) < 300


# ------------------------------------------------------------------ older tokens


@pytest.mark.parametrize(
    ("token", "name"),
    [
        ({}, "chat_completions"),  # made before the other endpoints: no path
        ({"path": None}, "chat_completions"),
        ({"path": ""}, "chat_completions"),
        ({"path": "chat/completions"}, "chat_completions"),
        ({"path": "/chat/completions/"}, "chat_completions"),
        ({"path": "responses"}, "responses"),
        ({"path": "messages"}, "anthropic_messages"),
        ({"api": "responses"}, "responses"),
        ({"api": "anthropic_messages", "path": "messages"}, "anthropic_messages"),
    ],
)
def test_a_token_names_its_api_by_name_or_by_its_older_path(
    token: dict[str, Any], name: str
) -> None:
    assert apis.for_token(token) is apis.get(name)


@pytest.mark.parametrize(
    "token",
    [
        {"api": "cohere"},
        {"api": "chat"},
        {"api": 3},
        {"api": "responses", "path": "messages"},  # two APIs: neither is trusted
        {"api": "chat_completions", "path": "admin/keys"},
        {"path": "admin/keys"},
    ],
)
def test_a_token_naming_no_registered_api_is_refused(token: dict[str, Any]) -> None:
    with pytest.raises(ResumeTokenError):
        apis.for_token(token)


async def token_of(client: fluxstream.AsyncClient, api: Api) -> dict[str, Any]:
    fields = {api.max_tokens_field: 12}
    stream = getattr(client, api.endpoint).stream(
        **api.prompt_arguments("m", list(USER), fields, include_usage=True))
    with anyio.fail_after(10):
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.TextDelta):
                    break
            token: dict[str, Any] = json.loads(json.dumps(stream.resume_token()))
    return token


@pytest.mark.anyio
@pytest.mark.parametrize("api", apis.registered(), ids=apis.names())
async def test_a_token_of_an_older_release_naming_only_the_path_still_resumes(
    server: ServerThread, api: Api, anyio_backend: str
) -> None:
    """Tokens stored before tokens named their API carry its path only: they resume on the
    same API (through ``client.chat.resume``, as the relay resumes them, and their own)."""
    async with fluxstream.AsyncClient(server.base_url, retry=RetryPolicy.off()) as client:
        token = await token_of(client, api)
        assert token["api"] == api.name and token["path"] == api.path
        del token["api"]
        before = len(server.records.requests)
        for resume in (client.chat.resume, getattr(client, api.endpoint).resume):
            with anyio.fail_after(10):
                async with resume(token, resume=ResumePolicy(restart=True)) as stream:
                    reply = await stream.complete()
            assert reply.outcome in ENDED
    posted = api.target(api.path, token["body"])[0].partition("?")[0]
    assert [r.path for r in server.records.requests[before:]] == [f"/v1/{posted}"] * 2


# ------------------------------------------------------------------ no silent fallback


def test_structured_output_for_an_api_without_it_is_refused_not_sent_as_a_tool() -> None:
    """It used to become an Anthropic forced tool for any API that was not Chat or
    Responses."""
    body: dict[str, Any] = {"model": "m"}
    with pytest.raises(ApiFeatureError, match="structured output"):
        Unfinished().structured_request(body, Plan)
    assert body == {"model": "m"}
    with pytest.raises(UnknownApiError):
        apis.get("unfinished")  # and it is no registered API either


def test_a_continuation_for_an_api_without_one_is_refused_not_appended_to_messages() -> None:
    """It used to be appended to ``messages`` for any path that was not ``responses``."""
    body = {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with pytest.raises(ApiFeatureError, match="continue"):
        Unfinished().continuation_body(body, "Hello", {"prefix": True})
    with pytest.raises(ApiFeatureError, match="re-read"):
        Unfinished().replay_path("resp_1", 3)
    assert not Unfinished().replayable({"background": True})


def test_a_system_prompt_an_api_has_not_placed_is_refused_not_sent_as_a_message() -> None:
    """Failover used to give every API but Anthropic's and Responses a system message in its
    conversation: the next API would have been sent Chat Completions' shape, silently."""
    chat = apis.get("chat_completions")
    body = chat.conversation("m", [{"role": "system", "content": "be brief"}, *USER], {})
    with pytest.raises(ApiFeatureError, match="system prompt"):
        convert_body(body, chat, Unfinished())
    with pytest.raises(ApiFeatureError, match="system prompt"):
        Unfinished().put_system({}, [], "be brief")
    plain = chat.conversation("m", list(USER), {})  # nothing to place: nothing refused
    assert convert_body(plain, chat, Unfinished()) == {"model": "m", "messages": USER}


def test_a_request_of_an_api_that_has_not_said_how_to_read_it_is_refused() -> None:
    """Its system prompt or tools would have been left out of the translated request."""
    body = {"model": "m", "messages": list(USER), "preamble": "be brief"}
    with pytest.raises(ApiFeatureError, match="system prompt"):
        convert_body(body, Unfinished(), apis.get("chat_completions"))
    with pytest.raises(ApiFeatureError, match="system prompt"):
        Unfinished().system_of(body)
    with pytest.raises(ApiFeatureError, match="tools"):
        Unfinished().declared_functions({"tools": [{"name": "f", "parameters": {}}]})
    assert Unfinished().declared_functions({"tools": []}) == []
    asked = {"model": "m"}
    Unfinished().ask_usage(asked)  # nothing to ask: the request is left as it is
    assert asked == {"model": "m"}


async def follow_taking_over(log: MemoryReplyLog, key: str, client: Any) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(20):
        async for item in log.follow(key, takeover=client):
            seen.append(item)
    return seen


@pytest.mark.anyio
@pytest.mark.parametrize("stored", ["token", "base"])
@pytest.mark.asyncio_only  # the relay runs on asyncio
async def test_a_takeover_of_a_token_naming_an_unknown_api_sends_nothing(
    server: ServerThread, stored: str, anyio_backend: str
) -> None:
    """A stored request of an API this worker does not know used to be sent to Chat
    Completions by the takeover (its ``path`` absent, or a Chat one); now it is refused and
    the followers see the producer lost."""
    log = MemoryReplyLog(lease=0.2)
    key = f"unknown-api-{stored}"
    async with fluxstream.AsyncClient(server.base_url, api_key="sk-SERVICE-KEY") as client:
        token = await token_of(client, apis.get("chat_completions"))
        token["key"] = key
        token["api"] = "cohere"
        del token["path"]
        await log._create(key, "gone", {k: v for k, v in token.items() if k != "reply"})
        if stored == "token":
            entry = Entry(1, (fluxstream.TextDelta(key, 0, 0, "Hel"),))
            await log._append(key, "gone", entry, token=token, final=False)
        before = len(server.records.requests)
        seen = await follow_taking_over(log, key, client)
    assert server.records.requests[before:] == []
    end = seen[-1].event
    assert isinstance(end, fluxstream.End)
    assert end.outcome is fluxstream.Outcome.TRUNCATED and end.reason == "producer lost"


@pytest.mark.anyio
@pytest.mark.asyncio_only  # the relay runs on asyncio
@pytest.mark.parametrize("api", apis.registered(), ids=apis.names())
async def test_a_takeover_before_the_first_entry_sends_the_request_to_its_own_api(
    server: ServerThread, api: Api, anyio_backend: str
) -> None:
    """Nothing stored yet but the request: it is sent again, to the API it was made for."""
    log = MemoryReplyLog(lease=0.2)
    key = f"base-{api.name}"
    async with fluxstream.AsyncClient(server.base_url) as client:
        token = await token_of(client, api)
        token["key"] = key
        await log._create(key, "gone", {k: v for k, v in token.items() if k != "reply"})
        before = len(server.records.requests)
        seen = await follow_taking_over(log, key, client)
    sent = server.records.requests[before:]
    posted, body = api.target(api.path, {**token["body"], "stream": True})
    assert [r.path for r in sent] == [f"/v1/{posted.partition('?')[0]}"]
    assert sent[0].json == body
    assert seen[-1].event.outcome in ENDED
