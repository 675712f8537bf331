"""The structured side of a :class:`~fluxstream._stream.ReplyStream`: typed partial objects.

Small because the work is done by :mod:`fluxstream.structured` (sans-IO); how each API asks
for structured output (Chat ``response_format``, Responses ``text.format``, Anthropic a forced
tool) is the API's own (:meth:`fluxstream.apis.Api.structured_request`).

:class:`StructuredView` is what the stream feeds every event it delivers, once it has a type to
track (``response_format=Model``, ``stream.objects(Model)``) or a tool call someone asked about
(``stream.partial_tool_call(event, Model)``). It holds a
:class:`~fluxstream.structured.StructuredTracker` (one pass over the JSON, live partial
objects) and hands out snapshots of them: see :func:`hand_out`.

Why feed from the stream's ``__anext__`` rather than from the ``objects()`` iterator: a
consumer may iterate events and ask for a tool call's partial object, or interleave
``objects()`` with the events; one place that sees every delivered event keeps the tracker
exact whichever way the stream is read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._events import Event, TextDelta, ToolCallDelta
from .._reply import Reply
from ..apis import Structured
from ..structured import ObjectBuilder, StructuredTracker

__all__ = ["Structured", "StructuredView", "hand_out"]


def hand_out(builder: ObjectBuilder[Any], live: bool) -> Any:
    """The builder's object as handed to a consumer: the live object, or a snapshot that
    later text cannot change (:meth:`ObjectBuilder.snapshot`: only the containers still open
    are copied, complete values are shared, so a snapshot per delta stays linear)."""
    return builder.value if live else builder.snapshot()


class StructuredView:
    """Fed every delivered event; typed partial objects of the content (or forced tool) and
    of the tool calls a consumer asked about."""

    def __init__(self) -> None:
        self.structured: Structured | None = None
        self.tracker: StructuredTracker | None = None
        #: The object builder the last fed event changed (read by ``objects()``'s pick).
        self.changed: ObjectBuilder[Any] | None = None
        self._calls: StructuredTracker | None = None
        self._call_types: dict[tuple[int, int], Any] = {}

    def track(self, structured: Structured, reply: Reply | None = None,
              undelivered: list[Event] | None = None) -> None:
        """Start tracking ``structured``. ``reply``: what was already delivered before (a
        resumed stream's partial reply), fed first; ``undelivered`` are events already in
        that reply that are still to be delivered (and fed then)."""
        self.structured = structured
        tools: Mapping[str, Any] | None = None
        if structured.tool is not None:
            tools = {structured.tool: structured.type}
            tracker = StructuredTracker(tools=tools)
        else:
            tracker = StructuredTracker(structured.type)
        if reply is not None:
            for event in _delivered(reply, undelivered or []):
                tracker.feed(event)
        self.tracker = tracker

    def feed(self, event: Event) -> None:
        tracker = self.tracker
        if tracker is not None:
            self.changed = tracker.feed(event)
        if self._calls is not None:
            self._calls.feed(event)

    def take(self) -> ObjectBuilder[Any] | None:
        """The builder the last event changed, once (``None``: nothing to hand out)."""
        changed, self.changed = self.changed, None
        if changed is None or changed.value is None:
            return None
        return changed

    def call(
        self,
        event: ToolCallDelta,
        tp: Any,
        state: Callable[[], tuple[Reply, list[Event]]],
        live: bool,
    ) -> Any:
        """The typed partial arguments of ``event``'s call as far as they were delivered.

        ``state``: the reply and the events it holds that are not delivered yet (asked only
        at the first ask of a call, which catches up from the reply's arguments without the
        undelivered ones; the stream then feeds the call's later events)."""
        key = (event.choice, event.call)
        calls = self._calls
        if calls is None:
            calls = self._calls = StructuredTracker(tools={})
        builder = calls.call(*key)
        if builder is None:
            reply, undelivered = state()
            found = _tool_call(reply, event)
            cut = next((e.offset for e in undelivered if type(e) is ToolCallDelta
                        and e.choice == event.choice and e.call == event.call), None)
            text = "" if found is None else found if cut is None else found[:cut]
            builder = calls.watch(event.choice, event.call, tp, name=event.name, arguments=text)
            self._call_types[key] = tp
        elif self._call_types.get(key) != tp:
            raise ValueError("this tool call is already read as another type")
        return hand_out(builder, live)


def _tool_call(reply: Reply, event: ToolCallDelta) -> str | None:
    """The arguments of ``event``'s call in ``reply`` (``None``: not there)."""
    for choice in reply.choices:
        if choice.index == event.choice:
            for call in choice.tool_calls:
                if call.index == event.call:
                    return call.arguments
    return None


def _delivered(reply: Reply, undelivered: list[Event]) -> list[Event]:
    """Events that rebuild the part of ``reply`` delivered so far (every choice's text and
    tool call arguments), leaving out what the ``undelivered`` events will bring."""
    cut_text: dict[int, int] = {}
    cut_args: dict[tuple[int, int], int] = {}
    for event in undelivered:
        if type(event) is TextDelta:
            cut_text.setdefault(event.choice, event.offset)
        elif type(event) is ToolCallDelta:
            cut_args.setdefault((event.choice, event.call), event.offset)
    out: list[Event] = []
    key = reply.content_key
    for choice in reply.choices:
        text = choice.text[: cut_text.get(choice.index, len(choice.text))]
        if text:
            out.append(TextDelta(key, choice.index, 0, text))
        for call in choice.tool_calls:
            args = call.arguments[: cut_args.get((choice.index, call.index), len(call.arguments))]
            out.append(ToolCallDelta(key, choice.index, call.index, call.id, call.name, args, 0))
    return out
