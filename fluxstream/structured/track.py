"""Typed partial objects driven by a stream's normalized events (sans-IO).

:class:`StructuredTracker` is what an I/O layer feeds with the events it already has
(:mod:`fluxstream._events`): the text deltas of one choice go to an
:class:`~.objects.ObjectBuilder` of the ``response_format`` type, the argument deltas of each
tool call go to a builder of that tool's type (Anthropic's "tool as schema", or typed function
arguments), refusals, finish reasons, restarts and the end are recorded. ``feed`` says which
builder's object changed, so a consumer yields one object per change (or per frame when
coalescing), and :meth:`StructuredTracker.result` states how the structured reply ended.

Nothing here raises for bad input: a builder records it and its ``finish`` raises the
documented :class:`~fluxstream.errors.ParseError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._events import End, Event, Finish, RefusalDelta, Reset, TextDelta, ToolCallDelta
from .._reply import Outcome, unified_stop
from .objects import ObjectBuilder, StructuredResult
from .reply import TRUNCATING_STOPS

__all__ = ["StructuredTracker"]

_CUT_OUTCOMES = (Outcome.TRUNCATED, Outcome.CANCELLED, Outcome.FAILED)


class _Call:
    __slots__ = ("builder", "name", "pending")

    def __init__(self) -> None:
        self.name: str | None = None
        self.builder: ObjectBuilder[Any] | None = None
        self.pending: list[str] = []  # arguments that arrived before the tool's name


class StructuredTracker:
    """Feed normalized events; read typed partial objects of the content and of tool calls.

    ``tp``: the type of the content of choice ``choice`` (``response_format``), or ``None``.
    ``tools``: tool name -> type of its arguments; a single type applies to every call.
    """

    def __init__(
        self,
        tp: Any = None,
        *,
        tools: Mapping[str, Any] | Any = None,
        choice: int = 0,
    ) -> None:
        self.type = tp
        self.choice = choice
        self._tools: Mapping[str, Any] | None
        self._any_tool: Any
        if tools is None or isinstance(tools, Mapping):
            self._tools, self._any_tool = tools, None
        else:
            self._tools, self._any_tool = None, tools
        self._reset()

    def _reset(self) -> None:
        self.content: ObjectBuilder[Any] | None = (
            ObjectBuilder(self.type) if self.type is not None else None
        )
        self._calls: dict[tuple[int, int], _Call] = {}
        self._refusal: list[str] = []
        self._finish: dict[int, tuple[str, str | None]] = {}  # raw reason, unified stop
        self._outcome: Outcome | None = None

    # ------------------------------------------------------------------ feeding

    def feed(self, event: Event) -> ObjectBuilder[Any] | None:
        """Apply one event; the builder whose partial object changed, or ``None``."""
        cls = event.__class__
        if cls is TextDelta:
            assert isinstance(event, TextDelta)
            content = self.content
            if content is None or event.choice != self.choice:
                return None
            before = content.version
            content.feed(event.text)
            return content if content.version != before else None
        if cls is ToolCallDelta:
            assert isinstance(event, ToolCallDelta)
            return self._tool_delta(event)
        if cls is RefusalDelta:
            assert isinstance(event, RefusalDelta)
            if event.choice == self.choice:
                self._refusal.append(event.text)
        elif cls is Finish:
            assert isinstance(event, Finish)
            if event.choice not in self._finish:
                self._finish[event.choice] = (
                    event.reason, event.stop or unified_stop(event.reason))
        elif cls is End:
            assert isinstance(event, End)
            self._outcome = event.outcome
        elif cls is Reset:  # a restarted generation: its text starts over
            self._reset()
        return None

    def _type_of(self, name: str | None) -> Any:
        if self._any_tool is not None:
            return self._any_tool
        if self._tools is None or name is None:
            return None
        return self._tools.get(name)

    def _tool_delta(self, event: ToolCallDelta) -> ObjectBuilder[Any] | None:
        key = (event.choice, event.call)
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Call()
        if event.name is not None and call.name is None:
            call.name = event.name
        builder = call.builder
        if builder is None:
            tp = self._type_of(call.name)
            if tp is None:
                if call.name is None:  # the name may still come: hold the text
                    if event.replace:  # corrected text from its offset on, as in the reply
                        call.pending = ["".join(call.pending)[: event.offset]]
                    if event.arguments:
                        call.pending.append(event.arguments)
                return None
            builder = call.builder = ObjectBuilder(tp)
            if call.pending:
                builder.feed("".join(call.pending))
                call.pending = []
        before = builder.version
        if event.replace:
            # The provider's final arguments disagree with the fragments: start over from the
            # corrected text (the only case where a partial object is rebuilt).
            text = builder.text[: event.offset] + event.arguments
            builder = call.builder = ObjectBuilder(builder.type)
            builder.feed(text)
            return builder
        if event.arguments:
            builder.feed(event.arguments)
        return builder if builder.version != before else None

    def watch(
        self, choice: int, call: int, tp: Any, *, name: str | None = None, arguments: str = ""
    ) -> ObjectBuilder[Any]:
        """Read tool call ``call`` of ``choice`` as ``tp`` from now on, starting from
        ``arguments`` (what arrived before: the call was not typed when it started)."""
        entry = self._calls.get((choice, call))
        if entry is None:
            entry = self._calls[(choice, call)] = _Call()
        entry.name = entry.name or name
        entry.pending = []
        builder = entry.builder = ObjectBuilder(tp)
        builder.feed(arguments)
        return builder

    # ------------------------------------------------------------------ reading

    def call(self, choice: int, call: int) -> ObjectBuilder[Any] | None:
        """The builder of a tool call's typed arguments (``None``: unknown call or no type)."""
        entry = self._calls.get((choice, call))
        return None if entry is None else entry.builder

    def _cut(self, choice: int) -> tuple[bool, str | None]:
        raw, stop = self._finish.get(choice, (None, None))
        if stop in TRUNCATING_STOPS:
            return True, raw
        if self._outcome in _CUT_OUTCOMES:
            assert self._outcome is not None
            return True, self._outcome.value
        if self._outcome is None:  # asked before the end: whatever arrived is partial
            return True, "streaming"
        return False, None

    def result(self) -> StructuredResult[Any]:
        """How the content ended (see :meth:`ObjectBuilder.finish`).

        :raises ParseError: the content is not valid for the type.
        :raises LookupError: no content type was given.
        """
        if self.content is None:
            raise LookupError("no content type: pass tp= to StructuredTracker")
        refusal = "".join(self._refusal) or None
        truncated, reason = self._cut(self.choice)
        return self.content.finish(truncated=truncated, reason=reason, refusal=refusal)

    def call_result(self, choice: int, call: int) -> StructuredResult[Any]:
        """How a tool call's arguments ended.

        :raises ParseError: the arguments are not valid for the tool's type.
        :raises LookupError: no such call, or no type for its tool.
        """
        builder = self.call(choice, call)
        if builder is None:
            raise LookupError(f"no typed tool call {call} in choice {choice}")
        truncated, reason = self._cut(choice)
        return builder.finish(truncated=truncated, reason=reason)
