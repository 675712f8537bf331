"""What crosses to a fallback, for every ordered pair of APIs: the fallback's own key (sent its
API's way), its own ``Upstream.headers``, fluxstream's own headers, a header the caller marked
shared (``Failover(shared_headers=...)``), trace context added at send time, and nothing else:
never the primary's key, a credential header of the client (``headers=``) or of the request
(``extra_headers=``), nor a provider's own header (``anthropic-beta``, ``OpenAI-Organization``,
``x-goog-user-project``). Checked before content, after content (a mid-reply handoff), on a
hedge, and on a resume from a token naming the fallback.

Real sockets: the embedded server, whose records are read unredacted here, and a fallback
that requires its own key (a 200 proves it was sent). Every test runs on asyncio (aiohttp)
and trio (httpx).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from handoff_token import token_past_handoff

import fluxstream
from fluxstream import Failover, Handoff, Outcome, ResumePolicy, Upstream, apis
from fluxstream.server import ServerThread
from fluxstream.server.records import RequestRecord

pytestmark = pytest.mark.anyio

MSG = [{"role": "user", "content": "hello there"}]
APIS = apis.names()
PAIRS = [(first, then) for first in APIS for then in APIS]

FALLBACK_KEY = "fb-own-KEY-7731"
#: Every value the primary is given holds "primary": none of them may reach a fallback.
PRIMARY_KEY = "sk-primary-KEY-0001"
CLIENT_HEADERS = {
    "Authorization": "Bearer gw-primary-TOKEN-0002",  # a gateway's token
    "api-key": "azure-primary-KEY-0003",               # Azure's key header
    "X-Api-Key": "anthropic-primary-KEY-0004",
    "x-goog-api-key": "goog-primary-KEY-0005",
    "anthropic-beta": "primary-beta-2099-01-01",
    "OpenAI-Organization": "org-primary-0006",
    "x-goog-user-project": "project-primary-0007",
    "X-Request-Id": "client-id-primary",
}
REQUEST_HEADERS = {
    "x-api-key": "request-primary-KEY-0008",
    "Proxy-Authorization": "Basic cHJpbWFyeQ-primary",
    "X-Request-Id": "call-id-9",
    "x-tenant-tag": "primary-tenant",
}
#: Names that are the primary's provider's or the caller's, never a fallback's unless shared.
NEVER_CROSS = {"api-key", "anthropic-beta", "openai-organization", "x-goog-user-project",
               "proxy-authorization", "x-tenant-tag"}
#: Where each API's own key goes (as its SDK sends it).
OWN_KEY = {
    "chat_completions": ("authorization", f"Bearer {FALLBACK_KEY}"),
    "responses": ("authorization", f"Bearer {FALLBACK_KEY}"),
    "anthropic_messages": ("x-api-key", FALLBACK_KEY),
    "gemini": ("x-goog-api-key", FALLBACK_KEY),
}
CREDENTIAL_NAMES = {"authorization", "x-api-key", "x-goog-api-key"}


@pytest.fixture(autouse=True)
def _unredacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers record credential headers as they came (they redact them by default)."""
    monkeypatch.setattr("fluxstream.server.responder._redact", lambda value: value)


@pytest.fixture(scope="module")
def busy() -> Iterator[ServerThread]:
    """A primary that answers 503."""
    with ServerThread(faults="status=503") as running:
        yield running


@pytest.fixture(scope="module")
def dropping() -> Iterator[ServerThread]:
    """A primary that drops every reply after a few events (content delivered)."""
    with ServerThread(faults="drop-after-events=9") as running:
        yield running


@pytest.fixture(scope="module")
def fallback() -> Iterator[ServerThread]:
    """A fallback that refuses any request without its own key."""
    with ServerThread(api_key=FALLBACK_KEY) as running:
        yield running


def open_stream(
    client: fluxstream.AsyncClient, api: str, **kw: Any
) -> fluxstream.ReplyStream:
    """A request to ``api``'s endpoint of ``client``, with the request's own headers."""
    chosen = apis.get(api)
    arguments = chosen.prompt_arguments("m", list(MSG), {"max_tokens": 512}
                                        if chosen.default_max_tokens else {},
                                        include_usage=True)
    endpoint = getattr(client, chosen.endpoint)
    return endpoint.stream(**arguments, extra_headers=REQUEST_HEADERS, **kw)  # type: ignore[no-any-return]


def make_client(
    primary: ServerThread, fallback: ServerThread, fallback_api: str, *,
    own: dict[str, str] | None = None, failover: dict[str, Any] | None = None, **kw: Any,
) -> fluxstream.AsyncClient:
    """A client given the primary's key and credential headers, with one fallback that has
    its own key and headers, sharing only the request id."""
    return fluxstream.AsyncClient(
        primary.base_url, api_key=PRIMARY_KEY, headers=CLIENT_HEADERS,
        fallbacks=[Upstream(fallback.base_url, api=fallback_api, api_key=FALLBACK_KEY,
                            headers={"X-Fallback-Own": "own-value", **(own or {})})],
        failover=Failover(per_upstream_attempts=1, shared_headers=("x-request-id",),
                          **(failover or {})),
        **kw,
    )


def headers_of(record: RequestRecord) -> dict[str, str]:
    return dict(record.headers)


def assert_only_its_own(record: RequestRecord, api: str, shared: str = "call-id-9") -> None:
    """The request the fallback got carries its own key and headers, the shared one, the
    API's own fixed header, and nothing of the primary's."""
    headers = headers_of(record)
    for name, value in headers.items():
        assert "primary" not in value.lower(), (name, value)
        assert name not in NEVER_CROSS, name
    key_name, key_value = OWN_KEY[api]
    assert headers.get(key_name) == key_value
    assert set(headers) & CREDENTIAL_NAMES == {key_name}
    assert headers.get("x-fallback-own") == "own-value"
    assert headers.get("x-request-id") == shared
    version = apis.get(api).headers.get("anthropic-version")
    assert headers.get("anthropic-version") == version


@contextmanager
def new_requests(server: ServerThread) -> Iterator[list[RequestRecord]]:
    """The requests ``server`` gets inside the block (filled in when it ends)."""
    seen: list[RequestRecord] = []
    before = len(server.records.requests)
    yield seen
    seen.extend(server.records.requests[before:])


async def read_all(stream: fluxstream.ReplyStream) -> list[Any]:
    events = []
    async with stream:
        async for event in stream:
            events.append(event)
    return events


@pytest.mark.parametrize(("first", "then"), PAIRS)
async def test_before_content_the_fallback_gets_only_its_own_credentials(
    first: str, then: str, busy: ServerThread, fallback: ServerThread
) -> None:
    with new_requests(fallback) as sent, new_requests(busy) as to_primary:
        async with make_client(busy, fallback, then) as client:
            stream = open_stream(client, first)
            events = await read_all(stream)
    assert stream.reply.outcome is Outcome.DONE, stream.cause
    assert [e.offset for e in events if isinstance(e, Handoff)] == [0]
    (request,) = sent
    assert_only_its_own(request, then)
    # the primary had everything it was given
    primary = headers_of(to_primary[0])
    assert primary["x-tenant-tag"] == "primary-tenant" and primary["api-key"].startswith("azure")


@pytest.mark.parametrize(("first", "then"), PAIRS)
async def test_after_content_the_continuation_gets_only_its_own_credentials(
    first: str, then: str, dropping: ServerThread, fallback: ServerThread
) -> None:
    with new_requests(fallback) as sent:
        async with make_client(dropping, fallback, then,
                               resume=ResumePolicy(last_event_id=False)) as client:
            stream = open_stream(client, first)
            events = await read_all(stream)
    assert stream.reply.outcome is Outcome.DONE, stream.cause
    (handoff,) = [e for e in events if isinstance(e, Handoff)]
    assert handoff.offset > 0  # mid-reply
    assert sent
    for request in sent:
        assert_only_its_own(request, then)


@pytest.mark.parametrize(("first", "then"), PAIRS)
async def test_a_resume_on_the_fallback_gets_only_its_own_credentials(
    first: str, then: str, dropping: ServerThread, fallback: ServerThread
) -> None:
    """A token taken while the fallback serves names it: resumed by a client that has the
    same fallbacks (and is given the primary's credentials again), the request goes to the
    fallback with its own."""
    slow = {"X-Fluxstream-Fault": "drip=0.004"}
    settings: dict[str, Any] = {"own": slow, "resume": ResumePolicy(last_event_id=False)}
    async with make_client(dropping, fallback, then, **settings) as client:
        token = await token_past_handoff(open_stream(client, first))
    assert token["upstream"] == Upstream(fallback.base_url, api=then).label
    assert token["api"] == then
    with new_requests(fallback) as sent, new_requests(dropping) as to_primary:
        async with make_client(dropping, fallback, then, **settings) as other:
            endpoint = getattr(other, apis.get(first).endpoint)
            resumed = endpoint.resume(token, extra_headers=REQUEST_HEADERS)
            await read_all(resumed)
    assert resumed.reply.outcome is Outcome.DONE, resumed.cause
    assert not to_primary and sent
    for request in sent:
        assert_only_its_own(request, then)


@pytest.mark.parametrize(("first", "then"), [(a, b) for a, b in PAIRS if a != b][::3])
async def test_a_hedge_gets_only_its_own_credentials(
    first: str, then: str, fallback: ServerThread
) -> None:
    with ServerThread(faults="delay=1.5") as slow, new_requests(fallback) as sent:
        async with make_client(slow, fallback, then,
                               failover={"hedge_after": 0.1}) as client:
            stream = open_stream(client, first)
            events = await read_all(stream)
    assert stream.reply.outcome is Outcome.DONE, stream.cause
    assert any(isinstance(e, Handoff) and e.reason.startswith("hedged") for e in events)
    (request,) = sent
    assert_only_its_own(request, then)


class _TraceContext:
    """An observer that takes part in each request (as OpenTelemetry's propagation does)."""

    def __init__(self) -> None:
        self.sent = 0

    def on_open(self, info: Any) -> None:
        pass

    def on_event(self, event: Any) -> None:
        pass

    def on_end(self, reply: Any, stats: Any) -> None:
        pass

    def on_send(self, headers: dict[str, str], info: Any) -> None:
        self.sent += 1
        headers["traceparent"] = f"00-{self.sent:032x}-{self.sent:016x}-01"


@pytest.mark.parametrize("then", APIS)
async def test_trace_context_reaches_the_fallback(
    then: str, busy: ServerThread, fallback: ServerThread
) -> None:
    """An observer's ``on_send`` takes part in the fallback's request too (the primary's
    request was the first send, the fallback's the second)."""
    tracer = _TraceContext()
    with new_requests(fallback) as sent:
        async with fluxstream.AsyncClient(
            busy.base_url, api_key=PRIMARY_KEY, observers=[tracer],
            fallbacks=[Upstream(fallback.base_url, api=then, api_key=FALLBACK_KEY)],
            failover=Failover(per_upstream_attempts=1),
        ) as client:
            await read_all(client.chat.stream(model="m", messages=MSG))
    (request,) = sent
    headers = headers_of(request)
    assert headers.get("traceparent") == f"00-{2:032x}-{2:016x}-01"
    assert headers.get(OWN_KEY[then][0]) == OWN_KEY[then][1]


async def test_a_header_not_marked_shared_stays_with_the_primary(
    busy: ServerThread, fallback: ServerThread
) -> None:
    """Without ``shared_headers`` not even a request id crosses; marked on the call's own
    ``failover=``, the call's value does."""
    with new_requests(fallback) as sent:
        async with fluxstream.AsyncClient(
            busy.base_url, api_key=PRIMARY_KEY, headers=CLIENT_HEADERS,
            fallbacks=[Upstream(fallback.base_url, api_key=FALLBACK_KEY)],
            failover=Failover(per_upstream_attempts=1),
        ) as client:
            await read_all(client.chat.stream(model="m", messages=MSG))
            await read_all(client.chat.stream(
                model="m", messages=MSG, extra_headers={"X-Request-Id": "this-call"},
                failover=Failover(per_upstream_attempts=1, shared_headers=["X-Request-ID"]),
            ))
    plain, marked = (headers_of(r) for r in sent)
    assert "x-request-id" not in plain
    assert marked["x-request-id"] == "this-call"
    assert plain["authorization"] == marked["authorization"] == f"Bearer {FALLBACK_KEY}"


async def test_a_fallback_without_a_key_sends_none_and_reads_no_environment(
    busy: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``OPENAI_API_KEY`` is the client's own: a fallback without ``api_key`` (a
    third-party OpenAI-compatible host) is sent no key at all."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment-primary")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-environment-primary")
    monkeypatch.setenv("GEMINI_API_KEY", "gemini-environment-primary")
    with ServerThread() as open_server, new_requests(open_server) as sent:
        async with fluxstream.AsyncClient(
            busy.base_url, failover=Failover(per_upstream_attempts=1),
        ) as client:
            for api in APIS:
                await read_all(client.chat.stream(
                    model="m", messages=MSG,
                    fallbacks=[Upstream(open_server.base_url, api=api)]))
    assert len(sent) == len(APIS)
    for request in sent:
        headers = headers_of(request)
        assert not set(headers) & CREDENTIAL_NAMES, headers
        assert not any("primary" in v for v in headers.values())
