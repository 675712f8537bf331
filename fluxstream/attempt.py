"""One HTTP attempt of a stream: send the request, check status and content type, read, close.

:class:`Attempt` is everything that touches one request/response pair and nothing else; the
loop over attempts (retry, resume, backoff) lives in :class:`~fluxstream.stream.ReplyStream`
and the decision in :class:`~fluxstream.recovery.Recovery`. Keeping one attempt apart means a
new endpoint or transport changes this file only, and the rules of ``cancel()`` (a synchronous
abort of the connection, or a cancel scope where that is impossible) are stated once.

Every failure leaves as a typed :mod:`fluxstream.errors` exception: a raw exception of the HTTP
library never reaches the caller from here.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ._http import HttpErrors, abort_connection, can_abort, status_error
from .errors import APIConnectionError, APITimeoutError, ContentTypeError

__all__ = ["Attempt", "AttemptCancelled", "RequestSpec", "read_limited"]

#: The most of an error body read to describe it (the rest is not worth waiting for).
ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_AFTER_END_BYTES = 64 * 1024
_DRAIN_AFTER_END_SECONDS = 0.25


@dataclass
class RequestSpec:
    """Everything needed to send (and send again) the request behind a stream."""

    path: str
    body: dict[str, Any]
    build: Callable[[str, Mapping[str, Any], Mapping[str, str]], Any]
    http: Any
    errors: HttpErrors
    headers: dict[str, str] = field(default_factory=dict)
    #: The read timeout in force, for error messages.
    read_timeout: float | None = None


class AttemptCancelled(Exception):
    """``stream.cancel()`` interrupted a send or a wait; nothing more is to be sent."""


class Attempt:
    """One request and its response.

    After :meth:`open` the response is usable: either an event stream (:meth:`read` yields its
    bytes, :attr:`body` is the raw iterator for a read-ahead task) or a whole JSON body
    (:attr:`payload`). :meth:`cancel` works from any task and synchronously; :meth:`close`
    is idempotent.
    """

    def __init__(self, spec: RequestSpec) -> None:
        self.spec = spec
        self.response: Any = None
        #: The event stream's bytes (``None`` for a JSON body or before :meth:`open`).
        self.body: AsyncIterator[bytes] | None = None
        #: A whole ``application/json`` reply body, parsed (``is_json`` tells it was one).
        self.payload: Any = None
        self.is_json = False
        #: Reads need a cancel scope: the connection cannot be aborted synchronously (HTTP/2).
        self.scoped_reads = False
        self.cancelled = False
        self._scope: anyio.CancelScope | None = None
        self._closed = False

    # ------------------------------------------------------------------ opening

    async def open(
        self,
        *,
        headers: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
        max_json_bytes: int,
    ) -> None:
        """Send the request and check the response; raises a typed error if unusable.

        :raises AttemptCancelled: :meth:`cancel` came first.
        :raises APITimeoutError, APIConnectionError: no response (retryable).
        :raises APIStatusError: a non-2xx status (retryable by status).
        :raises ContentTypeError: neither an event stream nor JSON.
        """
        spec = self.spec
        errors = spec.errors
        request = spec.build(spec.path, body or spec.body, {**spec.headers, **(headers or {})})
        try:
            response = await self._send(request)
        except errors.timeout as exc:
            raise APITimeoutError(
                f"timed out before the response: {type(exc).__name__}"
            ) from exc
        except errors.request as exc:  # transport errors, and decoding errors at the head
            raise APIConnectionError(f"request failed: {type(exc).__name__}: {exc}") from exc
        self.response = response
        try:
            await self._check(response, max_json_bytes)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close(drain=False)
            raise
        self.scoped_reads = not can_abort(response)
        if self.cancelled:
            abort_connection(response)

    async def _send(self, request: Any) -> Any:
        if self.cancelled:
            raise AttemptCancelled
        response = None
        with anyio.CancelScope() as scope:
            self._scope = scope
            response = await self.spec.http.send(request, stream=True)
        self._scope = None
        if response is None or self.cancelled:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()
            raise AttemptCancelled
        return response

    async def _check(self, response: Any, max_json_bytes: int) -> None:
        """Status, then content type, before any SSE parsing."""
        status: int = response.status_code
        if not 200 <= status < 300:
            body = await read_limited(response, ERROR_BODY_LIMIT, self.spec.errors)
            raise status_error(status, response.headers, body)
        ctype = response.headers.get("content-type", "")
        mime = ctype.partition(";")[0].strip().lower()
        if mime == "text/event-stream":
            self.body = response.aiter_bytes().__aiter__()
            return
        if mime == "application/json" or mime.endswith("+json"):
            body = await read_limited(response, max_json_bytes, self.spec.errors)
            try:
                self.payload = json.loads(body)
            except ValueError as exc:
                raise ContentTypeError(ctype, body[:200].decode("utf-8", "replace")) from exc
            self.is_json = True
            return
        body = await read_limited(response, 512, self.spec.errors)
        raise ContentTypeError(ctype or "(none)", body[:200].decode("utf-8", "replace"))

    # ------------------------------------------------------------------ reading

    async def read(self) -> bytes:
        """The next read of the event stream; ``StopAsyncIteration`` at its end (or when
        :meth:`cancel` interrupted a scoped read). HTTP library errors pass unchanged: the
        stream tells a drop (resumable) from a timeout."""
        assert self.body is not None
        if not self.scoped_reads:
            return await self.body.__anext__()
        with anyio.CancelScope() as self._scope:
            return await self.body.__anext__()
        raise StopAsyncIteration  # cancelled by cancel(): the stream ends as cancelled

    # ------------------------------------------------------------------ ending

    def cancel(self) -> None:
        """Interrupt a pending send or read at once, from any task (idempotent)."""
        self.cancelled = True
        if self._scope is not None:
            self._scope.cancel()
        if self.response is not None and not self.scoped_reads:
            abort_connection(self.response)

    async def close(self, *, drain: bool = False) -> None:
        """Close the response (idempotent). ``drain``: the sentinel came and nobody else
        reads the body, so read its end first (briefly) and the connection goes back to the
        pool instead of being torn down."""
        if self._closed or self.response is None:
            return
        self._closed = True
        response = self.response
        source = self.body
        self.body = None
        try:
            if drain and not self.cancelled and source is not None:
                with anyio.move_on_after(_DRAIN_AFTER_END_SECONDS):
                    drained = 0
                    async for chunk in source:
                        drained += len(chunk)
                        if drained > _DRAIN_AFTER_END_BYTES:
                            break
        except Exception:  # the reply is complete; a failing drain changes nothing
            pass
        finally:
            with anyio.CancelScope(shield=True):
                await response.aclose()


async def read_limited(response: Any, limit: int, errors: HttpErrors | None = None) -> bytes:
    """At most ``limit`` bytes of a (non-event-stream) body."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(parts)[:limit]

