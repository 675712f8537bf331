"""Responses API streams resumed the Responses way, end to end over 127.0.0.1 (asyncio, trio).

* ``starting_after``: a dropped stream of a response created with ``background: true`` is read
  again with ``GET /responses/{id}?stream=true&starting_after=N`` (OpenAI's own resume; ``N``
  the last ``sequence_number`` delivered): the text is shown once, exactly, offsets go on; a
  resume token carries what another worker needs to do the same; a re-read the server refuses
  (the response was not stored) rules the strategy out and the next one applies.
* ``continuation`` for Responses bodies: the partial answer is appended to ``input`` (never to
  a ``messages`` list the Responses API does not have), marked ``"status": "in_progress"``.

The embedded server's script says what the full answer is (``script_for``), and its records say
which requests were sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from sse_frames import frames

import fluxstream
from fluxstream._events import Reset, TextDelta
from fluxstream._retry import ResumePolicy
from fluxstream.server import Server, script_for

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Weather in Zürich? 你好 🌍"}]


def faults(spec: str, key: str) -> dict[str, str]:
    """A fault for the first attempt only (the key ties the POST and its re-reads together:
    without it, the GET would count as another request and drop again)."""
    return {"X-Fluxstream-Fault": f"{spec},fail-first=1", "X-Fluxstream-Attempt-Key": key}


#: Every request the clients of a test sent (the server's records keep no query string).
SENT: list[httpx.Request] = []


@asynccontextmanager
async def client_for(server: Server, **kwargs: Any) -> AsyncIterator[fluxstream.AsyncClient]:
    async def record(request: httpx.Request) -> None:
        SENT.append(request)

    async with httpx.AsyncClient(timeout=10, event_hooks={"request": [record]}) as http:
        async with fluxstream.AsyncClient(
            base_url=server.base_url, api_key="sk-resume", http_client=http, **kwargs
        ) as client:
            yield client


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    SENT.clear()


async def run(stream: Any) -> tuple[str, list[Any]]:
    shown: list[str] = []
    events: list[Any] = []
    async with stream:
        async for event in stream:
            events.append(event)
            if isinstance(event, TextDelta):
                shown.append(event.text)
    return "".join(shown), events


def assert_offsets_continue(events: list[Any], start: int = 0) -> None:
    """Every text delta starts where the previous one ended: nothing twice, nothing skipped."""
    at = start
    for event in events:
        if isinstance(event, TextDelta):
            assert event.offset == at, (event.offset, at)
            at += len(event.text)


def gets(server: Server) -> list[httpx.Request]:
    """The GETs sent (and the server received as many)."""
    sent = [r for r in SENT if r.method == "GET"]
    assert len(sent) == len([r for r in server.records.requests if r.method == "GET"])
    return sent


def afters(server: Server) -> list[list[str]]:
    return [parse_qs(r.url.query.decode())["starting_after"] for r in gets(server)]


def text_of(params: dict[str, Any]) -> str:
    return script_for("responses", params).choices[0].text


async def test_a_background_response_is_resumed_by_starting_after(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    async with client_for(aserver) as client:
        stream = client.responses.stream(
            **params, extra_headers=faults("drop-after-events=10,write-size=5", "bg-1")
        )
        shown, events = await run(stream)
    reply = stream.reply
    assert shown == reply.text == text_of(params)
    assert reply.outcome is fluxstream.Outcome.DONE and stream.stats.resumes == 1
    assert_offsets_continue(events)
    [get] = gets(aserver)
    assert get.url.path == f"/v1/responses/{reply.id}"
    # events 0..9 were written before the drop: the last one delivered is 9
    assert parse_qs(get.url.query.decode()) == {"stream": ["true"], "starting_after": ["9"]}
    assert get.headers["authorization"] == "Bearer sk-resume"  # authenticated like the stream
    assert get.content == b"" and "last-event-id" not in get.headers
    assert "content-type" not in get.headers


async def test_every_drop_of_a_background_response_is_resumed(aserver: Server) -> None:
    """Each re-read drops too (``fail-first=3``): three resumes, each after the last event
    delivered by the one before, and the text is still exact."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    headers = {"X-Fluxstream-Fault": "drop-after-events=6,fail-first=3",
               "X-Fluxstream-Attempt-Key": "bg-3"}
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params, extra_headers=headers)
        shown, events = await run(stream)
    assert shown == stream.reply.text == text_of(params)
    assert stream.reply.outcome is fluxstream.Outcome.DONE and stream.stats.resumes == 3
    assert_offsets_continue(events)
    assert afters(aserver) == [["5"], ["11"], ["17"]]


async def test_without_background_there_is_nothing_to_re_read(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": USER}
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params,
                                         extra_headers=faults("drop-after-events=10", "nb"))
        shown, _ = await run(stream)
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED
    assert text_of(params).startswith(shown) and shown == stream.reply.text
    assert gets(aserver) == []


async def test_starting_after_can_be_turned_off(aserver: Server) -> None:
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    async with client_for(aserver, resume=ResumePolicy(starting_after=False)) as client:
        stream = client.responses.stream(**params,
                                         extra_headers=faults("drop-after-events=10", "off"))
        await run(stream)
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED and gets(aserver) == []


async def test_a_resume_token_is_resumed_by_starting_after_in_another_client(
    aserver: Server,
) -> None:
    """Worker A's stream drops (A does not resume); worker B resumes from A's token with
    ``client.responses.resume`` (or ``client.chat.resume``, which hands it over): B shows
    only the rest, at the offsets where A stopped."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    full = text_of(params)
    async with client_for(aserver, resume=ResumePolicy.off()) as worker_a:
        first = worker_a.responses.stream(
            **params, extra_headers=faults("drop-after-events=12", "tok")
        )
        shown_a, _ = await run(first)
        token = json.loads(json.dumps(first.resume_token()))  # crosses a process boundary
    assert first.reply.outcome is fluxstream.Outcome.TRUNCATED and 0 < len(shown_a) < len(full)
    assert token["sequence"] == 11 and token["response_id"] == first.reply.id
    for resume in ("responses", "chat"):
        async with client_for(aserver) as worker_b:
            endpoint = worker_b.responses if resume == "responses" else worker_b.chat
            second = endpoint.resume(token)
            shown_b, events = await run(second)
        assert shown_a + shown_b == second.reply.text == full
        assert second.reply.outcome is fluxstream.Outcome.DONE
        assert second.reply.content_key == first.reply.content_key
        assert_offsets_continue(events, start=len(shown_a))
    assert afters(aserver) == [["11"], ["11"]]


async def test_a_refused_re_read_falls_back_to_the_next_strategy(aserver: Server) -> None:
    """The server does not know the response (404: it was not stored, or expired): the
    strategy is ruled out and the next one applies (here a restart); with none left, the
    resume fails with the typed status error and the partial reply, never a crash."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    async with client_for(aserver, resume=ResumePolicy.off()) as worker_a:
        first = worker_a.responses.stream(
            **params, extra_headers=faults("drop-after-events=12", "gone")
        )
        await run(first)
    token = {**first.resume_token(), "response_id": "resp_unknown/../x?y=1"}
    async with client_for(aserver) as worker_b:
        nothing = worker_b.responses.resume(token)
        with pytest.raises(fluxstream.errors.NotFoundError):  # typed, as any failed open
            await run(nothing)
        assert nothing.reply.outcome is fluxstream.Outcome.FAILED
        assert nothing.reply.text == first.reply.text  # the partial reply is kept
        restarted = worker_b.responses.resume(token, resume=ResumePolicy(restart=True))
        shown, events = await run(restarted)
    assert any(isinstance(e, Reset) for e in events)
    assert shown == restarted.reply.text == text_of(params)
    assert restarted.reply.outcome is fluxstream.Outcome.DONE
    # the hostile id was quoted whole: one path segment, no query of its own
    assert [r.url.raw_path.split(b"?")[0] for r in gets(aserver)] == [
        b"/v1/responses/resp_unknown%2F..%2Fx%3Fy%3D1"] * 2
    assert afters(aserver) == [["11"], ["11"]]


async def test_a_responses_continuation_appends_to_input(aserver: Server) -> None:
    """``continuation`` for a Responses body: the partial answer goes into ``input`` as an
    in-progress assistant message; the continuation is a new response whose sequence
    numbers count from 0 again, and its text is shown (none of it dropped as a replay)."""
    params: dict[str, Any] = {"model": "m", "input": "Tell me about Zürich"}
    policy = ResumePolicy(continuation=True, last_event_id=False)
    async with client_for(aserver, resume=policy) as client:
        stream = client.responses.stream(**params,
                                         extra_headers=faults("drop-after-events=12", "cont"))
        shown, events = await run(stream)
    requests = [r for r in aserver.records.requests if r.method == "POST"]
    assert gets(aserver) == []
    assert len(requests) == 2
    body = requests[1].json
    assert "messages" not in body
    assert body["input"][0] == {"role": "user", "content": "Tell me about Zürich"}
    prefill = body["input"][-1]
    assert prefill["role"] == "assistant" and prefill["status"] == "in_progress"
    assert "prefix" not in prefill and shown.startswith(prefill["content"])
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    assert shown == stream.reply.text == text_of(params)
    assert_offsets_continue(events)


async def test_a_background_response_dropped_before_content_is_re_read_not_sent_again(
    aserver: Server,
) -> None:
    """Dropped after ``response.created`` but before any text: the provider is generating
    the stored response anyway, so it is re-read (one POST), not requested a second time."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    async with client_for(aserver) as client:
        stream = client.responses.stream(**params,
                                         extra_headers=faults("drop-after-events=2", "early"))
        shown, events = await run(stream)
    assert shown == stream.reply.text == text_of(params)
    assert stream.reply.outcome is fluxstream.Outcome.DONE
    assert_offsets_continue(events)
    assert len([r for r in SENT if r.method == "POST"]) == 1
    assert afters(aserver) == [["1"]]


# ---------------------------------------------------------------------------- odd servers

def _frames(*events: dict[str, Any]) -> bytes:
    """Named events, each numbered by its place."""
    return frames(*({**e, "sequence_number": n} for n, e in enumerate(events)), named=True)


_CREATED = {"type": "response.created", "response": {"id": "resp_m", "status": "in_progress"}}
_DONE = {"type": "response.completed", "response": {"id": "resp_m", "status": "completed"}}


def _delta(text: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
            "delta": text}


class _Dropping(httpx.AsyncByteStream):
    """A body that ends with a transport error after ``data`` (a dropped connection)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data
        raise httpx.RemoteProtocolError("peer closed connection")


async def test_a_re_read_answered_with_json_is_not_read_twice() -> None:
    """A server that ignores ``stream=true`` answers the whole response object: reading it
    would show the delivered text again. It is no re-read: the strategy is ruled out and the
    next applies (restart), or the stream ends truncated with what was shown once."""
    posts: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        SENT.append(request)
        sse = {"content-type": "text/event-stream"}
        if request.method == "GET":
            whole = {"id": "resp_m", "object": "response", "status": "completed",
                     "output": [{"type": "message", "content": [
                         {"type": "output_text", "text": "Hello world"}]}]}
            return httpx.Response(200, json=whole)
        posts.append(request)
        if len(posts) == 1:
            return httpx.Response(200, headers=sse,
                                  stream=_Dropping(_frames(_CREATED, _delta("Hello"))))
        return httpx.Response(200, headers=sse, content=_frames(
            _CREATED, _delta("Hello"), _delta(" world"), _DONE))

    for policy, outcome, text in [
        (ResumePolicy(), fluxstream.Outcome.TRUNCATED, "Hello"),
        (ResumePolicy(restart=True), fluxstream.Outcome.DONE, "Hello world"),
    ]:
        posts.clear()
        SENT.clear()
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            async with fluxstream.AsyncClient(base_url="http://127.0.0.1:9/v1", api_key="k",
                                              http_client=http, resume=policy) as client:
                stream = client.responses.stream(model="m", input="hi", background=True)
                shown, events = await run(stream)
        assert stream.reply.outcome is outcome
        assert stream.reply.text == text
        if policy.restart:
            assert any(isinstance(e, Reset) for e in events)
        else:
            assert shown == "Hello"  # never "HelloHello world"
        assert [r.method for r in SENT] == ["POST", "GET", *(["POST"] if policy.restart else [])]
        assert SENT[1].url.params["starting_after"] == "1"


@pytest.mark.parametrize(
    "sequence", [2**53, 10**30, 10**5000, -1, True, "9", 9.0],
    ids=["2**53", "10**30", "10**5000", "-1", "True", "str", "float"],
)
def test_an_unbelievable_sequence_number_is_not_resumed_from(sequence: object) -> None:
    """From the server or from a token: a number no response reaches is never put into a
    ``starting_after`` query (thousands of digits do not even format). The server's is not
    used; a token's is refused (it once was dropped silently, and the whole response read
    again), as every part of a token of the wrong type is."""
    if type(sequence) is int and 0 <= sequence < 10**4000:
        parser = fluxstream.StreamParser(format="responses")
        parser.feed(_frames(_CREATED).replace(b'"sequence_number": 0',
                                              f'"sequence_number": {sequence}'.encode()))
        assert parser.reply.id == "resp_m" and parser.sequence is None
    token = {"version": 1, "key": "k", "reply": {}, "response_id": "resp_m",
             "sequence": sequence}
    with pytest.raises(fluxstream.ResumeTokenError):
        fluxstream.StreamParser.from_token(token, format="responses")


def test_an_unbelievable_response_id_is_not_resumed_from() -> None:
    parser = fluxstream.StreamParser(format="responses")
    huge = "r" * 100_000
    parser.feed(_frames({"type": "response.created", "response": {"id": huge}}))
    assert parser.reply.id == huge and parser.response_id is None  # kept, never sent


@pytest.mark.parametrize("dots", [".", ".."])
async def test_a_response_id_of_dots_is_never_put_into_a_path(aserver: Server, dots: str) -> None:
    """Quoting keeps ``.`` (an unreserved character), so a response id of ``..`` (a forged
    token, or a hostile server's ``response.created``) made the re-read's URL
    ``responses/..?...``: a GET to the API root with the service's key. Such an id names no
    stored response: the strategy does not apply, and nothing is sent for it."""
    params: dict[str, Any] = {"model": "m", "input": USER, "background": True}
    async with client_for(aserver, resume=ResumePolicy.off()) as worker_a:
        first = worker_a.responses.stream(
            **params, extra_headers=faults("drop-after-events=12", f"dots{len(dots)}")
        )
        await run(first)
    token = {**first.resume_token(), "response_id": dots}
    async with client_for(aserver) as worker_b:
        nothing = worker_b.responses.resume(token)
        with pytest.raises(fluxstream.errors.FluxstreamError):
            await run(nothing)
        assert nothing.reply.text == first.reply.text  # the partial reply is kept
    assert gets(aserver) == []
