"""Every exception fluxstream raises, in one place.

All of them derive from :class:`FluxstreamError`, so a service can catch the library's failures
with one ``except`` without also catching its own bugs. The lowest layers (the SSE decoder, the
wire formats, the assembler) import from here, and so do the highest (client, server, CLI): this
module imports only the root of the errors (:mod:`fluxstream._core.base_errors`, below the reply
model, which raises some of them; the reply itself is named for type checking only) and
:mod:`fluxstream._timeouts` (plain values that import nothing, for the
:class:`~fluxstream._timeouts.Deadline` a timeout error carries), and must stay that way. For the
same reason it holds
the two helpers every layer uses to put outside text into a message or a log line
(:func:`show_key`, :func:`one_line`).

Errors that end a stream carry the partial reply (``error.reply``) so that nothing that already
arrived is lost. Error texts never include an API key: the client builds them from the status,
the provider's message and a short excerpt of the body, never from request headers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

# The module, not its names: this module's public names are the errors alone.
from . import _timeouts as timeouts

# Defined at the bottom of the package (the reply model raises them); their home is here.
from ._core.base_errors import ArgumentsError, FluxstreamError, ParseError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Mapping

    from ._core.rate_limits import RateLimits
    from ._reply import Reply

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "ArgumentsError",
    "AuthenticationError",
    "ContentTypeError",
    "EventTooLargeError",
    "FirstTokenTimeoutError",
    "FluxstreamError",
    "FrameDecodeError",
    "IdleTimeoutError",
    "LimitExceededError",
    "MissingAPIKeyError",
    "RequestHeaderError",
    "NotAReplyError",
    "NotFoundError",
    "ParseError",
    "RateLimitError",
    "RelayError",
    "RelayKeyError",
    "RelayLeaseLostError",
    "RelayPositionError",
    "RelayUnavailableError",
    "ResumeMismatchError",
    "ResumeTokenError",
    "StallTimeoutError",
    "StreamError",
    "StreamFailedError",
    "StreamTruncatedError",
]

#: How much of a content key a message shows (enough to tell keys apart in a log).
SHOWN_KEY_CHARS = 60
#: How much of a free text (an error's message, a reason) one log line shows.
SHOWN_TEXT_CHARS = 300


def show_key(key: object) -> str:
    """A content key (or another caller- or token-supplied name) as a log line or a message
    shows it: its ``repr``, so a line break or an escape sequence in it cannot forge a log
    line or drive a terminal, cut so that a 10 KB key is not written whole on every retry.
    Anything but a string shows only its type (its ``repr`` could be huge, or raise)."""
    if not isinstance(key, str):
        return f"<{type(key).__name__}>"
    if len(key) <= SHOWN_KEY_CHARS:
        return repr(key)
    return repr(key[:SHOWN_KEY_CHARS]) + "..."


def one_line(text: str, limit: int = SHOWN_TEXT_CHARS) -> str:
    """``text`` (an error's message, which may quote a server) on one line for a log: control
    and separator characters escaped as ``repr`` escapes them, cut to ``limit`` characters
    (counted after escaping: a text of control characters is four times as long escaped)."""
    shown = text[:limit]
    if not shown.isprintable():
        shown = repr(shown)[1:-1]
    return shown if len(text) <= limit and len(shown) <= limit else shown[:limit] + "..."


# --------------------------------------------------------------------------- sans-IO layers


class EventTooLargeError(FluxstreamError):
    """An SSE event (or one unterminated line) grew past the decoder's ``max_event_bytes``.

    Raised by :meth:`fluxstream.sse.SSEDecoder.feed` instead of buffering without bound. The
    decoder stays failed afterwards: every later ``feed``/``close`` raises the same error.
    """

    def __init__(self, limit: int, size: int) -> None:
        self.limit = limit
        self.size = size
        super().__init__(
            f"SSE event exceeds max_event_bytes={limit} (at least {size} bytes buffered); "
            "raise the limit if this endpoint legitimately sends events this large"
        )


class LimitExceededError(FluxstreamError):
    """Server-controlled input went past one of the :class:`fluxstream._limits.StreamLimits`
    (choices per stream, tool calls per choice, reply size, bytes without an event).

    Raised by the sans-IO layers instead of letting a hostile or broken server grow memory
    without bound; a live stream then ends ``failed`` with the partial reply kept. ``name``
    is the limit's field name in ``StreamLimits``, so the message says what to raise.
    """

    def __init__(self, name: str, limit: int, size: int) -> None:
        self.name = name
        self.limit = limit
        self.size = size
        super().__init__(
            f"stream exceeds {name}={limit} (reached {size}); raise it in StreamLimits "
            "if this endpoint legitimately sends that much"
        )


class FrameDecodeError(FluxstreamError):
    """A data frame's payload is not valid JSON (raised only in strict mode).

    In the default lenient mode such a frame is skipped and counted instead.
    """

    def __init__(self, message: str, data: str) -> None:
        self.data = data
        excerpt = data if len(data) <= 200 else data[:200] + "..."
        super().__init__(f"{message}: {excerpt!r}")


# --------------------------------------------------------------------------- HTTP status


class APIConnectionError(FluxstreamError):
    """The request could not be sent or the connection failed before a response arrived."""


class APITimeoutError(APIConnectionError):
    """Connecting, or waiting for the response head, took longer than the configured timeout.

    ``deadline`` says which one passed: :attr:`~fluxstream._timeouts.Deadline.CONNECT`,
    ``WRITE`` or ``POOL`` (the HTTP library's), ``HEAD`` (the read timeout), or
    ``FIRST_TOKEN`` when ``first_token`` ran out while the head was awaited.
    """

    def __init__(
        self, message: str, *, deadline: timeouts.Deadline = timeouts.Deadline.CONNECT
    ) -> None:
        self.deadline = deadline
        super().__init__(message)


class APIStatusError(FluxstreamError):
    """The endpoint answered with a non-2xx status (checked before any SSE parsing).

    ``message``, ``type`` and ``code`` come from the provider's JSON error body when there is
    one; ``body_excerpt`` holds the start of a non-JSON body (a proxy's HTML error page).
    ``rate_limits`` is what the response's headers said (rate limits per kind, retry advice,
    the request id; the raw headers as ``rate_limits.headers``), parsed when first read.
    """

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        type: str | None = None,
        code: str | None = None,
        param: str | None = None,
        body: Any = None,
        body_excerpt: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
        rate_limits: RateLimits | None = None,
    ) -> None:
        #: Seconds to wait before trying again, from ``Retry-After``/``retry-after-ms``.
        self.retry_after = retry_after
        #: The response's headers, read (``None`` when the error was not made from one).
        self.rate_limits = rate_limits
        self.status_code = status_code
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.body = body
        self.body_excerpt = body_excerpt
        self.request_id = request_id
        super().__init__(f"HTTP {status_code}: {message}")

    @property
    def should_retry(self) -> bool | None:
        """The provider's ``x-should-retry`` (``None``: it did not say): obeyed over the
        status by the retry policy, as the official SDKs do."""
        return None if self.rate_limits is None else self.rate_limits.should_retry

    @property
    def headers(self) -> Mapping[str, str]:
        """The response's headers, names in lower case (empty when not made from one)."""
        return {} if self.rate_limits is None else self.rate_limits.headers


class AuthenticationError(APIStatusError):
    """401 or 403: the key is missing, wrong or not allowed to use this model."""


class NotFoundError(APIStatusError):
    """404: wrong base URL or path, or an unknown model."""


class RateLimitError(APIStatusError):
    """429: too many requests; ``retry_after`` (seconds) is parsed from the headers when given."""


class ContentTypeError(FluxstreamError):
    """A 2xx response that is neither an event stream nor a reply: another content type (an
    HTML page, plain text), no body at all (``204``), or JSON that does not parse.

    ``status_code`` and ``content_type`` say what came (``status_code`` is ``None`` only
    where no response was at hand), ``excerpt`` the start of its body as it came (network
    data: shown escaped and cut in the message; a credential of the request is never in
    it).
    """

    #: How much of the body the message shows.
    SHOWN_CHARS: ClassVar[int] = 200

    def __init__(
        self,
        content_type: str,
        excerpt: str = "",
        *,
        status_code: int | None = None,
        what: str | None = None,
    ) -> None:
        self.content_type = content_type
        self.excerpt = excerpt
        self.status_code = status_code
        shown = excerpt[: self.SHOWN_CHARS]
        detail = f"; body starts {shown!r}" if shown else ""
        if len(excerpt) > len(shown):
            detail += "..."
        if status_code is None:
            message = f"expected text/event-stream or application/json, got {content_type!r}"
        else:
            came = f"{content_type!r}" if content_type else "no content type"
            said = what or f"{came}, not text/event-stream or a JSON reply"
            message = f"HTTP {status_code} answered {said}"
        super().__init__(message + detail)


class NotAReplyError(ContentTypeError):
    """A 2xx JSON body that is not the API's reply object (nor an error object): a catch-all
    route's echo of the request (a base URL missing its API prefix lands on one), a health
    check's answer. Read as a reply it would be a successful empty one; the stream fails.
    The message names the status, the content type, what the API's reply has and the start
    of the body."""


# --------------------------------------------------------------------------- ended streams


class ResumeMismatchError(FluxstreamError):
    """A ``Last-Event-ID`` reconnect did not continue the delivered stream (a new sample,
    renumbered ids, replayed text that differs): it is not spliced; the stream falls back to
    the next resume strategy or ends ``truncated`` with this as its reason."""


class ResumeTokenError(FluxstreamError, ValueError):
    """A resume token that this library cannot continue from: not a mapping, another
    version, or damaged (a part missing or of the wrong shape). Tokens travel through
    databases, browsers and other workers, so this is bad input, never a crash."""


class StreamError(FluxstreamError):
    """A stream ended badly; ``reply`` holds everything that arrived before the end."""

    def __init__(self, message: str, reply: Reply | None = None) -> None:
        self.reply = reply
        super().__init__(message)


class StreamTruncatedError(StreamError):
    """The connection ended before the sentinel and before every choice had a finish reason."""


class StreamFailedError(StreamError):
    """The stream carried an error payload, or failed at the transport or protocol level."""


class IdleTimeoutError(StreamError):
    """No bytes at all arrived for ``idle_timeout`` seconds."""

    #: The deadline that passed (as ``stream.stats.deadline`` says).
    deadline: ClassVar[timeouts.Deadline] = timeouts.Deadline.IDLE


class FirstTokenTimeoutError(StreamError):
    """No content arrived within ``first_token_timeout`` seconds of the request (heartbeats,
    skipped frames and usage chunks are not content; prompt processing may send them)."""

    #: The deadline that passed (as ``stream.stats.deadline`` says).
    deadline: ClassVar[timeouts.Deadline] = timeouts.Deadline.FIRST_TOKEN


class StallTimeoutError(StreamError):
    """Bytes kept arriving (heartbeats, comments) but no content for ``stall_timeout`` seconds."""

    #: The deadline that passed (as ``stream.stats.deadline`` says).
    deadline: ClassVar[timeouts.Deadline] = timeouts.Deadline.STALL


# --------------------------------------------------------------------------- relay


class RelayError(FluxstreamError):
    """A reply log (:mod:`fluxstream.relay`) could not do what was asked."""


class RelayKeyError(RelayError, KeyError):
    """No reply is stored under this content key (never relayed, or expired), or a producer
    asked to record a key that another producer is still relaying."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class RelayPositionError(RelayError, ValueError):
    """A follow position (``after=``, ``Last-Event-ID``) is malformed or past the end of the
    stored reply."""


class RelayUnavailableError(RelayError):
    """The log's backend (Redis) failed or could not be reached; ``__cause__`` says why."""


class RelayLeaseLostError(RelayError):
    """A producer no longer holds the reply's lease (it expired and another worker took the
    reply over): its writes are refused so the stored reply never forks."""


class MissingAPIKeyError(FluxstreamError, ValueError):
    """A client made without an API key, with none in the API's environment variable
    (``variable``: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``...), for a server that is not on
    this machine: refused when the client is made, before anything is sent, as
    openai-python does. A loopback ``base_url``, credentials in the URL or in ``headers=``,
    or ``api_key=""`` (no key on purpose: a gateway that needs none) need no key."""

    def __init__(self, variable: str, where: str, *, option: str = "api_key=") -> None:
        self.variable = variable
        self.where = where
        empty = f'{option}""' if option.endswith("=") else f"{option} ''"
        super().__init__(
            f"no API key for {where}: set {variable} or pass {option} ({empty} sends none,"
            " for a server that needs no key)"
        )


class RequestHeaderError(FluxstreamError, ValueError):
    """A request header no HTTP library can send as given (a non-ASCII value): refused before
    anything is sent, on every transport (the value is never shown: it may be a secret)."""
