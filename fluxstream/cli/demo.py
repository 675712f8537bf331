"""What ``fluxstream demo`` measures to say, on one line, what the stream survived.

The demo's server injects trouble (heartbeats, tiny writes, a dropped connection); the summary
must report what the *client* saw, not what the server was asked to do. Three sources:

* the stream's own counters (:class:`~fluxstream.stream.StreamStats`: heartbeats, resumes,
  attempts);
* the reads the HTTP transport delivered, counted by :class:`ReadCountingTransport` (an httpx
  transport that wraps the response body; the socket and its extensions are untouched, so
  cancelling still aborts the connection at once);
* the resume strategy, from the stream's log line, which the demo tells in the summary instead
  of printing it on stderr (:class:`LogTally`).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import httpx

from .render import visible

__all__ = ["LogTally", "ReadCountingTransport", "survived"]

_RESUMED_BY = re.compile(r"resuming by (\w+)")
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
        message = record.getMessage()
        match = _RESUMED_BY.search(message)
        if match:
            self._tally.strategies.append(match.group(1))
        elif record.levelno >= logging.WARNING:  # anything else still reaches the user
            # A warning quotes what a server said: its control characters shown, not run.
            sys.stderr.write(f"fluxstream: {visible(message)}\n")


class LogTally:
    """While active, the ``fluxstream`` logger's resume lines are collected, not printed, and
    its warnings are one line each on stderr (``fluxstream: ...``)."""

    def __init__(self) -> None:
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


def survived(stats: Any, reads: ReadCountingTransport, log: LogTally) -> str:
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
    else:
        parts.append("no dropped connection")
    return ", ".join(parts)
