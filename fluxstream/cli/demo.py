"""What ``fluxstream demo`` measures to say, on one line, what the stream survived.

The demo's server injects trouble (heartbeats, tiny writes, a dropped connection); the summary
must report what the *client* saw, not what the server was asked to do. Three sources:

* the stream's own counters (:class:`~fluxstream._stream.StreamStats`: heartbeats, resumes,
  attempts);
* the reads the HTTP transport delivered, counted by :class:`ReadCountingTransport` (an httpx
  transport that wraps the response body; the socket and its extensions are untouched, so
  cancelling still aborts the connection at once);
* the resume strategy, from the stream's log line, which the demo tells in the summary instead
  of printing it on stderr (:class:`LogTally`);
* the handoffs to a fallback, from the events the printer showed.

``demo --handoff`` adds a second embedded server as the first one's fallback (see
:func:`fallback_upstream`): the first drops every connection mid-reply and the reply goes on
on the second, in another API by default.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any

import httpx

from .. import apis
from .._events import Handoff
from .._upstream import Upstream
from ..apis import Api
from ..apis.anthropic_messages import ANTHROPIC_MESSAGES
from ..apis.chat_completions import CHAT_COMPLETIONS
from .render import visible

__all__ = [
    "HANDOFF_DROP",
    "LogTally",
    "ReadCountingTransport",
    "fallback_api",
    "fallback_upstream",
    "resume_note",
    "survived",
]

_RESUMED_BY = re.compile(r"resuming by (\w+)")
#: The stream's log line for a drop it resumes (``_io/reconnect.py``): why, how, how many.
_DROPPED = re.compile(r"dropped \((.*)\); resuming by (\w+) \((\d+)/(\d+)\)$")
#: What the primary server of ``demo --handoff`` does to every request: the connection
#: dropped in mid-answer (its own faults; the request's headers reach the fallback too).
HANDOFF_DROP = "drop-after-events=12"

#: How a read that ends exactly at an event boundary ends (any SSE line-ending style).
_EVENT_ENDS = (b"\n\n", b"\r\r", b"\r\n\r\n")


class _CountedBody(httpx.AsyncByteStream):
    def __init__(self, inner: Any, tally: ReadCountingTransport) -> None:
        self._inner = inner
        self._tally = tally

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            if chunk:
                self._tally.reads += 1
                if not chunk.endswith(_EVENT_ENDS):
                    self._tally.split += 1
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class ReadCountingTransport(httpx.AsyncBaseTransport):
    """httpx's own transport, counting the body reads it hands to the client."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        #: Body reads with bytes, and how many of them ended inside an event.
        self.reads = 0
        self.split = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        response.stream = _CountedBody(response.stream, self)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Handler(logging.Handler):
    def __init__(self, tally: LogTally) -> None:
        super().__init__(logging.INFO)
        self._tally = tally

    def emit(self, record: logging.LogRecord) -> None:
        tally = self._tally
        message = record.getMessage()
        match = _RESUMED_BY.search(message)
        if match:
            tally.strategies.append(match.group(1))
            if tally.notes is not None:
                dropped = _DROPPED.search(message)
                tally.notes(resume_note(*dropped.groups()) if dropped else
                            f"fluxstream: {visible(message)}")
        elif hasattr(record, "handoff_to"):
            pass  # shown by the command from the Handoff event
        elif record.levelno >= logging.WARNING:  # anything else still reaches the user
            # A warning quotes what a server said: its control characters shown, not run.
            line = f"fluxstream: {visible(message)}"
            if tally.notes is not None:
                tally.notes(line)
            else:
                sys.stderr.write(line + "\n")


def resume_note(reason: str, strategy: str, done: str, allowed: str) -> str:
    """The line that tells a reader the connection dropped and the reply is being resumed
    where it broke off (``1/5``: the first of the resumes this upstream allows)."""
    return f"↻ connection dropped ({reason}); resuming by {strategy} ({done}/{allowed})"


class LogTally:
    """While active, the ``fluxstream`` logger's resume lines are collected, and its warnings
    are one line each on stderr (``fluxstream: ...``). With :attr:`notes` set (``chat``: the
    printer's), a resume is said as it happens and every line goes through it, so none lands
    in the middle of the streamed text; without (``demo``), resumes are only counted, for the
    summary."""

    def __init__(self) -> None:
        #: Where each resume and warning is said, a line each (``None``: resumes unsaid).
        self.notes: Callable[[str], None] | None = None
        self.strategies: list[str] = []
        self._logger = logging.getLogger("fluxstream")
        self._handler = _Handler(self)
        self._propagate = self._logger.propagate

    def __enter__(self) -> LogTally:
        self._logger.addHandler(self._handler)
        self._logger.propagate = False
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._logger.removeHandler(self._handler)
        self._logger.propagate = self._propagate


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def fallback_api(primary: Api, chosen: str | None) -> Api:
    """The fallback's API in ``demo --handoff``: ``chosen``, else another than the
    primary's, so that the reply is continued across APIs."""
    if chosen is not None:
        return apis.get(chosen)
    return ANTHROPIC_MESSAGES if primary is CHAT_COMPLETIONS else CHAT_COMPLETIONS


def fallback_upstream(base_url: str, api: Api) -> Upstream:
    """The embedded fallback server of ``demo --handoff`` as an upstream (the request's own
    length cap: the embedded server's answer ends where a real model's would, whatever the
    cap)."""
    return Upstream(base_url, api=api.name, api_key="demo-key")


def survived(
    stats: Any, reads: ReadCountingTransport, log: LogTally, handoffs: Sequence[Handoff] = ()
) -> str:
    """``"32 heartbeats, 206 reads (180 ending mid-event), 1 dropped connection, resumed by
    last_event_id"``: what the client saw, whatever the server was asked to do."""
    parts = [
        _plural(stats.heartbeats, "heartbeat"),
        f"{_plural(reads.reads, 'read')} ({reads.split} ending mid-event)",
    ]
    retries = stats.attempts - 1 - stats.resumes
    if retries > 0:
        parts.append(f"{retries} {'retry' if retries == 1 else 'retries'} before content")
    if stats.resumes:
        how = ", ".join(dict.fromkeys(log.strategies)) or "resume"
        parts.append(f"{_plural(stats.resumes, 'dropped connection')}, resumed by {how}")
    if handoffs:
        where = ", ".join(dict.fromkeys(visible(h.upstream) for h in handoffs))
        parts.append(f"{_plural(len(handoffs), 'handoff')}, continued on {where}")
    if not stats.resumes and not handoffs:
        parts.append("no dropped connection")
    return ", ".join(parts)
