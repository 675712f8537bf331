"""fluxstream: correct, fast asyncio streaming of LLM replies -- Chat Completions, OpenAI
Responses, Anthropic Messages and Gemini -- through one event model.

Layers, each usable alone (lower layers never import higher ones; ``docs/architecture.md``):

* :mod:`fluxstream.sse` - sans-IO ``text/event-stream`` decoder (WHATWG rules, linear time).
* :mod:`fluxstream.formats` - wire formats -> normalized, format-neutral :mod:`~fluxstream.events`.
* :mod:`fluxstream.assembly` - normalized events -> the :class:`~fluxstream.reply.Reply`.
* :mod:`fluxstream.parser` - the three composed: bytes in, events out, reply kept; ``replay()``.
* :mod:`fluxstream.apis` - what differs per provider API (path, credentials, continuation).
* :mod:`fluxstream.client` / :mod:`fluxstream.stream` - the client (aiohttp under asyncio, httpx
  elsewhere), cancellation, timeouts, retries, resumes and failover.
* :mod:`fluxstream.relay` - one reply followed from any worker or browser (memory or Redis log).
* :mod:`fluxstream.server` - an embedded streaming server, one dialect per API, for demos and
  tests.
"""

from typing import TYPE_CHECKING, Any

from .errors import (
    APIConnectionError,
    APIStatusError,
    APITimeoutError,
    ArgumentsError,
    AuthenticationError,
    ContentTypeError,
    EventTooLargeError,
    FirstTokenTimeoutError,
    FluxstreamError,
    FrameDecodeError,
    IdleTimeoutError,
    LimitExceededError,
    MissingAPIKeyError,
    NotAReplyError,
    NotFoundError,
    ParseError,
    RateLimitError,
    RelayError,
    RelayKeyError,
    RelayLeaseLostError,
    RelayPositionError,
    RelayUnavailableError,
    RequestHeaderError,
    ResumeMismatchError,
    ResumeTokenError,
    StallTimeoutError,
    StreamError,
    StreamFailedError,
    StreamTruncatedError,
)
from .events import (
    End,
    ErrorEvent,
    Event,
    Finish,
    Handoff,
    Outcome,
    ReasoningBlock,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    SkippedFrame,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    UsageUpdate,
)
from .limits import StreamLimits
from .observe import StreamInfo, StreamObserver
from .parser import StreamParser, replay
from .reply import Choice, ErrorInfo, Reply, Segment, StopReason, ToolCall, Usage
from .retry import ResumePolicy, RetryPolicy
from .sse import ServerSentEvent, SSEDecoder, aiter_events, iter_events
from .timeouts import Deadline, Timeouts

if TYPE_CHECKING:  # pragma: no cover
    from .client import AsyncClient, Secret
    from .stream import ReplyStream, StreamStats
    from .upstream import Failover, Upstream

# The I/O layer (httpx, anyio) is imported on first use, so `import fluxstream.sse` or
# `fluxstream.replay` alone never loads an HTTP client.
_LAZY = {
    "AsyncClient": "client",
    "Secret": "client",
    "ReplyStream": "stream",
    "StreamStats": "stream",
    "Failover": "upstream",
    "Upstream": "upstream",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fluxstream' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

#: The installed version (``fluxstream --version`` prints the package metadata's).
__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIStatusError",
    "APITimeoutError",
    "ArgumentsError",
    "AsyncClient",
    "AuthenticationError",
    "Choice",
    "ContentTypeError",
    "Deadline",
    "End",
    "ErrorEvent",
    "ErrorInfo",
    "Event",
    "EventTooLargeError",
    "Failover",
    "Finish",
    "FirstTokenTimeoutError",
    "FluxstreamError",
    "FrameDecodeError",
    "Handoff",
    "IdleTimeoutError",
    "LimitExceededError",
    "MissingAPIKeyError",
    "NotAReplyError",
    "NotFoundError",
    "ParseError",
    "Outcome",
    "RateLimitError",
    "RelayError",
    "RelayKeyError",
    "RelayLeaseLostError",
    "RelayPositionError",
    "RelayUnavailableError",
    "RequestHeaderError",
    "ResumeMismatchError",
    "ResumeTokenError",
    "ReasoningBlock",
    "ReasoningDelta",
    "RefusalDelta",
    "Reply",
    "ResumePolicy",
    "RetryPolicy",
    "ReplyStream",
    "Reset",
    "SSEDecoder",
    "Secret",
    "Segment",
    "ServerSentEvent",
    "SkippedFrame",
    "StallTimeoutError",
    "StopReason",
    "StreamError",
    "StreamFailedError",
    "StreamInfo",
    "StreamLimits",
    "StreamObserver",
    "StreamParser",
    "StreamStats",
    "StreamTruncatedError",
    "TextDelta",
    "Timeouts",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "Upstream",
    "Usage",
    "UsageUpdate",
    "__version__",
    "aiter_events",
    "iter_events",
    "replay",
]
