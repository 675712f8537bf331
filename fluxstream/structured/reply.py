"""A finished :class:`~fluxstream.reply.Reply` read as structured output.

The reply already says everything needed: the text, a refusal, the finish reason and how the
stream ended. This module turns that into a :class:`~.objects.StructuredResult` or a
:class:`~fluxstream.errors.ParseError`, so that a reply cut by the token limit or by the
network yields its last partial object marked incomplete, never a silent half object.
"""

from __future__ import annotations

from typing import Any

from ..reply import Outcome, Reply, ToolCall, unified_stop
from .objects import ObjectBuilder, StructuredResult

__all__ = ["TRUNCATING_STOPS", "parse_reply", "parse_tool_call"]

#: Unified stop reasons (:data:`fluxstream.reply.StopReason`) that cut the content short.
TRUNCATING_STOPS = frozenset({"length", "content_filter", "error"})
_CUT_OUTCOMES = (Outcome.TRUNCATED, Outcome.CANCELLED, Outcome.FAILED)


def _cut(
    reply: Reply | None, finish_reason: str | None, stop: str | None = None
) -> tuple[bool, str | None]:
    """Whether the content was cut short, and the reason to report (the raw finish reason,
    or how the stream ended). ``stop``: the format's unified stop, when known (Responses
    ``incomplete`` is ``length`` only through ``incomplete_details``)."""
    if (stop or unified_stop(finish_reason)) in TRUNCATING_STOPS:
        return True, finish_reason
    if reply is not None and reply.outcome in _CUT_OUTCOMES:
        assert reply.outcome is not None
        return True, reply.outcome.value
    if reply is not None and reply.outcome is None:  # still streaming: what arrived is partial
        return True, "streaming"
    return False, None


def parse_reply(reply: Reply, tp: Any, *, choice: int = 0) -> StructuredResult[Any]:
    """The structured result of a choice's text (``response_format`` output).

    :raises ParseError: see :meth:`ObjectBuilder.finish`.
    """
    found = next((c for c in reply.choices if c.index == choice), None)
    builder: ObjectBuilder[Any] = ObjectBuilder(tp)
    if found is None:
        return builder.finish(truncated=True, reason="no_choice")
    builder.feed(found.text)
    refusal = found.refusal
    if not refusal and found.stop == "refusal":  # Anthropic: the text is the refusal
        refusal = found.text or "refusal"
    truncated, reason = _cut(reply, found.finish_reason, found.stop)
    return builder.finish(truncated=truncated, reason=reason, refusal=refusal)


def parse_tool_call(
    call: ToolCall, tp: Any, *, reply: Reply | None = None, finish_reason: str | None = None
) -> StructuredResult[Any]:
    """The structured result of a tool call's arguments (Anthropic's "tool as schema", or any
    function call whose parameters are ``tp``). Pass the ``reply`` (or the choice's
    ``finish_reason``) so that a call cut short is reported as partial, not as an error.

    :raises ParseError: see :meth:`ObjectBuilder.finish`.
    """
    builder: ObjectBuilder[Any] = ObjectBuilder(tp)
    builder.feed(call.arguments)
    stop = None
    if finish_reason is None and reply is not None:
        owner = next((c for c in reply.choices if any(t is call for t in c.tool_calls)), None)
        if owner is not None:
            finish_reason, stop = owner.finish_reason, owner.stop
    truncated, reason = _cut(reply, finish_reason, stop)
    return builder.finish(truncated=truncated, reason=reason)
