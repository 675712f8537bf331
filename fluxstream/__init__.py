"""fluxstream: correct, fast asyncio streaming of LLM replies -- Chat Completions, OpenAI
Responses, Anthropic Messages and Gemini -- through one event model.

The public surface is this package and its subpackages; every module behind them is private
and says so by its name (``_client``, ``_reply``...). Import from here::

    from fluxstream import AsyncClient, Outcome, TextDelta

and from the subpackages for what they are about: :mod:`fluxstream.errors` (every typed
error, also here), :mod:`fluxstream.sse` (the sans-IO ``text/event-stream`` decoder, usable
alone), :mod:`fluxstream.formats` (the wire formats, for replaying captures),
:mod:`fluxstream.apis` (what differs per provider API), :mod:`fluxstream.structured` (typed
partial objects), :mod:`fluxstream.relay` (one reply followed from any worker or browser),
:mod:`fluxstream.server` (the embedded streaming server), :mod:`fluxstream.otel`
(OpenTelemetry) and :mod:`fluxstream.cli`. The layers and why they are so:
``docs/architecture.md``. The module paths of 0.1 that are private now (``reply``,
``endpoints``, ``usage``...) keep importing, with a ``DeprecationWarning``
(:mod:`fluxstream._core.moved_modules`).
"""

from typing import TYPE_CHECKING, Any

from ._core import moved_modules as _moved_modules
from ._core.rate_limits import RateLimit, RateLimits
from ._core.think_tags import ThinkTags
from ._events import (
    End,
    ErrorEvent,
    Event,
    Finish,
    Handoff,
    Outcome,
    PathDelta,
    PathDone,
    PathStart,
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
from ._limits import StreamLimits
from ._observe import SendInfo, SendObserver, StreamInfo, StreamObserver
from ._parser import StreamParser, replay
from ._reply import (
    Choice,
    ErrorInfo,
    Reply,
    Segment,
    SegmentEnd,
    StopReason,
    ToolCall,
    TotalUsage,
    Usage,
    UsageEstimate,
)
from ._retry import ResumePolicy, RetryPolicy
from ._timeouts import Deadline, Timeouts
from ._usage import ModelPrice, UsageLedger
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
from .sse import ServerSentEvent, SSEDecoder, aiter_events, iter_events

if TYPE_CHECKING:  # pragma: no cover
    from ._client import AsyncClient, Secret
    from ._endpoints import anthropic_client
    from ._stream import ReplyStream, StreamStats
    from ._typed_endpoints import Chat, Gemini, Messages, Responses
    from ._upstream import Failover, Upstream

# The I/O layer (httpx, anyio) is imported on first use, so `import fluxstream.sse` or
# `fluxstream.replay` alone never loads an HTTP client.
_LAZY = {
    "AsyncClient": "_client",
    "Secret": "_client",
    "Chat": "_typed_endpoints",
    "Responses": "_typed_endpoints",
    "Messages": "_typed_endpoints",
    "Gemini": "_typed_endpoints",
    "anthropic_client": "_endpoints",
    "ReplyStream": "_stream",
    "StreamStats": "_stream",
    "Failover": "_upstream",
    "Upstream": "_upstream",
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
    "Chat",
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
    "Gemini",
    "Handoff",
    "IdleTimeoutError",
    "LimitExceededError",
    "Messages",
    "MissingAPIKeyError",
    "ModelPrice",
    "NotAReplyError",
    "NotFoundError",
    "Outcome",
    "ParseError",
    "PathDelta",
    "PathDone",
    "PathStart",
    "RateLimit",
    "RateLimitError",
    "RateLimits",
    "ReasoningBlock",
    "ReasoningDelta",
    "RefusalDelta",
    "RelayError",
    "RelayKeyError",
    "RelayLeaseLostError",
    "RelayPositionError",
    "RelayUnavailableError",
    "Reply",
    "ReplyStream",
    "RequestHeaderError",
    "Reset",
    "Responses",
    "ResumeMismatchError",
    "ResumePolicy",
    "ResumeTokenError",
    "RetryPolicy",
    "SSEDecoder",
    "Secret",
    "Segment",
    "SegmentEnd",
    "SendInfo",
    "SendObserver",
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
    "ThinkTags",
    "Timeouts",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "TotalUsage",
    "Upstream",
    "Usage",
    "UsageEstimate",
    "UsageLedger",
    "UsageUpdate",
    "aiter_events",
    "anthropic_client",
    "iter_events",
    "replay",
    "__version__",
]

_moved_modules.install(__all__)
