"""Capture files: a response recorded read by read, and replaying one as the client would.

A capture (``{"format": "fluxstream-capture/1", ...}``) keeps what the client saw: the HTTP
status, the content type and the few headers that change how a response is understood
(``Retry-After``, a request id), every body read with its time, and — when the connection broke
— the error that broke it, after the reads that did arrive (a Ctrl-C is recorded the same
way, marked ``"interrupted": true``). Replaying takes the same path as a
live response: a non-2xx status is the typed error
(:func:`~fluxstream._io.http_library.status_error`), a
JSON body is one whole reply, an event stream goes through the parser read by read.

Request fields given on the command line (``--body``, ``-p key=value``, ``--max-tokens``) are
parsed here too, so ``chat`` and ``capture`` send exactly the same body.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._io.http_library import status_error
from .._parser import StreamParser, replay
from .._reply import Reply
from ..errors import ContentTypeError, FluxstreamError
from ..formats.auto import identify
from ..sse import SSEDecoder

__all__ = [
    "CAPTURE_FORMAT",
    "INTERRUPTED",
    "Capture",
    "FormatCensus",
    "Recording",
    "format_census",
    "load_capture",
    "record_response",
    "replay_capture",
    "request_fields",
]

CAPTURE_FORMAT = "fluxstream-capture/1"
#: The label's name before its version: a file labelled so is a capture, of whatever version.
CAPTURE_FAMILY = CAPTURE_FORMAT.partition("/")[0]
#: Response headers a replay needs (never cookies or anything a server could use to identify
#: the caller): the content type decides the parsing, the others go into typed errors.
KEPT_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-request-id")
#: The recorded error of a capture stopped by Ctrl-C.
INTERRUPTED = {"type": "KeyboardInterrupt", "message": "interrupted (Ctrl-C)"}


@dataclass(frozen=True)
class Capture:
    """A loaded capture; a plain ``.sse`` body is a capture without status (one read)."""

    reads: list[bytes]
    status: int | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: ``{"type": ..., "message": ...}`` when the recorded connection broke.
    error: dict[str, str] | None = None
    #: The wire format the capture was recorded in (``"responses"``...), if it says.
    wire_format: str | None = None
    #: The recording was stopped by Ctrl-C (``error`` says so too).
    interrupted: bool = False

    @property
    def body(self) -> bytes:
        return b"".join(self.reads)

    @property
    def event_stream(self) -> bool:
        """The body is read as an event stream (what the content type says, or a bare body)."""
        mime = (self.content_type or "text/event-stream").partition(";")[0].strip().lower()
        return mime == "text/event-stream"


def load_capture(path: str | Path) -> Capture:
    """Read a capture file, or a plain ``.sse`` body (anything that is not a capture); a
    capture of a version this one cannot read raises ``ValueError`` naming it."""
    raw = Path(path).read_bytes()
    if raw.lstrip()[:1] == b"{":
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            record = None
        label = record.get("format") if isinstance(record, dict) else None
        if label == CAPTURE_FORMAT:
            return _from_record(record)
        if isinstance(label, str) and label.partition("/")[0] == CAPTURE_FAMILY:
            # A capture of another version: read as a body it would be 0 events, `truncated`.
            raise ValueError(
                f"{path}: cannot read a capture labelled {label!r} (this version reads"
                f" {CAPTURE_FORMAT})"
            )
    return Capture(reads=[raw])


def _from_record(record: Mapping[str, Any]) -> Capture:
    try:
        reads = [base64.b64decode(r["b64"], validate=True) for r in record["reads"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a valid {CAPTURE_FORMAT} file: bad reads ({exc})") from None
    status = record.get("status")
    ctype = record.get("content_type")
    headers = record.get("headers")
    error = record.get("error")
    wire_format = record.get("wire_format")
    headers = {str(k).lower(): str(v) for k, v in headers.items()} if isinstance(
        headers, dict
    ) else {}
    if isinstance(ctype, str):
        headers.setdefault("content-type", ctype)
    return Capture(
        reads=reads,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        content_type=ctype if isinstance(ctype, str) else None,
        headers=headers,
        error={str(k): str(v) for k, v in error.items()} if isinstance(error, dict) else None,
        wire_format=wire_format if isinstance(wire_format, str) else None,
        interrupted=record.get("interrupted") is True,
    )


def replay_capture(capture: Capture, *, read_size: int = 0, **parser_kwargs: Any) -> Reply:
    """The reply the recorded response gives, exactly as a live client gets it.

    Raises the typed error of a non-2xx status (``RateLimitError``, ``APIStatusError``, ...),
    or :class:`~fluxstream.errors.ContentTypeError` for a 2xx body that is neither an event
    stream nor JSON. ``read_size`` re-splits an event stream into reads of that many bytes.
    """
    status = capture.status
    if status is not None and not 200 <= status < 300:
        raise status_error(status, capture.headers, capture.body)
    ctype = capture.content_type
    mime = (ctype or "text/event-stream").partition(";")[0].strip().lower()
    if mime == "application/json" or mime.endswith("+json"):
        try:
            payload = json.loads(capture.body)
        except (ValueError, RecursionError) as exc:
            excerpt = capture.body[:200].decode("utf-8", "replace")
            raise ContentTypeError(ctype or mime, excerpt) from exc
        parser = StreamParser(**parser_kwargs)
        parser.feed_completion(payload)
        parser.close()
        return parser.reply
    if not capture.event_stream:
        raise ContentTypeError(ctype or "(none)", capture.body[:200].decode("utf-8", "replace"))
    reads = capture.reads
    if read_size > 0:
        body = capture.body
        reads = [body[i : i + read_size] for i in range(0, len(body), read_size)]
    return replay(reads, **parser_kwargs)


class Recording:
    """A response being recorded: every read so far, ready to be written at any moment.

    ``record_response`` fills it as reads arrive, so whoever stops the recording (a Ctrl-C
    handler) still holds what was read: :meth:`interrupt` marks it, :meth:`record` is the file.
    """

    def __init__(
        self, request_body: Mapping[str, Any], *, path: str = "chat/completions",
        wire_format: str = "chat_completions",
    ) -> None:
        self.request = {"path": path, "body": dict(request_body)}
        self.wire_format = wire_format
        self.reads: list[dict[str, Any]] = []
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.error: dict[str, str] | None = None
        self.interrupted = False
        self._start = time.monotonic()

    def started(self, response: Any) -> None:
        """The response's head arrived (``response``: an httpx response)."""
        self.status = response.status_code
        self.headers = response.headers
        self._start = time.monotonic()

    def add(self, chunk: bytes) -> None:
        self.reads.append({"t": round(time.monotonic() - self._start, 6),
                           "b64": base64.b64encode(chunk).decode("ascii")})

    def interrupt(self) -> None:
        """Stopped by the user: the reads so far are the capture, and it says why it ends."""
        self.interrupted = True
        self.error = dict(INTERRUPTED)

    def record(self) -> dict[str, Any]:
        """The capture file's content (``status`` is ``None`` before the head arrived)."""
        headers = {name: self.headers[name] for name in KEPT_HEADERS if name in self.headers}
        record: dict[str, Any] = {
            "format": CAPTURE_FORMAT,
            "request": self.request,
            "wire_format": self.wire_format,
            "status": self.status,
            "content_type": self.headers.get("content-type"),
            "headers": headers,
            "reads": self.reads,
        }
        if self.error is not None:
            record["error"] = self.error
        if self.interrupted:
            record["interrupted"] = True
        return record


async def record_response(
    response: Any,
    request_body: Mapping[str, Any],
    *,
    path: str = "chat/completions",
    wire_format: str = "chat_completions",
    recording: Recording | None = None,
) -> dict[str, Any]:
    """Read ``response`` (an open, streamed httpx response) to its end into a capture record
    (``path`` and ``wire_format`` say which API answered, so a replay reads it right).

    A transport error while reading ends the recording instead of losing it: every read that
    arrived is kept and the error is recorded after them. The response is always closed.
    ``recording``: where the reads go as they arrive (to keep them when interrupted).
    """
    if recording is None:
        recording = Recording(request_body, path=path, wire_format=wire_format)
    recording.started(response)
    try:
        async for chunk in response.aiter_bytes():  # decoded if compressed
            recording.add(chunk)
    except Exception as exc:  # any HTTP library's transport error: record it, keep the reads
        recording.error = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        with suppress(Exception):  # closing a broken response can fail again; it is closed
            await response.aclose()
    return recording.record()


@dataclass(frozen=True)
class FormatCensus:
    """Which wire format each event of a recorded stream belongs to, by what it announces
    (:func:`fluxstream.formats.auto.identify`): to tell a user who reads a stream in one format
    that its frames are of another."""

    #: Events with data (``[DONE]`` included; comments and empty events are not frames).
    events: int = 0
    #: Events per format they identify (an event that names no format is in none).
    counts: dict[str, int] = field(default_factory=dict)
    #: The format of the first event that names one (what ``format="auto"`` reads it as).
    first: str | None = None

    def other_than(self, fmt: str) -> int:
        """Events that belong to a format other than ``fmt``."""
        return sum(n for name, n in self.counts.items() if name != fmt)

    def fitting(self, fmt: str) -> str | None:
        """The format most frames belong to when it is not ``fmt`` and more than half of
        the frames are its (``None``: ``fmt`` fits, or nothing stands out)."""
        if not self.counts:
            return None
        best, count = max(self.counts.items(), key=lambda item: item[1])
        return best if best != fmt and 2 * count > self.events else None


def format_census(capture: Capture) -> FormatCensus:
    """The :class:`FormatCensus` of a captured event stream (empty for a JSON body)."""
    if not capture.event_stream:
        return FormatCensus()
    decoder = SSEDecoder()
    counts: Counter[str] = Counter()
    events, first = 0, None
    try:
        frames = [*decoder.feed(capture.body), *decoder.close()]
    except FluxstreamError:  # an event over the limits: the replay itself reports it
        frames = []
    for sse in frames:
        data = sse.data.strip()
        if not data:
            continue
        events += 1
        # ``identify`` refuses a frame full of tiny objects undecoded, as the formats do: a
        # hostile capture costs the census no more memory than the replay itself.
        name = identify(sse)
        if name is not None:
            counts[name] += 1
            first = first or name
    return FormatCensus(events, dict(counts), first)


def request_fields(
    body: str | None, params: Sequence[str] | None, max_tokens: int | None
) -> dict[str, Any]:
    """Request fields from ``--body JSON``, then ``-p key=value`` (each wins over ``--body``;
    a value is JSON when it parses as JSON, else the string), then ``--max-tokens``."""
    fields: dict[str, Any] = {}
    if body is not None:
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"--body is not valid JSON ({exc})") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"--body must be a JSON object, got {type(parsed).__name__}")
        fields.update(parsed)
    for item in params or ():
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-p takes key=value, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except (ValueError, RecursionError):
            value = raw
        fields[key.strip()] = value
    if max_tokens is not None:
        if max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1, got {max_tokens}")
        fields["max_tokens"] = max_tokens
    return fields
