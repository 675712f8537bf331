"""A 2xx answer that is no reply fails the stream, with an error that says what came.

A base URL missing its API prefix landed on a real server's catch-all route, which answered
200 ``{"method": "POST", "path": ..., "client": ...}``: ``complete()`` returned ``done`` with
text ``''`` on all four APIs. Such a body is now ``failed`` with a typed error
(``NotAReplyError``, a ``ContentTypeError``) naming the status, the content type and the start
of the body (escaped, on one line, cut; the request's own credentials are never shown, even
when the server echoes them back). So is a 200 ``text/html`` or ``text/plain`` body, and a
``204``, which said "expected text/event-stream or application/json, got 'application/json'".
A real non-streamed reply (a server that ignores ``stream: true``) is still read as before.

Every case on both transports, against a raw server on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fault_server import Conn, serve_faults

import fluxstream
from fluxstream import Outcome
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import ContentTypeError, FluxstreamError

pytestmark = pytest.mark.asyncio

TRANSPORTS = ("aiohttp", "httpx")
MSG = [{"role": "user", "content": "hi"}]
KEY = "sk-our-own-secret-key-0123456789"
WITHIN = 5.0

Call = Callable[[Any], Awaitable[Any]]
#: How each API's ``complete()`` is called.
CALLS: dict[str, Call] = {
    "chat_completions": lambda c: c.chat.complete(model="m", messages=MSG),
    "responses": lambda c: c.responses.complete(model="m", input="hi"),
    "anthropic_messages": lambda c: c.messages.complete(model="m", messages=MSG, max_tokens=8),
    "gemini": lambda c: c.gemini.complete(
        model="m", contents=[{"role": "user", "parts": [{"text": "hi"}]}]
    ),
}
#: How each API's ``stream()`` is called.
STREAMS: dict[str, Callable[[Any], Any]] = {
    "chat_completions": lambda c: c.chat.stream(model="m", messages=MSG),
    "responses": lambda c: c.responses.stream(model="m", input="hi"),
    "anthropic_messages": lambda c: c.messages.stream(model="m", messages=MSG, max_tokens=8),
    "gemini": lambda c: c.gemini.stream(
        model="m", contents=[{"role": "user", "parts": [{"text": "hi"}]}]
    ),
}
#: Each API's own non-streamed reply, saying "fine".
REPLIES: dict[str, dict[str, Any]] = {
    "chat_completions": {"id": "c", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"},
         "finish_reason": "stop"}]},
    "responses": {"id": "r", "object": "response", "status": "completed", "output": [
        {"type": "message", "content": [{"type": "output_text", "text": "fine"}]}]},
    "anthropic_messages": {"id": "m", "type": "message", "role": "assistant",
                           "content": [{"type": "text", "text": "fine"}],
                           "stop_reason": "end_turn"},
    "gemini": {"candidates": [{"content": {"role": "model", "parts": [{"text": "fine"}]},
                               "finishReason": "STOP"}]},
}


def answer(status: bytes, ctype: bytes | None, body: bytes) -> bytes:
    head = [b"HTTP/1.1 " + status, b"content-length: %d" % len(body), b"connection: close"]
    if ctype is not None:
        head.append(b"content-type: " + ctype)
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def echo(head: bytes) -> bytes:
    """What a catch-all route answers: the request as it saw it, our headers included (as
    httpbin's ``/anything`` does), over several lines."""
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    credentials = {name: value for name, value in headers.items()
                   if name.lower() in ("authorization", "x-api-key", "x-goog-api-key")}
    return json.dumps({"method": method, "credentials": credentials, "path": path,
                       "client": "127.0.0.1", "headers": headers}, indent=1).encode()


async def run(transport: str, api: str, respond: Callable[[bytes], bytes]) -> Any:
    """``complete()`` of ``api`` against a server that answers each request ``respond(head)``:
    (the reply or the error raised, the client's stream count of requests, the log)."""

    async def script(conn: Conn) -> None:
        head = await conn.request()
        if head:
            await conn.send(respond(head))

    async with serve_faults(script) as srv:
        client = fluxstream.AsyncClient(
            srv.base, api_key=KEY, transport=transport,
            timeouts=fluxstream.Timeouts(connect=WITHIN, read=WITHIN, write=WITHIN, pool=WITHIN),
            retry=RetryPolicy.off(), resume=ResumePolicy.off(),
        )
        async with client:
            try:
                return await CALLS[api](client), srv.connections
            except FluxstreamError as exc:
                return exc, srv.connections


def assert_shown_safely(exc: BaseException, *parts: str) -> None:
    """The error names what came, on one line, escaped, without our key."""
    text = str(exc)
    for part in parts:
        assert part in text, (part, text)
    assert "\n" not in text and "\x1b" not in text, text
    assert KEY not in text and KEY not in repr(exc), text
    reply = getattr(exc, "reply", None)
    if reply is not None:
        assert KEY not in reply.model_dump_json()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", list(CALLS))
async def test_a_json_body_that_is_no_reply_fails_naming_what_came(
    api: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fluxstream")
    raised, connections = await run(
        transport, api, lambda head: answer(b"200 OK", b"application/json", echo(head))
    )
    assert isinstance(raised, fluxstream.NotAReplyError), f"{transport}: {raised!r}"
    assert isinstance(raised, ContentTypeError)
    assert raised.status_code == 200 and raised.content_type == "application/json"
    assert_shown_safely(raised, "HTTP 200", "'application/json'", '"method": "POST"', "\\n")
    assert connections == 1  # not retried: the same request gets the same answer
    assert KEY not in caplog.text


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", list(CALLS))
async def test_a_stream_given_such_a_body_ends_failed(api: str, transport: str) -> None:
    async def script(conn: Conn) -> None:
        head = await conn.request()
        if head:
            await conn.send(answer(b"200 OK", b"application/json", echo(head)))

    async with serve_faults(script) as srv, fluxstream.AsyncClient(
        srv.base, api_key=KEY, transport=transport, retry=RetryPolicy.off()
    ) as client:
        s = STREAMS[api](client)
        with pytest.raises(fluxstream.NotAReplyError):
            async with s:
                async for _ in s:
                    pass
    assert s.outcome is Outcome.FAILED
    assert s.reply.text == ""
    assert isinstance(s.cause, fluxstream.NotAReplyError)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", list(CALLS))
async def test_a_real_non_streamed_reply_is_still_read(api: str, transport: str) -> None:
    body = json.dumps(REPLIES[api]).encode()
    reply, _ = await run(
        transport, api, lambda head: answer(b"200 OK", b"application/json", body)
    )
    assert not isinstance(reply, BaseException), f"{transport}: {reply!r}"
    assert (reply.outcome, reply.text) == (Outcome.DONE, "fine")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ctype", [b"text/html; charset=utf-8", b"text/plain"])
async def test_a_200_html_or_text_body_fails_naming_what_came(
    ctype: bytes, transport: str
) -> None:
    page = b"<!doctype html>\n<title>It works!</title>\x1b[2J " + KEY.encode()
    raised, _ = await run(transport, "chat_completions", lambda head: answer(
        b"200 OK", ctype, page))
    assert type(raised) is ContentTypeError, f"{transport}: {raised!r}"
    assert raised.status_code == 200
    assert_shown_safely(raised, "HTTP 200", repr(ctype.decode()), "<!doctype html>\\n")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("ctype", [b"application/json", b"text/event-stream", None])
async def test_a_204_says_it_came_with_no_body(ctype: bytes | None, transport: str) -> None:
    raised, _ = await run(transport, "chat_completions", lambda head: answer(
        b"204 No Content", ctype, b""))
    assert type(raised) is ContentTypeError, f"{transport}: {raised!r}"
    assert raised.status_code == 204
    assert_shown_safely(raised, "HTTP 204", "no body")
    assert "got" not in str(raised), str(raised)  # "expected ... got 'application/json'"
    if ctype is not None:
        assert repr(ctype.decode()) in str(raised)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("api", list(CALLS))
async def test_an_error_status_that_echoes_the_request_never_shows_our_key(
    api: str, transport: str
) -> None:
    """A catch-all route that answers 404 with the request echoed (our key in it): the
    ``NotFoundError``'s message and body hold what the server said, without the key."""
    raised, _ = await run(
        transport, api, lambda head: answer(b"404 Not Found", b"application/json", echo(head))
    )
    assert isinstance(raised, fluxstream.NotFoundError), f"{transport}: {raised!r}"
    assert '"method": "POST"' in json.dumps(raised.body)
    assert KEY not in str(raised) and KEY not in json.dumps(raised.body), str(raised)
