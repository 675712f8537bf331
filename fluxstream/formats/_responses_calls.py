"""What a Responses output's items become, for
:class:`~fluxstream.formats.responses.ResponsesFormat`: function calls and the reasoning items
kept.

A ``function_call`` item is a tool call at its output position (``output_index``, or the
position its id took, :class:`~fluxstream.formats._responses_items.OutputItems`), its id the
item's ``call_id``. Its arguments are streamed as ``response.function_call_arguments.delta``
fragments and then given whole by ``response.function_call_arguments.done`` or the item's
``response.output_item.done``: the whole value replaces the fragments (delivered as one more
fragment when it extends them, with ``replace=True`` when it disagrees). A ``reasoning`` item
is kept whole as a :class:`~fluxstream._events.ReasoningBlock` (a stateless conversation sends
its ``encrypted_content`` back). Kept apart from the event vocabulary of :mod:`.responses`
because a call's identity and arguments are a state of their own that several events settle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._events import Event, ReasoningBlock, ToolCallDelta
from ._base import approx_size, compact
from ._choice_state import ToolCallState
from ._responses_parts import PartReader
from ._surrogates import fix_surrogates

__all__ = ["CallReader"]


class CallReader(PartReader):
    """The output items of a response that carry something for the reply: function calls
    (announced, their arguments streamed and settled) and reasoning items (kept)."""

    __slots__ = ()

    def _item(self, obj: Mapping[str, Any], out: list[Event], *, done: bool) -> None:
        """``response.output_item.added`` (``done``: ``.done``): a function call announced,
        its arguments settled once the item is done; a reasoning item kept when done."""
        item = obj.get("item")
        if not isinstance(item, Mapping):
            out += self.skip("output item is not an object", obj)
            return
        kind = item.get("type")
        index = self.items.position(obj, item.get("id"), new=not done)
        if kind == "function_call":
            if index is None:
                out += self.skip("function_call item without an output_index or an id", obj)
                return
            call, fresh = self._call(index)
            new_id, new_name = self.name_call(call, item.get("call_id"), item.get("name"))
            args = item.get("arguments")
            if args is not None and args.__class__ is not str:
                args = compact(args)
            if done and args is not None:
                self._final_arguments(index, call, args, out, new_id, new_name, fresh)
            elif fresh or new_id or new_name or args:
                args = args or ""
                out.append(
                    ToolCallDelta(self.key, 0, index, new_id, new_name, args, call.add(args))
                )
        elif kind == "reasoning" and done and index is not None:
            self.start()
            if not self.keep(approx_size(item)):
                out += self.skip("kept reasoning data over the limit", obj)
                return
            out.append(ReasoningBlock(self.key, 0, index, dict(item)))

    def _call(self, index: int) -> tuple[ToolCallState, bool]:
        """The call at output position ``index``, and whether it is new (opened now, within
        ``max_tool_calls``)."""
        call = self.calls.get(index)
        if call is None:
            call = self.open_call(index, self.limits)
            self.start()
            return call, True
        return call, False

    def _arguments_delta(self, obj: Mapping[str, Any], out: list[Event]) -> None:
        text = obj.get("delta")
        index = self.items.call_of(obj, self.last_call) if isinstance(text, str) else None
        if index is None or not isinstance(text, str):
            out += self.skip("function_call_arguments.delta without a string delta and a "
                             "call (output_index, item_id)", obj)
            return
        call, fresh = self._call(index)  # a delta before its item: still this call's text
        if self.scan:
            text = self.join(index, text)
        if not text and not fresh:
            return
        out.append(ToolCallDelta(self.key, 0, index, None, None, text, call.add(text)))

    def _arguments_done(self, obj: Mapping[str, Any], out: list[Event]) -> None:
        args = obj.get("arguments")
        index = self.items.call_of(obj, self.last_call) if args is not None else None
        if index is None:
            out += self.skip("function_call_arguments.done without arguments and a call "
                             "(output_index, item_id)", obj)
            return
        if args.__class__ is not str:
            args = compact(args)
        call, fresh = self._call(index)
        self._final_arguments(index, call, args, out, None, None, fresh)

    def _final_arguments(
        self,
        index: int,
        call: ToolCallState,
        final: str,
        out: list[Event],
        new_id: str | None,
        new_name: str | None,
        fresh: bool = False,
    ) -> None:
        """The provider's final arguments replace the streamed ones (see module docstring).
        ``fresh``: the call is new (never announced): it is announced even when there is
        nothing else to say, so the assembler knows it (and counts it against its limit)."""
        if self.scan:
            if self.held:
                self.held.pop(index, None)  # the final value replaces a held half too
            final = fix_surrogates(final)
        settled = call.settle(final)
        if settled is None:
            if new_id or new_name or fresh:
                out.append(ToolCallDelta(self.key, 0, index, new_id, new_name, "", call.length))
            return
        rest, offset, replace = settled
        out.append(ToolCallDelta(self.key, 0, index, new_id, new_name, rest, offset, replace))
