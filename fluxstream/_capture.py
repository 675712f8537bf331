"""Capture files: a response recorded read by read, and replaying one as the client would.

A capture (``{"format": "fluxstream-capture/1", ...}``) keeps what the client saw: the HTTP
status, the content type and the few headers that change how a response is understood
(``Retry-After``, a request id), every body read with its time, and — when the connection broke
— the error that broke it, after the reads that did arrive. Replaying takes the same path as a
live response: a non-2xx status is the typed error (:func:`~fluxstream._http.status_error`), a
JSON body is one whole reply, an event stream goes through the parser read by read.

Request fields given on the command line (``--body``, ``-p key=value``, ``--max-tokens``) are
parsed here too, so ``chat`` and ``capture`` send exactly the same body.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._http import status_error
from .errors import ContentTypeError
from .parser import StreamParser, replay
from .reply import Reply

__all__ = [
    "CAPTURE_FORMAT",
    "Capture",
    "load_capture",
    "record_response",
    "replay_capture",
    "request_fields",
]

CAPTURE_FORMAT = "fluxstream-capture/1"
#: Response headers a replay needs (never cookies or anything a server could use to identify
#: the caller): the content type decides the parsing, the others go into typed errors.
KEPT_HEADERS = ("content-type", "retry-after", "retry-after-ms", "x-request-id")


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

    @property
    def body(self) -> bytes:
        return b"".join(self.reads)


def load_capture(path: str | Path) -> Capture:
    """Read a capture file, or a plain ``.sse`` body (anything that is not a capture)."""
    raw = Path(path).read_bytes()
    if raw.lstrip()[:1] == b"{":
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict) and record.get("format") == CAPTURE_FORMAT:
            return _from_record(record)
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
    if mime != "text/event-stream":
        raise ContentTypeError(ctype or "(none)", capture.body[:200].decode("utf-8", "replace"))
    reads = capture.reads
    if read_size > 0:
        body = capture.body
        reads = [body[i : i + read_size] for i in range(0, len(body), read_size)]
    return replay(reads, **parser_kwargs)


async def record_response(
    response: Any,
    request_body: Mapping[str, Any],
    *,
    path: str = "chat/completions",
    wire_format: str = "chat_completions",
) -> dict[str, Any]:
    """Read ``response`` (an open, streamed httpx response) to its end into a capture record
    (``path`` and ``wire_format`` say which API answered, so a replay reads it right).

    A transport error while reading ends the recording instead of losing it: every read that
    arrived is kept and the error is recorded after them. The response is always closed.
    """
    reads: list[dict[str, Any]] = []
    error: dict[str, str] | None = None
    start = time.monotonic()
    try:
        async for chunk in response.aiter_bytes():  # decoded if compressed
            reads.append(
                {"t": round(time.monotonic() - start, 6),
                 "b64": base64.b64encode(chunk).decode("ascii")}
            )
    except Exception as exc:  # any HTTP library's transport error: record it, keep the reads
        error = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        with suppress(Exception):  # closing a broken response can fail again; it is closed
            await response.aclose()
    headers = {name: response.headers[name] for name in KEPT_HEADERS if name in response.headers}
    record: dict[str, Any] = {
        "format": CAPTURE_FORMAT,
        "request": {"path": path, "body": dict(request_body)},
        "wire_format": wire_format,
        "status": response.status_code,
        "content_type": response.headers.get("content-type"),
        "headers": headers,
        "reads": reads,
    }
    if error is not None:
        record["error"] = error
    return record


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
