"""A base URL is taken as each API's own SDK takes it, for the client and for an ``Upstream``:
Anthropic's names the host (``ANTHROPIC_BASE_URL=https://api.anthropic.com``; ``/v1`` is
added when missing, so the URL with it works too), Gemini's names the host (google-genai's
``base_url``; ``/v1beta`` is added unless the URL ends in a version or is a Vertex path), and
OpenAI's is the API root (``OPENAI_BASE_URL=https://api.openai.com/v1``, used as given, for
Chat Completions and Responses alike).

Each case runs against a local server that answers only the one path the SDK would post to
and 404s any other, as a provider does. asyncio and trio.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from scripted_http import Conn, upstream

import fluxstream
from fluxstream import Failover, Outcome, Upstream, apis
from fluxstream.server import ServerThread

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hi"}]
HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"connection: close\r\n\r\n")
NOT_FOUND = (b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\n"
             b"content-length: 2\r\nconnection: close\r\n\r\n{}")
GEMINI_PATH = "models/m:streamGenerateContent?alt=sse"
VERTEX = "/v1/projects/p/locations/us-central1/publishers/google"

#: (API, what follows ``http://127.0.0.1:PORT`` in the base URL, the request target its SDK
#: posts to).
CASES = [
    # ANTHROPIC_BASE_URL names the host; the Anthropic SDK posts to {base}/v1/messages
    ("anthropic_messages", "", "/v1/messages"),
    ("anthropic_messages", "/", "/v1/messages"),
    ("anthropic_messages", "/v1", "/v1/messages"),
    ("anthropic_messages", "/v1/", "/v1/messages"),
    ("anthropic_messages", "/gateway/anthropic", "/gateway/anthropic/v1/messages"),
    ("anthropic_messages", "/v1?tenant=t", "/v1/messages?tenant=t"),
    # google-genai's base_url names the host; it posts to {base}/v1beta/models/...
    ("gemini", "", f"/v1beta/{GEMINI_PATH}"),
    ("gemini", "/", f"/v1beta/{GEMINI_PATH}"),
    ("gemini", "/v1beta", f"/v1beta/{GEMINI_PATH}"),
    ("gemini", "/v1", f"/v1/{GEMINI_PATH}"),
    ("gemini", "/v1alpha/", f"/v1alpha/{GEMINI_PATH}"),
    ("gemini", VERTEX, f"{VERTEX}/{GEMINI_PATH}"),
    ("gemini", "/gateway/google-ai-studio", f"/gateway/google-ai-studio/v1beta/{GEMINI_PATH}"),
    # OPENAI_BASE_URL is the API root, /v1 included: used as given
    ("chat_completions", "/v1", "/v1/chat/completions"),
    ("chat_completions", "", "/chat/completions"),
    ("responses", "/v1", "/v1/responses"),
    ("responses", "/openai", "/openai/responses"),
]


@pytest.fixture(scope="module")
def bodies() -> Iterator[dict[str, bytes]]:
    """Each API's whole event stream for MSG, as the embedded server writes it."""
    requests: dict[str, tuple[str, dict[str, Any]]] = {
        "chat_completions": ("/v1/chat/completions",
                             {"model": "m", "messages": MSG, "stream": True}),
        "responses": ("/v1/responses", {"model": "m", "input": MSG, "stream": True}),
        "anthropic_messages": ("/v1/messages", {"model": "m", "messages": MSG,
                                                "max_tokens": 64, "stream": True}),
        "gemini": (f"/v1beta/{GEMINI_PATH}",
                   {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    }
    with ServerThread() as server, httpx.Client(timeout=10) as http:
        root = server.base_url.removesuffix("/v1")
        yield {api: http.post(root + path, json=body).content
               for api, (path, body) in requests.items()}


def strict(body: bytes, target: str, seen: list[str]) -> Any:
    """A provider that serves ``body`` at ``target`` only (POST), and 404s anything else."""

    async def script(conn: Conn, index: int) -> None:
        head = await conn.read_request()
        if head is None:
            return
        method, asked, _ = head.split(b"\r\n", 1)[0].decode().split(" ")
        seen.append(asked)
        await conn.send(HEAD + body if (method, asked) == ("POST", target) else NOT_FOUND)

    return script


def root_of(up: Any) -> str:
    """``http://127.0.0.1:PORT``: the scripted server's host, without its ``/v1``."""
    return str(up.base).removesuffix("/v1")


async def ask(client: fluxstream.AsyncClient, api: str, **kw: Any) -> fluxstream.Reply:
    chosen = apis.get(api)
    arguments = chosen.prompt_arguments("m", list(MSG), {}, include_usage=True)
    return await getattr(client, chosen.endpoint).complete(**arguments, **kw)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("api", "suffix", "target"), CASES)
async def test_the_client_posts_where_the_apis_sdk_would(
    api: str, suffix: str, target: str, bodies: dict[str, bytes]
) -> None:
    seen: list[str] = []
    async with upstream(strict(bodies[api], target, seen)) as server:
        async with fluxstream.AsyncClient(root_of(server) + suffix, api_key="k") as client:
            reply = await ask(client, api)
    assert seen == [target]
    assert reply.outcome is Outcome.DONE and reply.text


@pytest.mark.parametrize(("api", "suffix", "target"), CASES)
async def test_an_upstream_posts_where_its_apis_sdk_would(
    api: str, suffix: str, target: str, bodies: dict[str, bytes]
) -> None:
    seen: list[str] = []
    with ServerThread(faults="status=503") as busy:
        async with upstream(strict(bodies[api], target, seen)) as server:
            async with fluxstream.AsyncClient(
                busy.base_url, api_key="k",
                fallbacks=[Upstream(root_of(server) + suffix, api=api, api_key="k2")],
                failover=Failover(per_upstream_attempts=1),
            ) as client:
                reply = await ask(client, "chat_completions")
    assert seen == [target]
    assert reply.outcome is Outcome.DONE and reply.text
    assert reply.segments[-1].api == api and reply.segments[-1].ended == "done"


def test_the_rule_is_each_apis_and_changes_nothing_it_is_given_twice() -> None:
    """Applied once more to its own result, the rule changes nothing (``anthropic_client``
    applies it before the client does)."""
    for api, suffix, _ in CASES:
        rule = apis.get(api).root_url
        once = rule("https://h.example" + suffix)
        assert rule(once) == once, (api, suffix)


def test_labels_keep_the_url_as_given() -> None:
    """A segment, a handoff and a token name an upstream by the URL the user gave."""
    assert Upstream("https://api.anthropic.com", api="anthropic_messages").label == (
        "api.anthropic.com/anthropic_messages")


async def test_anthropic_client_and_the_client_agree(bodies: dict[str, bytes]) -> None:
    seen: list[str] = []
    async with upstream(strict(bodies["anthropic_messages"], "/v1/messages", seen)) as server:
        from fluxstream._endpoints import anthropic_client

        async with anthropic_client(root_of(server), api_key="k") as client:
            await ask(client, "anthropic_messages")
    assert seen == ["/v1/messages"]


def test_the_json_of_each_body_is_an_event_stream(bodies: dict[str, bytes]) -> None:
    """The canned bodies are real streams (a broken fixture would prove nothing)."""
    for api, body in bodies.items():
        first = body.split(b"\n\n", 1)[0]
        data = next(line for line in first.split(b"\n") if line.startswith(b"data:"))
        assert isinstance(json.loads(data[5:]), dict), api
