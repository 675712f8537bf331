"""The public surface is pinned: each public package's ``__all__`` is exactly the list below.

A name added to or dropped from the public API shows up here as a failing test, so the change
is made on purpose (with docs/interfaces.md regenerated and a CHANGELOG entry), never as a side
effect of moving code. Every listed name must import (the lazy ones included, and through
``from ... import *``), and a public-named object a package holds must be listed: what users
can reach without an underscore is what ``__all__`` says. Submodules and the names a module
imports from ``typing`` or ``__future__`` for its own annotations are not part of it.
"""

from __future__ import annotations
import __future__

import importlib
import typing
from types import ModuleType

import pytest

EXPECTED: dict[str, list[str]] = {
    "fluxstream": [
        "APIConnectionError", "APIStatusError", "APITimeoutError", "ArgumentsError",
        "AsyncClient", "AuthenticationError", "Choice", "ContentTypeError", "Deadline", "End",
        "ErrorEvent",
        "ErrorInfo", "Event", "EventTooLargeError", "Failover", "Finish", "FirstTokenTimeoutError",
        "FluxstreamError", "FrameDecodeError", "Handoff", "IdleTimeoutError", "LimitExceededError",
        "MissingAPIKeyError", "NotAReplyError", "NotFoundError", "Outcome", "ParseError",
        "RateLimitError", "ReasoningBlock",
        "ReasoningDelta", "RefusalDelta", "RelayError", "RelayKeyError", "RelayLeaseLostError",
        "RelayPositionError", "RelayUnavailableError", "Reply", "ReplyStream",
        "RequestHeaderError", "Reset", "ResumeMismatchError", "ResumePolicy", "ResumeTokenError",
        "RetryPolicy", "SSEDecoder", "Secret", "Segment", "ServerSentEvent", "SkippedFrame",
        "StallTimeoutError", "StopReason", "StreamError", "StreamFailedError", "StreamInfo",
        "StreamLimits", "StreamObserver", "StreamParser", "StreamStats", "StreamTruncatedError",
        "TextDelta", "Timeouts", "ToolCall",
        "ToolCallDelta", "ToolCallDone", "Upstream", "Usage", "UsageUpdate", "__version__",
        "aiter_events", "iter_events", "replay",
    ],
    "fluxstream.apis": [
        "CONTINUE_INSTRUCTION", "Api", "ApiFeatureError", "Structured", "UnknownApiError",
        "bearer", "for_token", "get", "names", "registered",
    ],
    "fluxstream.errors": [
        "APIConnectionError", "APIStatusError", "APITimeoutError", "ArgumentsError",
        "AuthenticationError", "ContentTypeError", "EventTooLargeError", "FirstTokenTimeoutError",
        "FluxstreamError", "FrameDecodeError", "IdleTimeoutError", "LimitExceededError",
        "MissingAPIKeyError", "NotAReplyError", "NotFoundError", "ParseError", "RateLimitError",
        "RelayError", "RelayKeyError",
        "RelayLeaseLostError", "RelayPositionError", "RelayUnavailableError",
        "RequestHeaderError", "ResumeMismatchError", "ResumeTokenError", "StallTimeoutError",
        "StreamError", "StreamFailedError", "StreamTruncatedError",
    ],
    "fluxstream.formats": [
        "FORMATS", "AnthropicMessagesFormat", "AutoFormat", "ChatCompletionsFormat",
        "GeminiFormat",
        "ResponsesFormat", "WireFormat", "detect",
    ],
    "fluxstream.relay": [
        "CANCELLED_BY_RELAY", "PRODUCER_LOST", "START", "Entry", "LogState", "MemoryReplyLog",
        "Position", "RecordedStream", "RedisReplyLog", "RelayEvent", "ReplyLog", "coalesce",
        "parse_position", "produce", "to_sse",
    ],
    "fluxstream.server": [
        "ATTEMPT_HEADER", "CONTINUATION_HEADER", "FAULT_HEADER", "FAULT_KEYS", "MODELS",
        "PROFILE_DESCRIPTIONS", "PROFILE_HEADER", "PROFILE_NAMES", "DisconnectRecord",
        "ExpectedChoice", "ExpectedReply", "ExpectedToolCall", "FaultError", "Faults",
        "ProfileError", "Records", "RequestRecord", "ResponseRecord", "Server", "ServerThread",
        "build_faults", "build_script", "continuation_prefix", "expected_reply", "from_messages",
        "from_responses", "parse_fault_spec", "parse_profiles", "run", "run_forever",
        "script_for", "serve", "strip_prefix",
    ],
    "fluxstream.structured": [
        "TRUNCATING_STOPS", "ObjectBuilder", "StructuredResult", "StructuredTracker",
        "anthropic_tool", "json_schema", "parse_reply", "parse_structured", "parse_tool_call",
        "partial_object", "response_format", "schema_name", "strict_json_schema",
        "strip_fences", "text_format",
    ],
}

MODULES = sorted(EXPECTED)
#: The packages whose every public-named object is in ``__all__``. ``fluxstream.errors`` also
#: holds the helpers every layer uses to put outside text into a message (``show_key``,
#: ``one_line`` and their bounds); its ``__all__`` lists the error classes only (the listing
#: in docs/interfaces.md, and tests/client/test_public_errors.py, rely on that).
COMPLETE = [name for name in MODULES if name != "fluxstream.errors"]


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def _annotation_helper(name: str, value: object) -> bool:
    """``value`` is what ``typing`` or ``__future__`` calls ``name`` (``Any``, ``Protocol``,
    ``TYPE_CHECKING``, ``annotations`` ...): imported for the module's own annotations."""
    missing = object()
    return any(getattr(source, name, missing) is value for source in (typing, __future__))


@pytest.mark.parametrize("name", MODULES)
def test_all_is_exactly_the_pinned_list(name: str) -> None:
    names = list(_module(name).__all__)
    assert len(names) == len(set(names)), f"{name}.__all__ names something twice"
    added = sorted(set(names) - set(EXPECTED[name]))
    dropped = sorted(set(EXPECTED[name]) - set(names))
    assert (added, dropped) == ([], []), (
        f"{name}.__all__ changed (added {added}, dropped {dropped}): a change of the public "
        "API; if it is meant, update EXPECTED here, docs/interfaces.md and the CHANGELOG"
    )


@pytest.mark.parametrize("name", MODULES)
def test_every_listed_name_imports(name: str) -> None:
    module = _module(name)
    for public in module.__all__:
        assert getattr(module, public) is not None, f"{name}.{public}"
    star: dict[str, object] = {}
    exec(f"from {name} import *", star)  # the star import users may write
    assert set(module.__all__) <= set(star), sorted(set(module.__all__) - set(star))


@pytest.mark.parametrize("name", COMPLETE)
def test_nothing_public_named_is_left_out(name: str) -> None:
    module = _module(name)
    for public in module.__all__:  # load the lazy names, so they are checked too
        getattr(module, public)
    left_out = sorted(
        attribute for attribute, value in vars(module).items()
        if not attribute.startswith("_")
        and not isinstance(value, ModuleType)
        and not _annotation_helper(attribute, value)
        and attribute not in module.__all__
    )
    assert left_out == [], f"{name} holds public names that __all__ does not list: {left_out}"


def test_the_checks_tell_an_annotation_helper_from_a_public_name() -> None:
    assert _annotation_helper("Any", typing.Any)
    assert _annotation_helper("TYPE_CHECKING", False)
    assert _annotation_helper("annotations", __future__.annotations)
    assert not _annotation_helper("Reply", _module("fluxstream").Reply)
    assert not _annotation_helper("MODELS", False)  # a False constant of one's own is public
