"""The HTTP/1.1 server: routing, the API key check, faults and streaming of scripted replies.

Why it is built this way
------------------------
* **h11 + anyio, no framework.** A framework would buffer, re-chunk and flush on its own terms;
  fault injection needs to decide the size of every ``send`` and the exact moment the socket
  closes (for example half an event inside a chunk, then a hard close with no terminator).
  h11 does the HTTP parsing and framing and nothing else (see :mod:`.connection`); anyio makes
  it run under asyncio and trio alike.
* **Content and timing are separate.** What is sent comes from the pure :mod:`.script` and
  :mod:`.render`; this module only adds timing and faults, so a ``Last-Event-ID`` resume or a
  retry sees exactly the same events.
* **Everything is bounded.** Requests per connection, body size, buffered input, idle time,
  every fault duration and every delta count have limits, and leaving :func:`serve` cancels all
  connections, so a misbehaving client or test can never hang the process.
* **Memory is bounded too** (``fluxstream serve`` is public): a body is at most
  ``max_body_bytes``, one that would decode to more than :data:`MAX_JSON_VALUES` values is
  refused before decoding (a few MiB of ``{},`` decode to ~25x their size), and at most
  ``max_connections`` are served at once (see :mod:`.slots` for why the next one waits).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qs

import anyio
import anyio.abc
import h11

from .connection import (
    DEFAULT_MAX_BODY_BYTES,
    ClientGone,
    Connection,
    Dropped,
    error_json,
    set_reset_on_close,
    set_socket_options,
)
from .dialects import from_messages, from_responses
from .faults import FaultError, Faults, build_faults, parse_fault_spec
from .profiles import ProfileError, parse_profiles, split_model
from .records import DisconnectRecord, Records, RequestRecord, ResponseRecord
from .render import (
    RETRY_MS,
    WireEvent,
    completion,
    frame,
    frame_comment,
    oversize_data,
    stream_events,
)
from .render_messages import message_object, messages_events, ping
from .render_responses import response_id, response_object, responses_events
from .script import CREATED, Script, build_script, continuation_prefix, dumps
from .slots import DEFAULT_MAX_CONNECTIONS, Slots

__all__ = [
    "ATTEMPT_HEADER",
    "CONTINUATION_HEADER",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "FAULT_HEADER",
    "MAX_JSON_VALUES",
    "MODELS",
    "PROFILE_HEADER",
    "Server",
    "serve",
]

log = logging.getLogger("fluxstream.server")

#: Request header naming quirk profiles for this response (``azure,heartbeats``), in place
#: of the server's own (a ``model`` suffix does the same).
PROFILE_HEADER = "X-Fluxstream-Profile"
#: Request header with faults for this response (``drop-after=400,fail-first=1``); key by
#: key, it overrides the server's own faults.
FAULT_HEADER = "X-Fluxstream-Fault"
#: Request header that ties the attempts of one reply together, so ``fail-first=N`` counts a
#: resume whose request differs (a continuation body, a ``starting_after`` GET) as the next
#: attempt of the same reply; without it, attempts are counted by method, path and body.
ATTEMPT_HEADER = "X-Fluxstream-Attempt-Key"
#: Response header on continuation requests (assistant ``prefix: true`` last): ``continued``
#: when the prefix was honoured, ``ignored`` when the request was answered as if it were absent
#: (the reply does not start with the prefix, or it has tool calls or several choices).
CONTINUATION_HEADER = "X-Fluxstream-Continuation"
#: Model ids listed by ``GET /v1/models`` (any model name is accepted by chat completions).
MODELS: tuple[str, ...] = ("fluxstream-echo", "fluxstream-reasoner")

MAX_REQUESTS_PER_CONNECTION = 10_000
MAX_EVENTS_PER_REQUEST = 100_000
#: Deepest JSON nesting a request body may have (real requests nest a dozen levels or so).
MAX_JSON_DEPTH = 128
#: Most JSON values a request body may hold. A value costs up to ~100 bytes decoded however
#: short it is on the wire (``{},`` is 3 bytes, its dict 64 and a list slot 8), so this bounds
#: what decoding costs beyond the body's own text to tens of MiB, whatever the body size;
#: real requests hold a few thousand.
MAX_JSON_VALUES = 250_000
DEFAULT_IDLE_TIMEOUT = 60.0

_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODEL_PATHS = ("/v1/models", "/models")
_RESPONSES_PATHS = ("/v1/responses", "/responses")
_MESSAGES_PATHS = ("/v1/messages", "/messages")
_RESPONSE_PATH = re.compile(r"(?:/v1)?/responses/([A-Za-z0-9_-]{1,128})")
#: Background responses kept for ``GET /v1/responses/{id}`` (oldest dropped beyond this).
MAX_STORED_RESPONSES = 1024
#: Anthropic's error type per status (``{"type": "error", "error": {"type": ...}}`` bodies).
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def anthropic_error_json(status: int, message: str) -> bytes:
    """Anthropic's error body for ``status``."""
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()


def _dialect(path: str) -> Literal["chat", "responses", "messages"]:
    if path in _MESSAGES_PATHS or path.startswith(("/v1/messages/", "/messages/")):
        return "messages"
    if path in _RESPONSES_PATHS or path.startswith(("/v1/responses/", "/responses/")):
        return "responses"
    return "chat"


class Server:
    """A running embedded server: where it listens and what it has recorded.

    Created by :func:`serve`; tests read :attr:`base_url` and :attr:`records`.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        profile: str | None = "openai",
        api_key: str | None = None,
        faults: str | Mapping[str, str] | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        record_limit: int | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        for name, value in (("max_body_bytes", max_body_bytes),
                            ("max_connections", max_connections)):
            if value.__class__ is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        self.host = host
        self.port = port
        self.profiles = parse_profiles(profile)
        self.api_key = api_key
        self.fault_spec = parse_fault_spec(faults)
        build_faults(self.fault_spec)  # validate now, not on the first request
        self.idle_timeout = idle_timeout
        self.max_body_bytes = max_body_bytes
        self.slots = Slots(max_connections)
        self.records = Records(limit=record_limit)
        self._attempts: dict[str, int] = {}
        #: Background responses: id -> (events, the final response object, profile set).
        self._stored: dict[str, tuple[list[WireEvent], dict[str, Any], frozenset[str]]] = {}
        self._request_seq = 0
        self._connection_seq = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI-style client takes as ``base_url``."""
        return f"{self.url}/v1"

    async def wait_disconnect(
        self,
        timeout: float = 1.0,  # noqa: ASYNC109 - a plain number is the convenient test API
        *,
        request: int | None = None,
        completed: bool | None = None,
    ) -> DisconnectRecord:
        """Wait for a client disconnect record (see :meth:`Records.wait_disconnect`)."""
        return await self.records.wait_disconnect(timeout, request=request, completed=completed)

    # -- connection handling -------------------------------------------------------------------

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        """Serve one connection; never raises (an exception would stop the whole server)."""
        self._connection_seq += 1
        self.records.connections += 1
        conn = Connection(
            self.records, stream, self._connection_seq, write_timeout=self.idle_timeout,
            max_body_bytes=self.max_body_bytes,
        )
        set_socket_options(stream)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(conn.reader)
                try:
                    await self._serve_connection(conn)
                finally:
                    conn.closing = True
                    tg.cancel_scope.cancel()
        except Exception:  # pragma: no cover - defensive: log, close, keep serving
            log.exception("fluxstream server: connection %d failed", conn.id)
        finally:
            conn.closing = True
            if conn.reset:
                set_reset_on_close(stream)
            await anyio.aclose_forcefully(stream)
            self.slots.release()

    async def _serve_connection(self, conn: Connection) -> None:
        for served in range(MAX_REQUESTS_PER_CONNECTION):
            if served and not await self._idle(conn):
                return
            request: h11.Request | None = None
            too_big = False
            body = bytearray()
            with anyio.move_on_after(self.idle_timeout):  # a slow head or body (slowloris)
                try:
                    request, too_big = await conn.read_request(body)
                except h11.RemoteProtocolError as exc:
                    await self._send_protocol_error(conn, exc)
                    return
            if request is None:
                return
            if too_big:
                path = request.target.decode("latin-1").partition("?")[0]
                message = f"request body over {self.max_body_bytes} bytes"
                await self._error(conn, _dialect(path), 413, message, close=True)
                return
            keep = await self._respond(conn, request, body)
            if not keep or conn.disconnected:
                return
            if h11.MUST_CLOSE in (conn.h11.our_state, conn.h11.their_state):
                return
            if conn.faults.close_after is not None:
                await conn.linger(conn.faults.close_after)
                return
            try:
                conn.h11.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _idle(self, conn: Connection) -> bool:
        """Wait for the next request on a kept-alive connection; ``False`` (close it) after
        the idle timeout, or when a new connection needs its slot."""
        with anyio.move_on_after(self.idle_timeout) as scope, self.slots.idle(conn.id, scope):
            await conn.wait_for_request()
        return not scope.cancel_called

    async def _send_protocol_error(self, conn: Connection, exc: h11.RemoteProtocolError) -> None:
        if conn.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        status = exc.error_status_hint or 400
        body = error_json(f"bad request: {exc}", "invalid_request_error")
        with suppress(ClientGone, h11.LocalProtocolError):
            await conn.simple(status, body, close=True)

    # -- requests ------------------------------------------------------------------------------

    async def _respond(
        self, conn: Connection, request: h11.Request, body: bytearray
    ) -> bool:
        """Answer one request; ``False`` if the connection must close afterwards. ``body`` is
        emptied once decoded: a large one is not kept next to its decoded copies."""
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in request.headers]
        method = request.method.decode("ascii", "replace")
        path, _, query = request.target.decode("latin-1").partition("?")
        if _more_values_than(body, MAX_JSON_VALUES):
            # Not decoded (nor recorded): decoding is what would cost.
            message = f"request body holds more than {MAX_JSON_VALUES} JSON values"
            await self._error(conn, _dialect(path), 413, message, close=True)
            return False
        body_bytes, body_hash = len(body), hashlib.sha256(body).hexdigest()
        parsed, problem = _parse_body(body)
        body.clear()
        conn.faults = Faults()
        conn.body_bytes = 0
        conn.events = 0
        conn.status = 0
        names: frozenset[str] = frozenset()
        spec: dict[str, str] = {}
        faults = Faults()
        try:
            names = self._profiles_for(headers, parsed)
            spec = {**self.fault_spec, **parse_fault_spec(_header(headers, FAULT_HEADER))}
            faults = build_faults(spec)
        except (ProfileError, FaultError) as exc:
            problem = problem or str(exc)
        attempt = self._count_attempt(headers, method, path, body_hash)
        if faults.fail_first is not None and attempt > faults.fail_first:
            faults = Faults()
        self._request_seq += 1
        conn.request_seq = self._request_seq
        record = RequestRecord(
            seq=self._request_seq,
            connection=conn.id,
            method=method,
            path=path,
            headers=[
                (k, _redact(v) if k in ("authorization", "x-api-key") else v) for k, v in headers
            ],
            json=parsed,
            body_bytes=body_bytes,
            time=time.monotonic(),
            profiles=tuple(sorted(names)),
            faults=spec,
            attempt=attempt,
            last_event_id=_header(headers, "last-event-id"),
        )
        self.records.requests.append(record)
        ending: Literal["complete", "dropped", "client-disconnect", "shutdown"] = "shutdown"
        try:
            with anyio.CancelScope() as scope:
                conn.response_scope = scope
                if problem is not None:
                    await self._error(conn, _dialect(path), 400, problem)
                else:
                    conn.faults = faults
                    await self._dispatch(conn, method, path, query, headers, parsed, names)
                ending = "complete"
            if scope.cancelled_caught or conn.disconnected:
                ending = "client-disconnect"
                return False
            return not conn.closing
        except Dropped:
            ending = "dropped"
            conn.closing = True
            conn.reset = conn.faults.drop_reset
            return False
        except ClientGone:
            ending = "client-disconnect"
            return False
        except h11.LocalProtocolError:  # e.g. a body for HEAD: close rather than guess
            conn.closing = True
            return False
        finally:
            conn.response_scope = None
            if conn.disconnected and ending == "shutdown":
                ending = "client-disconnect"
            self.records.responses.append(
                ResponseRecord(
                    request=record.seq,
                    connection=conn.id,
                    status=conn.status,
                    body_bytes=conn.body_bytes,
                    events=conn.events,
                    ending=ending,
                    time=time.monotonic(),
                )
            )
            self.records.trim()

    async def _dispatch(
        self,
        conn: Connection,
        method: str,
        path: str,
        query: str,
        headers: list[tuple[str, str]],
        parsed: Any,
        names: frozenset[str],
    ) -> None:
        """Check the key, apply a status fault, route."""
        dialect = _dialect(path)
        if self.api_key is not None:
            auth = _header(headers, "authorization")
            bearer = auth == f"Bearer {self.api_key}"
            if dialect == "messages":
                if not bearer and _header(headers, "x-api-key") != self.api_key:
                    await self._error(conn, dialect, 401, "invalid x-api-key")
                    return
            elif auth is None or not bearer:
                message = (
                    "You didn't provide an API key. Provide it as 'Authorization: Bearer KEY'."
                    if auth is None
                    else "Incorrect API key provided."
                )
                await conn.simple(
                    401,
                    error_json(message, "invalid_request_error", "invalid_api_key"),
                    extra=[("www-authenticate", 'Bearer realm="fluxstream"')],
                )
                return
        if conn.faults.status is not None:
            await self._status_fault(conn, conn.faults, dialect)
        elif path in _MODEL_PATHS:
            if method != "GET":
                await self._method_not_allowed(conn, "GET")
                return
            models = {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": CREATED, "owned_by": "fluxstream"}
                    for m in MODELS
                ],
            }
            await conn.simple(200, dumps(models).encode())
        elif path in _CHAT_PATHS:
            if method != "POST":
                await self._method_not_allowed(conn, "POST")
                return
            await self._chat(conn, headers, parsed, names)
        elif path in _RESPONSES_PATHS or path in _MESSAGES_PATHS:
            if method != "POST":
                await self._method_not_allowed(conn, "POST")
                return
            if path in _RESPONSES_PATHS:
                await self._responses(conn, headers, parsed, names)
            else:
                await self._messages(conn, headers, parsed, names)
        elif (found := _RESPONSE_PATH.fullmatch(path)) is not None:
            if method != "GET":
                await self._method_not_allowed(conn, "GET")
                return
            await self._get_response(conn, headers, found.group(1), query)
        else:
            message = f"Invalid URL ({method} {path})"
            if dialect == "messages":
                await conn.simple(404, anthropic_error_json(404, message))
                return
            await conn.simple(404, error_json(message, "invalid_request_error", "not_found"))

    async def _error(
        self, conn: Connection, dialect: str, status: int, message: str, *, close: bool = False
    ) -> None:
        """A JSON error in the dialect's own shape (Anthropic's for ``/v1/messages``)."""
        if dialect == "messages":
            await conn.simple(status, anthropic_error_json(status, message), close=close)
            return
        kind = "invalid_request_error" if status < 500 else "server_error"
        code = "invalid_api_key" if status == 401 else None
        await conn.simple(status, error_json(message, kind, code), close=close)

    def _profiles_for(self, headers: list[tuple[str, str]], parsed: Any) -> frozenset[str]:
        header = _header(headers, PROFILE_HEADER)
        model = parsed.get("model") if isinstance(parsed, dict) else None
        suffix = split_model(model)[1] if isinstance(model, str) else None
        if header is None and suffix is None:
            return self.profiles
        return parse_profiles(header) | parse_profiles(suffix)

    def _count_attempt(
        self, headers: list[tuple[str, str]], method: str, path: str, body_hash: str
    ) -> int:
        """The attempt number: by the attempt-key header, else by method, path and the
        body's hash (of its raw bytes: no decoded copy of a body that may be megabytes)."""
        key = _header(headers, ATTEMPT_HEADER)
        if key is None:
            key = f"{method} {path} {body_hash}"
        if key not in self._attempts and len(self._attempts) > 100_000:
            self._attempts.clear()  # bound memory on a long-running server
        self._attempts[key] = self._attempts.get(key, 0) + 1
        return self._attempts[key]

    async def _method_not_allowed(self, conn: Connection, allow: str) -> None:
        body = error_json("Method not allowed", "invalid_request_error", "method_not_allowed")
        await conn.simple(405, body, extra=[("allow", allow)])

    async def _status_fault(self, conn: Connection, faults: Faults, dialect: str) -> None:
        status = faults.status or 500
        extra = [("retry-after", faults.retry_after)] if faults.retry_after else []
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        if status == 529:
            phrase = "Overloaded"
        if faults.status_body == "html":
            html = (
                f"<html><head><title>{status} {phrase}</title></head><body>"
                f"<center><h1>{status} {phrase}</h1></center><hr><center>fluxstream</center>"
                "</body></html>\n"
            )
            await conn.simple(status, html.encode(), "text/html; charset=utf-8", extra)
            return
        kind, code = {
            429: ("requests", "rate_limit_exceeded"),
            401: ("invalid_request_error", "invalid_api_key"),
            404: ("invalid_request_error", "model_not_found"),
        }.get(status, ("server_error", None) if status >= 500 else ("invalid_request_error", None))
        message = f"fluxstream fault: status {status}" + (f" {phrase}" if phrase else "")
        if dialect == "messages":
            message = phrase if status == 529 else message
            await conn.simple(status, anthropic_error_json(status, message), extra=extra)
            return
        await conn.simple(status, error_json(message, kind, code), extra=extra)

    async def _chat(
        self,
        conn: Connection,
        headers: list[tuple[str, str]],
        parsed: Any,
        names: frozenset[str],
    ) -> None:
        if not isinstance(parsed, dict) or not isinstance(parsed.get("messages"), list):
            message = "The request body must be a JSON object with a 'messages' array."
            await conn.simple(400, error_json(message, "invalid_request_error"))
            return
        script = build_script(parsed, names)
        extra = _continuation_headers(continuation_prefix(parsed), script)
        if parsed.get("stream") is not True or "json" in names:
            await conn.simple(200, dumps(completion(script, names)).encode(), extra=extra)
            return
        stream_options = parsed.get("stream_options")
        include_usage = isinstance(stream_options, dict) and bool(
            stream_options.get("include_usage")
        )
        events = stream_events(script, names, include_usage)
        await self._event_stream(conn, headers, script, events, names, extra, retry=RETRY_MS)

    async def _event_stream(
        self,
        conn: Connection,
        headers: list[tuple[str, str]],
        script: Script,
        events: list[WireEvent],
        names: frozenset[str],
        extra: list[tuple[str, str]],
        *,
        retry: int | None = None,
        keepalive: bytes | None = None,
    ) -> None:
        """Start a ``text/event-stream`` answer and stream ``events`` (after the request's
        ``Last-Event-ID``, if any) with the connection's faults; ``keepalive`` is what a
        heartbeat is in this format (default: a ``: ping`` comment)."""
        last_id = _header(headers, "last-event-id")
        if last_id is not None and last_id.strip().isdigit():
            after = int(last_id.strip())
            events = [e for e in events if e.seq is None or e.seq > after]
        await conn.start(
            200,
            [
                ("content-type", "text/event-stream; charset=utf-8"),
                ("cache-control", "no-cache"),
                ("x-fluxstream-profile", ",".join(sorted(names)) or "openai"),
                *extra,
            ],
            chunked=True,
        )
        beat = keepalive if keepalive is not None else frame_comment(names)
        await self._stream(conn, script, events[:MAX_EVENTS_PER_REQUEST], names, retry, beat)

    async def _stream(
        self,
        conn: Connection,
        script: Script,
        events: list[WireEvent],
        names: frozenset[str],
        retry: int | None,
        beat: bytes,
    ) -> None:
        faults = conn.faults
        await self._after_events(conn, script, names, 0, beat)
        if faults.batch and not (
            faults.drip or faults.stall or faults.oversize is not None
            or faults.drop_after_events is not None or faults.drop_after is not None
        ):
            await self._stream_batched(conn, events, names, faults.batch, retry, beat)
            return
        for position, event in enumerate(events):
            if position and faults.drip:
                await anyio.sleep(faults.drip)
            data = frame(event, names, retry=retry if position == 0 else None)
            if faults.drop_after_events is not None and conn.events >= faults.drop_after_events:
                await conn.drop_mid_event(data)
            if position and "heartbeats" in names:
                await conn.body(beat)
            await conn.body(data)
            conn.events += 1
            await self._after_events(conn, script, names, conn.events, beat)
        if faults.drop_after_events is not None and conn.events >= faults.drop_after_events:
            raise Dropped
        await conn.end()

    async def _stream_batched(
        self,
        conn: Connection,
        events: list[WireEvent],
        names: frozenset[str],
        size: int,
        retry: int | None,
        beat: bytes,
    ) -> None:
        """The same bytes as :meth:`_stream`, written in batches of at least ``size`` bytes."""
        buffer = bytearray()
        for position, event in enumerate(events):
            if position and "heartbeats" in names:
                buffer += beat
            buffer += frame(event, names, retry=retry if position == 0 else None)
            conn.events += 1
            if len(buffer) >= size:
                await conn.body(bytes(buffer))
                buffer.clear()
        if buffer:
            await conn.body(bytes(buffer))
        await conn.end()

    async def _after_events(
        self, conn: Connection, script: Script, names: frozenset[str], count: int, beat: bytes
    ) -> None:
        """Faults that fire once ``count`` events have been written: stall, oversize."""
        faults = conn.faults
        if faults.stall and count == faults.stall_after_events:
            interval = faults.stall_heartbeat
            if interval is None:
                await anyio.sleep(faults.stall)
            else:
                deadline = anyio.current_time() + faults.stall
                for _ in range(int(faults.stall / interval) + 2):
                    remaining = deadline - anyio.current_time()
                    if remaining <= 0:
                        break
                    await anyio.sleep(min(interval, remaining))
                    if deadline - anyio.current_time() > 0:
                        await conn.body(beat)
        if faults.oversize is not None and count == faults.oversize_after_events:
            big = WireEvent(None, oversize_data(script, faults.oversize))
            await conn.body(frame(big, names, wrap=False))


    # -- Responses and Messages ----------------------------------------------------------------

    async def _responses(
        self, conn: Connection, headers: list[tuple[str, str]], parsed: Any,
        names: frozenset[str],
    ) -> None:
        """``POST /v1/responses``: the chat script of the translated request, rendered as
        Responses events; a ``background`` response is stored for ``GET`` resumes."""
        if not isinstance(parsed, dict) or not isinstance(parsed.get("input"), (str, list)):
            message = "The request body must be a JSON object with an 'input' string or array."
            await self._error(conn, "responses", 400, message)
            return
        script = build_script(from_responses(parsed), names, token_cap=True)
        background = parsed.get("background") is True
        events = responses_events(script, names, background=background)
        final = response_object(script, names, background=background)
        if background:
            if len(self._stored) >= MAX_STORED_RESPONSES:
                self._stored.pop(next(iter(self._stored)))
            self._stored[response_id(script)] = (events, final, names)
        if parsed.get("stream") is not True or "json" in names:
            await conn.simple(200, dumps(final).encode())
            return
        await self._event_stream(conn, headers, script, events, names, [])

    async def _get_response(
        self, conn: Connection, headers: list[tuple[str, str]], rid: str, query: str
    ) -> None:
        """``GET /v1/responses/{id}`` of a background response: the object, or with
        ``stream=true`` its events after ``starting_after`` (OpenAI's resume)."""
        stored = self._stored.get(rid)
        if stored is None:
            message = f"No response found with id '{rid}'."
            await conn.simple(404, error_json(message, "invalid_request_error", "not_found"))
            return
        events, final, names = stored
        params = parse_qs(query)
        if params.get("stream", ["false"])[-1].lower() != "true":
            await conn.simple(200, dumps(final).encode())
            return
        after_text = params.get("starting_after", ["-1"])[-1]
        try:
            after = int(after_text)
        except ValueError:
            message = f"Invalid 'starting_after': {after_text!r} is not an integer."
            await conn.simple(400, error_json(message, "invalid_request_error"))
            return
        rest = [e for e in events if json.loads(e.data)["sequence_number"] > after]
        script = build_script({"messages": []})  # only for an oversize fault's skeleton
        await self._event_stream(conn, headers, script, rest, names, [])

    async def _messages(
        self, conn: Connection, headers: list[tuple[str, str]], parsed: Any,
        names: frozenset[str],
    ) -> None:
        """``POST /v1/messages``: the chat script of the translated request (a trailing
        assistant message is the prefill the reply continues), as Anthropic events."""
        if (
            not isinstance(parsed, dict)
            or not isinstance(parsed.get("messages"), list)
            or not isinstance(parsed.get("max_tokens"), int)
        ):
            message = "The request body must be a JSON object with 'messages' and 'max_tokens'."
            await self._error(conn, "messages", 400, message)
            return
        canonical = from_messages(parsed)
        prefill = continuation_prefix(canonical)
        if prefill is not None and prefill != prefill.rstrip():
            # Anthropic's own rule (and a trap for clients that resume by prefill).
            message = "messages: final assistant content cannot end with trailing whitespace"
            await self._error(conn, "messages", 400, message)
            return
        script = build_script(canonical, names, token_cap=True)
        extra = _continuation_headers(prefill, script)
        if parsed.get("stream") is not True or "json" in names:
            await conn.simple(200, dumps(message_object(script, names)).encode(), extra=extra)
            return
        events = messages_events(script, names)
        await self._event_stream(
            conn, headers, script, events, names, extra, keepalive=ping(names)
        )


def _continuation_headers(prefix: str | None, script: Script) -> list[tuple[str, str]]:
    """For a continuation request (one that ends with a partial assistant message), the
    header that says whether it was continued (a new stream, ids restarting at 1, whose
    content follows the prefix; see :mod:`.script`) or ignored."""
    if prefix is None:
        return []
    handled = "continued" if script.prefix is not None else "ignored"
    return [(CONTINUATION_HEADER.lower(), handled)]


#: Seconds the accept loop waits after a failed ``accept`` (no descriptor left, say).
ACCEPT_BACKOFF = 0.05


async def _accept_loop(
    listener: anyio.abc.SocketListener,
    handle: Any,
    tg: anyio.abc.TaskGroup,
    slots: Slots,
) -> None:
    """``Listener.serve`` that survives a failed ``accept``: anyio's lets the error out of its
    loop, so one ``EMFILE`` (a client that opens connections until the process has no file
    descriptor left) ended the whole server. It is logged, and accepting resumes after a
    pause (the queued connections wait in the kernel's backlog meanwhile). A connection is
    served once it has a slot (``max_connections``; ``handle`` releases it): until then no
    other is accepted."""
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            log.warning("fluxstream server: accept failed (%s); retrying", exc)
            await anyio.sleep(ACCEPT_BACKOFF)
            continue
        try:
            await slots.acquire()
        except BaseException:  # the server is closing
            await anyio.aclose_forcefully(stream)
            raise
        tg.start_soon(handle, stream)


#: Bytes of the body looked at at once when counting values outside strings.
_COUNT_WINDOW = 64 * 1024


def _more_values_than(body: bytes | bytearray, limit: int) -> bool:
    """Whether ``body`` holds more than ``limit`` JSON values, judged before decoding and at C
    speed: every value after the first in an array or object follows a ``,``, and every array
    or object opens with ``[`` or ``{``, so their count bounds the values. Those characters
    inside strings are text, so when the rough count is over, only the parts outside strings
    are counted: escaped quotes removed, the text between every other ``"`` is outside. It
    goes by windows, so the check itself costs at most one copy of the body (when it has
    backslashes). Where the body is not valid JSON the count may be off from there on; the
    decoder stops at that point too."""

    def count(text: bytes | bytearray) -> int:
        return text.count(b",") + text.count(b"{") + text.count(b"[")

    if count(body) <= limit:
        return False
    text = body
    if b"\\" in text:  # drop escape pairs first, so that every quote left is a delimiter
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = 0
    in_string = False
    for start in range(0, len(text), _COUNT_WINDOW):
        parts = text[start : start + _COUNT_WINDOW].split(b'"')
        outside += count(b"".join(parts[1 if in_string else 0 :: 2]))
        if outside > limit:
            return True
        in_string ^= len(parts) % 2 == 0  # an odd number of quotes in this window
    return False


def _parse_body(body: bytes | bytearray) -> tuple[Any, str | None]:
    """The request's JSON (``None`` if it is not JSON: the routes answer 400 for that), and a
    problem to answer 400 with. Nesting is bounded: ``json.loads`` raises ``RecursionError``
    (not ``ValueError``) on a deep body, and a value that loads can still overflow the stack
    of what walks it later (the digest, the renderers), so a value nested deeper than
    :data:`MAX_JSON_DEPTH` is refused."""
    if not body:
        return None, None
    too_deep = f"request body nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        parsed = json.loads(body)
    except RecursionError:
        return None, too_deep
    except ValueError:
        return None, None
    return parsed, (too_deep if _deeper_than(parsed, MAX_JSON_DEPTH) else None)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (iterative: no
    recursion on the value it checks)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in item if isinstance(child, (list, dict)))
    return False


def _header(headers: list[tuple[str, str]], name: str) -> str | None:
    lname = name.lower()
    return next((v for k, v in headers if k == lname), None)


def _redact(value: str) -> str:
    scheme, sep, _ = value.partition(" ")
    return f"{scheme} <redacted>" if sep else "<redacted>"


@asynccontextmanager
async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    profile: str | None = "openai",
    api_key: str | None = None,
    *,
    faults: str | Mapping[str, str] | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    record_limit: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> AsyncIterator[Server]:
    """Run the server in the current event loop (asyncio or trio) for the ``async with`` body.

    ``port=0`` picks a free port (see :attr:`Server.port`). Leaving the block closes the
    listener and cancels every connection, even ones in the middle of a stall.
    ``record_limit``: the records kept per list (default all; see :class:`Records`).
    ``max_body_bytes``: the largest request body served (a 413 with a JSON error past it).
    ``max_connections``: connections served at once; the next one waits until one ends
    (idle keep-alive connections are closed to make room; see :mod:`.slots`).
    """
    server = Server(
        host=host,
        port=port,
        profile=profile,
        api_key=api_key,
        faults=faults,
        idle_timeout=idle_timeout,
        record_limit=record_limit,
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
    )
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    server.port = listener.extra(anyio.abc.SocketAttribute.local_port)
    # An exception from the ``async with`` body is re-raised after the task group has closed,
    # so callers (and pytest) see it as is, not wrapped in an ExceptionGroup.
    error: Exception | None = None
    try:
        async with anyio.create_task_group() as tg:
            for one in listener.listeners:
                if isinstance(one, anyio.abc.SocketListener):
                    tg.start_soon(_accept_loop, one, server._handle, tg, server.slots)
                else:  # pragma: no cover - create_tcp_listener makes socket listeners
                    tg.start_soon(one.serve, server._handle, tg)
            try:
                yield server
            except Exception as exc:
                error = exc
            finally:
                tg.cancel_scope.cancel()
    finally:
        await anyio.aclose_forcefully(listener)
    if error is not None:
        raise error
