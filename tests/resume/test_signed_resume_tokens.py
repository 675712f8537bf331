"""Signed resume tokens: ``AsyncClient(token_secret=...)`` for tokens from untrusted hands.

A token may pass through a browser. Checked as data, a forged token cannot choose a host,
path, upstream or API, but it still chooses the request it replays (the model, the
messages: someone else's cost) and where the reply goes on from (an event id, a sequence
number), which no check against the reply can catch. A client given a secret signs every
token its streams issue (HMAC-SHA256 over the token's canonical JSON) and refuses, before any
request, a token that is unsigned, altered in any part, or signed with another secret. Keys
rotate: the first secret signs, any verifies. The secret never shows in a repr, a log line,
an error or the token.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fluxstream
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import ResumeTokenError
from fluxstream.server import ServerThread

SECRET = "s3cret-" + "k" * 24
OLD = "old-secret-" + "o" * 24
OTHER = "other-secret-" + "x" * 24
USER = [{"role": "user", "content": "A reply long enough to be cut in many places"}]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


async def cut_token(base_url: str, key: str, secret: Any = SECRET, *,
                    endpoint: str = "chat", **params: Any) -> tuple[dict[str, Any], str]:
    """The token (through JSON) of a stream of a ``secret`` client cut after some text, and
    that text."""
    key = f"{key}-{uuid.uuid4().hex[:8]}"  # the fault applies to this attempt key's first try
    fields: dict[str, Any] = {"messages": USER}
    if endpoint == "responses":
        fields = {"input": USER}
    elif endpoint == "messages":
        fields = {"messages": USER, "max_tokens": 1024}
    async with fluxstream.AsyncClient(base_url, token_secret=secret, resume=ResumePolicy.off(),
                                      retry=RetryPolicy.off()) as client:
        stream = getattr(client, endpoint).stream(
            model="m", **fields, **params, content_key=key,
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=12,fail-first=1",
                           "X-Fluxstream-Attempt-Key": key,
                           "X-Fluxstream-Profile": "sse-ids"},
        )
        async with stream:
            async for _ in stream:
                pass
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED and stream.reply.text
    value: dict[str, Any] = json.loads(json.dumps(stream.resume_token()))
    return value, stream.reply.text


async def resume_all(base_url: str, value: dict[str, Any], key: str, secret: Any = SECRET,
                     endpoint: str = "chat") -> fluxstream.ReplyStream:
    async with fluxstream.AsyncClient(base_url, token_secret=secret) as client:
        stream = getattr(client, endpoint).resume(
            value, extra_headers={"X-Fluxstream-Attempt-Key": key,
                                  "X-Fluxstream-Profile": "sse-ids"})
        with anyio.fail_after(10):
            async with stream:
                async for _ in stream:
                    pass
    return stream


@pytest.mark.anyio
@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
async def test_a_signed_token_resumes_with_the_same_secret(
    upstream: ServerThread, endpoint: str
) -> None:
    key = f"signed-{endpoint}"
    value, delivered = await cut_token(upstream.base_url, key, endpoint=endpoint)
    assert value["signature"].startswith("hmac-sha256:")
    stream = await resume_all(upstream.base_url, value, key, endpoint=endpoint)
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    assert stream.reply.text.startswith(delivered) and len(stream.reply.text) > len(delivered)
    # A token of another API given to client.chat.resume is checked the same way.
    if endpoint != "chat":
        again = await resume_all(upstream.base_url, value, key)
        assert again.reply.outcome is fluxstream.Outcome.DONE
    # The resumed stream's own tokens are signed too: a chain of workers stays signed.
    token = stream.resume_token()
    assert token["signature"] != value["signature"]
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=SECRET) as client:
        getattr(client, endpoint).resume(token)  # accepted (opened lazily: nothing sent)


@pytest.mark.anyio
async def test_unsigned_altered_and_foreign_tokens_are_refused_before_any_request(
    upstream: ServerThread,
) -> None:
    value, _ = await cut_token(upstream.base_url, "refused")
    unsigned, _ = await cut_token(upstream.base_url, "refused-unsigned", secret=None)
    assert "signature" not in unsigned
    foreign, _ = await cut_token(upstream.base_url, "refused-foreign", secret=OTHER)
    altered = copy.deepcopy(value)
    altered["body"]["model"] = "the-expensive-model"
    spliced = copy.deepcopy(unsigned)
    spliced["signature"] = value["signature"]
    cases = {
        "unsigned": unsigned, "signed with another secret": foreign,
        "another model": altered, "another token's signature": spliced,
        "signature of another scheme": {**value, "signature": "sha1:" + "0" * 40},
        "signature not a string": {**value, "signature": 5},
        "signature not ASCII": {**value, "signature": "hmac-sha256:é"},
        "last event id moved back": {**value, "last_event_id": "1"},
        "not JSON": {**value, "body": {**value["body"], "x": object()}},
    }
    sent = len(upstream.records.requests)
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=SECRET) as client:
        for name, token in cases.items():
            for resume in (client.chat.resume, client.responses.resume,
                           client.messages.resume, client.gemini.resume):
                with pytest.raises(ResumeTokenError) as caught:
                    resume(token)
                assert SECRET not in str(caught.value), name
    assert len(upstream.records.requests) == sent
    # Without a secret, a client still resumes a signed token (it checks the parts only).
    async with fluxstream.AsyncClient(upstream.base_url) as client:
        client.chat.resume(value)


@pytest.mark.anyio
async def test_keys_rotate_the_first_secret_signs_any_verifies(upstream: ServerThread) -> None:
    old, _ = await cut_token(upstream.base_url, "rotate-old", secret=OLD)
    new, _ = await cut_token(upstream.base_url, "rotate-new", secret=[SECRET, OLD])
    stream = await resume_all(upstream.base_url, old, "rotate-old", secret=[SECRET, OLD])
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    stream = await resume_all(upstream.base_url, new, "rotate-new", secret=SECRET)
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=OLD) as client:
        with pytest.raises(ResumeTokenError):
            client.chat.resume(new)  # signed with the new secret, which this client lacks


@pytest.mark.anyio
async def test_a_token_that_went_through_javascript_still_verifies(
    upstream: ServerThread,
) -> None:
    """``JSON.parse`` then ``JSON.stringify`` (a browser keeping the token) writes ``1.0`` as
    ``1`` and may reorder object keys: the same token, the same signature."""
    value, _ = await cut_token(upstream.base_url, "javascript", temperature=1.0, top_p=0.5)
    assert value["body"]["temperature"] == 1.0

    def like_javascript(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, dict):
            return {name: like_javascript(item[name]) for name in reversed(list(item))}
        if isinstance(item, list):
            return [like_javascript(inner) for inner in item]
        return item

    through = like_javascript(value)
    assert json.dumps(through) != json.dumps(value)
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=SECRET) as client:
        client.chat.resume(through)  # verified (the stream opens lazily: nothing is sent)
        altered = {**through, "body": {**through["body"], "temperature": 1.5}}
        with pytest.raises(ResumeTokenError):
            client.chat.resume(altered)


def test_any_change_to_a_signed_token_is_refused_before_any_request(
    upstream: ServerThread,
) -> None:
    """Every part, the request and the position claims included: one change anywhere."""
    value, _ = anyio.run(cut_token, upstream.base_url, "mutated")
    leaves: list[tuple[Any, ...]] = []

    def walk(item: Any, path: tuple[Any, ...]) -> None:
        if path and path != ("signature",):
            leaves.append(path)
        if isinstance(item, dict):
            for name, inner in item.items():
                walk(inner, (*path, name))
        elif isinstance(item, list):
            for index, inner in enumerate(item):
                walk(inner, (*path, index))

    walk(value, ())
    new_values = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.lists(
        st.integers(), max_size=2)

    async def refused(token: dict[str, Any]) -> None:
        sent = len(upstream.records.requests)
        async with fluxstream.AsyncClient(upstream.base_url, token_secret=SECRET) as client:
            with pytest.raises(ResumeTokenError):
                client.chat.resume(token)
        assert len(upstream.records.requests) == sent

    @settings(max_examples=150, deadline=None)
    @given(st.sampled_from(leaves), new_values, st.booleans())
    def check(path: tuple[Any, ...], new: Any, delete: bool) -> None:
        mutated = copy.deepcopy(value)
        target: Any = mutated
        for step in path[:-1]:
            target = target[step]
        if delete and isinstance(target, dict):
            del target[path[-1]]
        else:
            target[path[-1]] = new
        assume(mutated != value)
        anyio.run(refused, mutated)

    check()


def test_a_signed_token_resumed_sans_io_needs_no_secret() -> None:
    """The signature is a part the parser ignores: ``StreamParser.from_token`` reads it."""
    parser = fluxstream.StreamParser(content_key="k")
    parser.feed(b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n')
    value = {"key": "k", "reply": parser.reply.model_dump(mode="json"),
             "offsets": parser.offsets(), "signature": "hmac-sha256:" + "0" * 64}
    assert fluxstream.StreamParser.from_token(value).reply.text == "Hi"


# ------------------------------------------------------------------ the secret itself


@pytest.mark.anyio
async def test_the_secret_is_never_shown(upstream: ServerThread,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    value, _ = await cut_token(upstream.base_url, "hidden")
    async with fluxstream.AsyncClient(upstream.base_url, token_secret=[SECRET, OLD]) as client:
        shown = [repr(client), str(client.__dict__), repr(client._settings.token_signer),
                 json.dumps(value)]
        for bad in ({**value, "signature": "hmac-sha256:" + "0" * 64}, {**value, "key": 5}):
            with pytest.raises(ResumeTokenError) as caught:
                client.chat.resume(bad)
            shown.append(str(caught.value))
        await resume_all(upstream.base_url, value, "hidden")
    shown.append(caplog.text)
    for text in shown:
        assert SECRET not in text and OLD not in text


@pytest.mark.parametrize(("secret", "error"), [
    ("", ValueError), ("short-secret", ValueError), ([], ValueError),
    ([SECRET, "short"], ValueError), (b"0123456789abcdef0123", TypeError),
    ({"key": SECRET}, TypeError), (12345678901234567890, TypeError), ([SECRET, 5], TypeError),
], ids=["empty", "short", "no-secret", "one-short", "bytes", "mapping", "int", "not-a-str"])
def test_a_secret_that_cannot_sign_is_refused_when_the_client_is_made(
    secret: Any, error: type[Exception]
) -> None:
    with pytest.raises(error) as caught:
        fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-x", token_secret=secret)
    assert "short-secret" not in str(caught.value) and "0123456789" not in str(caught.value)


def test_a_request_json_cannot_write_is_signed_as_the_relay_stores_it() -> None:
    """A request body may hold values the HTTP body's encoder writes and ``json`` does not (a
    ``datetime`` in ``metadata``): signing such a token raised ``TypeError`` in
    ``resume_token()``, inside a relay's recorder too. It is signed as the relay stores it
    (pydantic-core's JSON), and verifies as it was issued and as it was stored."""
    import datetime

    import pydantic_core

    client = fluxstream.AsyncClient("http://127.0.0.1:9/v1", api_key="sk-x",
                                    token_secret=SECRET)
    stream = client.chat.stream(model="m", messages=USER,
                                metadata={"at": datetime.datetime(2026, 1, 2, 3, 4, 5)})
    token = stream.resume_token()
    stored = pydantic_core.from_json(pydantic_core.to_json(token))
    assert stored["body"]["metadata"] == {"at": "2026-01-02T03:04:05"}
    client.chat.resume(token)  # opened lazily: nothing is sent
    client.chat.resume(stored)
    with pytest.raises(ResumeTokenError):
        client.chat.resume({**stored, "body": {**stored["body"], "metadata": {}}})
