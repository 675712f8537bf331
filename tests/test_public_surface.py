"""The public surface is pinned: which modules are public, and each one's ``__all__``.

What users import is ``fluxstream`` and the subpackages :data:`PUBLIC_MODULES` names; every
other module says it is private by its name (a leading underscore), so a new public module is
a decision made here, not a side effect of adding a file. The module paths of 0.1 that are
private now keep importing, with a ``DeprecationWarning`` at the user's line, to the very
objects the package holds.

Each public package's ``__all__`` is exactly the list below.

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
import sys
import typing
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from fluxstream._core.moved_modules import MOVED

EXPECTED: dict[str, list[str]] = {
    "fluxstream": [
        "APIConnectionError", "APIStatusError", "APITimeoutError", "ArgumentsError",
        "AsyncClient", "AuthenticationError", "Chat", "Choice", "ContentTypeError", "Deadline",
        "End", "Gemini", "Messages", "ModelPrice", "Responses", "SegmentEnd", "SendInfo",
        "SendObserver", "TotalUsage", "UsageEstimate", "UsageLedger", "anthropic_client",
        "ErrorEvent",
        "ErrorInfo", "Event", "EventTooLargeError", "Failover", "Finish", "FirstTokenTimeoutError",
        "FluxstreamError", "FrameDecodeError", "Handoff", "IdleTimeoutError", "LimitExceededError",
        "MissingAPIKeyError", "NotAReplyError", "NotFoundError", "Outcome", "ParseError",
        "PathDelta", "PathDone", "PathStart",
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
        "RateLimit", "RateLimits", "ThinkTags",  # response headers read; reasoning in tags
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
    "fluxstream.web": ["SSE", "Encoding", "EventEncoder", "EventIds", "EventStreamResponse"],
    "fluxstream.web.ai_sdk": [
        "DONE", "FINISH_REASONS", "UI_MESSAGE_STREAM_HEADERS", "UIMessageStream",
        "UIMessageStreamEncoder", "chat_messages", "masked_error",
    ],
    "fluxstream.testing": [
        "CASSETTE_FORMAT", "FAULT_KINDS", "REPLY_FIELDS", "Cassette", "CassetteError",
        "ScriptError", "Upstream", "assert_no_secret_logged", "assert_no_text_twice",
        "assert_upstream_closed", "load_cassette",
    ],
    "fluxstream.structured": [
        "TRUNCATING_STOPS", "ObjectBuilder", "PathTracker", "StructuredResult", "StructuredTracker",
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


#: The public modules of the package (besides ``fluxstream`` itself): each is a documented
#: import path. Everything else under ``fluxstream/`` has a private name.
PUBLIC_MODULES = frozenset({
    "errors", "sse", "apis", "formats", "structured", "relay", "server", "otel", "cli",
    "web",
    "testing",
})


def test_every_top_level_module_is_public_by_decision_or_private_by_name() -> None:
    import fluxstream

    package = Path(fluxstream.__file__).parent
    found = {
        path.stem if path.is_file() else path.name
        for path in package.iterdir()
        if (path.suffix == ".py" or (path / "__init__.py").is_file())
        and path.name not in ("__init__.py", "__main__.py")
    }
    public = {name for name in found if not name.startswith("_")}
    assert public == PUBLIC_MODULES, (
        f"public by name but not decided: {sorted(public - PUBLIC_MODULES)}; decided but "
        f"missing: {sorted(PUBLIC_MODULES - public)}"
    )


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_path_of_0_1_imports_with_a_warning_at_the_users_line(old: str) -> None:
    code = f"import {old} as old_module\n"
    namespace: dict[str, object] = {}
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "users_code.py", "exec"), namespace)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert deprecations[0].filename == "users_code.py"
    assert deprecations[0].lineno == 1
    assert old in str(deprecations[0].message)
    private = importlib.import_module(MOVED[old])
    module = namespace["old_module"]
    assert isinstance(module, ModuleType)
    for name in getattr(private, "__all__", ()):  # the very objects, not copies
        assert getattr(module, name) is getattr(private, name), name
    top = importlib.import_module("fluxstream")
    for name in getattr(private, "__all__", ()):
        if name in top.__all__:
            assert getattr(top, name) is getattr(private, name), name
    at_top = [name for name in getattr(private, "__all__", ()) if name in top.__all__]
    if at_top:  # the warning says what to import from fluxstream instead
        assert f"import {at_top[0]}" in str(deprecations[0].message)


def test_the_paths_the_documentation_gave_keep_working() -> None:
    """``from fluxstream.endpoints import anthropic_client`` and the ``usage`` and ``reply``
    names 0.1's README named go on working, as the same objects."""
    import fluxstream

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from fluxstream.endpoints import anthropic_client
        from fluxstream.reply import SegmentEnd
        from fluxstream.usage import ModelPrice
    assert anthropic_client is fluxstream.anthropic_client
    assert SegmentEnd is fluxstream.SegmentEnd
    assert ModelPrice is fluxstream.ModelPrice


def test_no_other_name_is_found_by_the_moved_paths_finder() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fluxstream.no_such_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fluxstream._reply.nothing")
