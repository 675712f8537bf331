"""``JsonEventFormat``: what the event-typed formats (Responses, Anthropic Messages) share.

Their frames are one JSON object per SSE event naming its own ``type`` (the ``event:`` line
repeats it, or is missing: some gateways and test harnesses send data-only frames), describing
a single choice. Decoding a frame, the fast path of the usual events
(:meth:`~JsonEventFormat.feed_many`), the offsets of choice 0 and the resume hooks are the
same for both; the vocabulary is each subclass's ``dispatch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import msgspec
import pydantic_core

from .._events import ErrorEvent, Event
from .._limits import DEFAULT_STREAM_LIMITS, StreamLimits
from ..sse import ServerSentEvent
from ._base import MAX_KEPT_CHARS, QUICK_DECODE_ERRORS, FormatBase, quick_candidate
from ._choice_state import CHOICE_SLOTS, ChoiceState
from ._event_makers import tool_delta
from ._surrogates import clean_tree, fallback_loads, fix_surrogates

__all__ = ["JsonEventFormat"]

_loads = pydantic_core.from_json


class JsonEventFormat(FormatBase, ChoiceState):
    """Base of the formats whose frames are typed JSON events describing one choice
    (Responses, Anthropic Messages): decoding a frame, the offsets of choice 0 and the
    resume hooks; the vocabulary is the subclass's :meth:`dispatch`.

    ``heartbeats`` matters here: Anthropic's keep-alive is an in-band ``ping`` *event*, not
    an SSE comment, and it must count as a heartbeat like a ``: ping`` comment does.
    """

    __slots__ = (*CHOICE_SLOTS, "kept", "reconnected", "scan", "started")

    #: Event types whose strings are streamed text fragments: a payload of one of these that
    #: only ``json.loads`` can decode (lone UTF-16 surrogate halves) keeps its halves for
    #: :meth:`join`; any other such payload is cleaned whole (halves -> U+FFFD).
    delta_kinds: frozenset[str] = frozenset()

    def __init__(self, key: str, *, strict: bool = False,
                 limits: StreamLimits = DEFAULT_STREAM_LIMITS) -> None:
        super().__init__(key, strict=strict, limits=limits)
        #: Characters of never-shown data kept so far (see :data:`MAX_KEPT_CHARS`).
        self.kept = 0
        self.started = False
        #: A new connection began (resume or continuation) and no event of it was seen yet.
        self.reconnected = False
        self.clear_choice()
        #: Fragments may hold lone surrogate halves (see :mod:`._surrogates`): set by the first
        #: payload only ``json.loads`` could decode, and by :meth:`feed_chunk`.
        self.scan = False

    # ------------------------------------------------------------------ resume hooks

    def reset(self) -> None:
        super().reset()
        self.reconnected = False
        self.started = False
        self.kept = 0
        self.clear_choice()

    def restore(
        self,
        offsets: dict[str, Any],
        calls: dict[int, dict[int, tuple[Any, Any]]],
        finishes: dict[int, str | None],
    ) -> None:
        """Continue offsets and tool-call identity from a resumed reply (choice 0 only)."""
        counts = offsets.get("0")
        if not counts:
            return
        self.started = True
        self.restore_offsets(counts, calls.get(0, {}))
        self.last_call = None  # which call an unnamed fragment continues is wire state

    def shift_text(self, choice: int, by: int) -> None:
        """Un-count ``by`` code points of text (an echoed overlap that was cut)."""
        if choice == 0:
            self.text -= by

    def new_connection(self) -> None:
        """A new connection continues this reply: offsets and content stay; the format may
        accept the stream's opening events once more."""
        self.reconnected = True

    def restore_held(self, state: object) -> bool:
        taken = super().restore_held(state)
        if taken:
            self.scan = True  # the next fragment must go through join()
        return taken

    # ------------------------------------------------------------------ frames

    def feed(self, sse: ServerSentEvent, *, at_eof: bool = False) -> list[Event]:
        """One SSE event. ``at_eof``: flushed by the end of the bytes, so a payload that does
        not parse was cut by the connection and is dropped silently."""
        if self.done:
            return []
        data = sse.data
        if self.refuses_undecoded(data):
            return self.bad_frame(data, self.crowded_reason, at_eof)
        if data[:1] != "{":
            stripped = data.strip()
            if stripped == "[DONE]":
                # Never sent by these APIs, but test harnesses and proxies append it.
                self.done = True
                self.done_reason = "sentinel"
                out: list[Event] = []
                self.flush(out)
                return out
            if not stripped:
                return []  # an empty data frame: a keep-alive
        raw = False
        try:
            obj = _loads(data)
        except ValueError as exc:
            obj = fallback_loads(data)  # lone surrogate halves: json.loads keeps them
            if obj is None:
                if sse.event == "error" and not at_eof:
                    # A proxy's plain-text error ("upstream timed out"): the reply's error,
                    # as in Chat Completions and ``auto``, not a skipped frame that would
                    # make the stream look merely cut.
                    self.start()
                    return [ErrorEvent(fix_surrogates(data), None, None, None, data)]
                return self.bad_frame(data, f"invalid JSON: {exc}", at_eof)
            raw = self.scan = True
        if obj.__class__ is not dict:
            return self.bad_frame(data, "not a JSON object", False)
        event = sse.event
        if event == "error":
            return self.dispatch("error", self._cleaned(obj) if raw else obj)
        kind = obj.get("type")
        if kind.__class__ is not str:
            kind = event
        if raw and kind not in self.delta_kinds:
            obj = self._cleaned(obj)
        return self.dispatch(kind, obj)

    #: The events :meth:`feed_many` maps in line, as one typed decode (``None``: none).
    quick_decoder: ClassVar[msgspec.json.Decoder[Any] | None] = None
    #: ``event:`` names of the frames worth trying it on (``message``: a data-only frame).
    quick_events: ClassVar[frozenset[str]] = frozenset()

    def feed_many(self, sses: list[ServerSentEvent], out: list[Event]) -> None:
        """:meth:`feed` each of ``sses`` in order, appending to ``out`` (so that when one
        raises, ``out`` holds the events of those before it).

        Nearly every event of a stream is the same one or two kinds (a text fragment, an
        argument fragment): a frame named as one of :attr:`quick_events` is decoded by
        :attr:`quick_decoder` straight into a small typed struct (its other fields skipped,
        no dict built) and mapped by :meth:`quick`, the same steps :meth:`dispatch` takes for
        it, without the per-event calls of the general path. Anything the decoder refuses
        (another ``type``, a field of another type, ``NaN``, a lone surrogate escape) and
        anything :meth:`quick` declines goes through :meth:`feed`, which decides as before:
        the events, offsets, state and errors are the same either way. So does every frame
        while surrogate halves are scanned for (``scan``), once the stream is done, and a
        frame that is not a candidate (:func:`quick_candidate`: not an object, too big, or
        able to nest deeper than ``from_json`` allows).

        Held equal to the general path (no quick decoder) by
        ``tests/formats/test_json_event_feed_many.py::test_responses_fast_path_equals_the_general_path``
        and ``::test_anthropic_fast_path_equals_the_general_path`` (frames built around the
        fast path's edges) and, on every recorded stream, with ``feed`` one event at a time
        too, by ``tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path``;
        that it is taken, by ``test_fast_paths.py::test_the_fast_paths_are_taken``."""
        decode = self.quick_decoder
        if decode is None:
            super().feed_many(sses, out)
            return
        names = self.quick_events
        loads = decode.decode
        quick = self.quick
        for sse in sses:
            if (
                self.scan
                or self.done
                or sse.event not in names
                or not quick_candidate(data := sse.data)
            ):
                out += self.feed(sse)
                continue
            try:
                obj = loads(data)
            except QUICK_DECODE_ERRORS:
                out += self.feed(sse)  # from_json and the fallback decide (skip, strict...)
                continue
            if not quick(obj, out):
                out += self.feed(sse)

    def quick(self, obj: Any, out: list[Event]) -> bool:  # pragma: no cover
        """Map a struct :attr:`quick_decoder` gave, appending to ``out``; ``False``, with
        nothing changed, when the general path must decide."""
        return False

    def feed_chunk(self, obj: Mapping[str, Any]) -> list[Event]:
        """One event another SDK already decoded (a dict with its ``type``; its strings may
        hold lone surrogate halves, as ``json.loads`` keeps them)."""
        if self.done:
            return []
        self.scan = True
        kind = obj.get("type")
        kind = kind if isinstance(kind, str) else ""
        if kind not in self.delta_kinds:
            obj = self._cleaned(obj)
        return self.dispatch(kind, obj)

    @staticmethod
    def _cleaned(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        cleaned = clean_tree(obj)
        return cleaned if isinstance(cleaned, Mapping) else obj

    def dispatch(self, kind: str, obj: Mapping[str, Any]) -> list[Event]:  # pragma: no cover
        """One typed event (``kind`` is its ``type``): the format's own vocabulary."""
        raise NotImplementedError

    def feed_completion(self, obj: Mapping[str, Any]) -> list[Event]:  # pragma: no cover
        """A whole non-streaming body (the format's own shape)."""
        raise NotImplementedError

    def keep(self, size: int) -> bool:
        """Account for ``size`` characters of never-shown data; ``False`` (keep nothing) once
        :data:`MAX_KEPT_CHARS` would be passed."""
        if self.kept + size > MAX_KEPT_CHARS:
            return False
        self.kept += size
        return True

    # ------------------------------------------------------------------ channels

    def start(self) -> None:
        """Choice 0 exists from now on (even if no content ever arrives)."""
        if not self.started:
            self.started = True
            self.new_choices.append(0)

    def flush(self, out: list[Event]) -> None:
        """The choice ends: a half still held is delivered as U+FFFD."""
        if self.held:
            self.start()
            self.flush_held(self.key, 0, out)

    def add_to(self, channel: str, text: str, out: list[Event]) -> None:
        """``text`` on the named channel (``"text"``, ``"reasoning"``, ``"refusal"``),
        joined with held halves first when scanning."""
        if self.scan:
            text = self.join(channel, text)
            if not text:
                return
        if not self.started:
            self.start()
        self.deliver(channel, self.key, 0, text, out)

    def add_tool_text(self, index: int, text: str, out: list[Event]) -> None:
        """An argument fragment of an open call, joined with held halves first when
        scanning."""
        call = self.calls.get(index)
        if call is None or not text:
            return
        if self.scan:
            text = self.join(index, text)
            if not text:
                return
        out.append(tool_delta(self.key, 0, index, None, None, text, call.add(text)))
