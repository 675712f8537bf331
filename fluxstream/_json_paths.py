"""Path events: where a JSON value begins, grows and completes, while it streams (sans-IO).

A tool call's ``path`` argument is known long before its ``content`` argument ends; an agent
that waits for the whole call waits for the slowest field. :class:`PathTracker` turns the
normalized events of a stream (tool-call argument fragments, and the text of a structured
reply) into :class:`~fluxstream._events.PathStart`, :class:`~fluxstream._events.PathDelta`
and :class:`~fluxstream._events.PathDone`, each placed right after the delta that made it.

Why a subclass of :class:`~fluxstream._partial_json.PartialJSON` and not a second parser: the
incremental parser already knows where it is (its stack of open containers and the key of each
open child), reads each character once and builds every completed value; the hooks it calls
per value (``_put``, ``_close``, ``_string_piece``, ``_end_string``) are the places a value
starts, grows and ends, so overriding them costs the base parser -- and every stream that does
not ask for paths -- nothing. A path is announced only once the parser has read it: a key is a
step only after its closing quote and colon, a number or literal only once it has ended as
one, and nothing is announced after a syntax error, so a malformed fragment never invents one.

Bounds: a path is a tuple built per announced value, so values deeper than :data:`MAX_DEPTH`
are not announced one by one (the value at that depth completes with all of them inside):
the cost of an event stays bounded, and the total stays linear in the bytes. The document
itself is bounded as every reply is (:class:`~fluxstream._limits.StreamLimits`).
"""

from __future__ import annotations

from typing import Any

from ._core.partial_objects import after_fence
from ._events import (
    Event,
    Finish,
    PathDelta,
    PathDone,
    PathStart,
    Reset,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
)
from ._partial_json import _ERROR, PartialJSON

__all__ = ["MAX_DEPTH", "PathTracker"]

#: Deepest path announced: the depth ``pydantic_core.from_json`` (the package's general JSON
#: decoder) reads to, so no value a frame could carry is cut short by it.
MAX_DEPTH = 200

Path = tuple[str | int, ...]


class PathParser(PartialJSON):
    """The incremental parser, announcing each value it reads (see the module docstring).

    Events go to :attr:`out`, which the caller empties after each :meth:`feed`."""

    __slots__ = ("call", "choice", "key", "lead", "max_depth", "out", "paths", "pieces", "sent",
                 "spath")
    # Step through every container as it arrives (a buffered one would be announced late).
    buffer_max = 0

    def __init__(self, key: str, choice: int, call: int | None, max_depth: int = MAX_DEPTH
                 ) -> None:
        super().__init__()
        self.key = key
        self.choice = choice
        self.call = call
        self.max_depth = max_depth
        self.out: list[Event] = []
        #: The paths of the open containers that were announced (the root's first).
        self.paths: list[Path] = []
        #: Code points of the open string announced so far; -1: its start is not announced
        #: yet, -2: it is deeper than announced.
        self.sent = -1
        #: The open string's path, once announced.
        self.spath: Path | None = None
        #: What was fed so far, kept by :class:`PathTracker` to read a call again after a
        #: ``replace``.
        self.pieces: list[str] = []
        #: A structured reply's text before its JSON began (a markdown fence line may open
        #: it, as objects() allows); ``None`` once it began, or for tool arguments.
        self.lead: str | None = None

    def end(self) -> None:
        """The document ended: a number or literal at its very end is complete (nothing
        else says so: ``12`` could go on as ``123``)."""
        if self.pending_token and not self._stack:
            self.feed(" ")

    def _child(self) -> Path | None:
        """The path of the value about to be put (``None``: deeper than announced)."""
        stack = self._stack
        depth = len(stack)
        if depth == 0:
            return ()
        if depth > self.max_depth:
            return None
        top = stack[-1]
        step = len(top) if type(top) is list else self._keys[-1]
        return (*self.paths[-1], step)

    def _put(self, value: Any, *, closed: bool = False) -> None:
        path = self._child()
        kind = value.__class__
        if kind is str:  # a string value ends (its start and pieces are announced)
            spath = self._start_string(path)
            if spath is not None:
                tail = value[self.sent:] if self.sent else value
                if tail:
                    self.out.append(PathDelta(self.key, self.choice, self.call, spath,
                                              self.sent, tail))
                self.out.append(PathDone(self.key, self.choice, self.call, spath, value))
            self.sent = -1
        elif path is None:
            pass
        elif closed or (kind is not dict and kind is not list):
            self._whole(path, value)  # a scalar, or a container read in one piece
        else:  # a container opens
            self.out.append(PathStart(self.key, self.choice, self.call, path,
                                      "object" if kind is dict else "array"))
            self.paths.append(path)
        super()._put(value, closed=closed)

    def _whole(self, path: Path, value: Any) -> None:
        """Announce a complete value and everything in it, in document order."""
        out = self.out
        kind = value.__class__
        if kind is dict or kind is list:
            out.append(PathStart(self.key, self.choice, self.call, path,
                                 "object" if kind is dict else "array"))
            if len(path) < self.max_depth:
                items = value.items() if kind is dict else enumerate(value)
                for step, child in items:
                    self._whole((*path, step), child)
        elif kind is str:
            out.append(PathStart(self.key, self.choice, self.call, path, "string"))
            if value:
                out.append(PathDelta(self.key, self.choice, self.call, path, 0, value))
        else:
            out.append(PathStart(self.key, self.choice, self.call, path, "scalar"))
        out.append(PathDone(self.key, self.choice, self.call, path, value))

    def _close(self) -> int:
        stack = self._stack
        if len(self.paths) == len(stack):  # this container was announced
            self.out.append(PathDone(self.key, self.choice, self.call, self.paths.pop(),
                                     stack[-1]))
        return super()._close()

    def _start_string(self, path: Path | None) -> Path | None:
        """The open string's path, announcing its start on the first call (``None``: it is
        deeper than announced)."""
        if self.sent == -1:
            self.spath = path
            if path is None:
                self.sent = -2
                return None
            self.out.append(PathStart(self.key, self.choice, self.call, path, "string"))
            self.sent = 0
        return self.spath

    def _string_piece(self, raw: str) -> None:
        if self._str_is_key:
            super()._string_piece(raw)
            return
        parts = self._str_parts
        count = len(parts)
        super()._string_piece(raw)
        path = self.spath if self.sent >= 0 else self._start_string(self._child())
        if path is not None and len(parts) > count and parts[-1]:
            piece = parts[-1]
            self.out.append(PathDelta(self.key, self.choice, self.call, path, self.sent,
                                      piece))
            self.sent += len(piece)


class PathTracker:
    """Feed a stream's normalized events; get them back with the path events they make.

    ``content``: the text of every choice is a JSON document too (structured output), its
    events carry ``call=None``. A tool call's arguments are always read. Events not about
    JSON pass through untouched, in order; a :class:`~fluxstream._events.Reset` starts
    every document over. A ``replace`` fragment (the provider's final arguments disagreed
    with the fragments) reads the corrected arguments again from where they changed: the
    paths after that point are announced again, and the later :class:`PathDone` of a path
    is the one that holds.
    """

    __slots__ = ("_calls", "_content", "_max_depth", "content")

    def __init__(self, *, content: bool = False, max_depth: int = MAX_DEPTH) -> None:
        self.content = content
        self._max_depth = max_depth
        self._calls: dict[tuple[int, int], PathParser] = {}
        self._content: dict[int, PathParser] = {}

    def reset(self) -> None:
        """A new generation: every document starts over."""
        self._calls.clear()
        self._content.clear()

    def feed(self, events: list[Event]) -> list[Event]:
        """``events`` with the path events each one makes right after it."""
        out: list[Event] = []
        for event in events:
            out.append(event)
            kind = event.__class__
            if kind is ToolCallDelta:
                assert isinstance(event, ToolCallDelta)
                self._arguments(event, out)
            elif kind is TextDelta:
                if self.content:
                    assert isinstance(event, TextDelta)
                    parser = self._content.get(event.choice)
                    if parser is None:
                        parser = self._content[event.choice] = PathParser(
                            event.key, event.choice, None, self._max_depth)
                        parser.lead = ""
                    text = event.text
                    if parser.lead is not None:  # a fence line may come first
                        parser.lead, text = after_fence(parser.lead + text)
                        if text:
                            parser.lead = None
                    if text:
                        _read(parser, text, out)
            elif kind is ToolCallDone:
                assert isinstance(event, ToolCallDone)
                self._ended(self._calls.get((event.choice, event.call.index)), out)
            elif kind is Finish:
                if self.content:
                    assert isinstance(event, Finish)
                    self._ended(self._content.get(event.choice), out)
            elif kind is Reset:
                self.reset()
        return out

    @staticmethod
    def _ended(parser: PathParser | None, out: list[Event]) -> None:
        if parser is not None and parser.pending_token:
            parser.end()
            out += parser.out
            parser.out.clear()

    def _arguments(self, event: ToolCallDelta, out: list[Event]) -> None:
        at = (event.choice, event.call)
        parser = self._calls.get(at)
        if parser is None:
            parser = self._calls[at] = PathParser(event.key, event.choice, event.call,
                                                  self._max_depth)
        if event.replace:
            kept = "".join(parser.pieces)[: event.offset]
            parser = self._calls[at] = PathParser(event.key, event.choice, event.call,
                                                  self._max_depth)
            parser.feed(kept)  # announced already
            parser.out.clear()
            parser.pieces.append(kept)
        text = event.arguments
        if text:
            parser.pieces.append(text)
            if parser._state != _ERROR:
                parser.feed(text)
                if parser.out:
                    out += parser.out
                    parser.out.clear()


def _read(parser: PathParser, text: str, out: list[Event]) -> None:
    if parser._state == _ERROR:
        return
    parser.feed(text)
    if parser.out:
        out += parser.out
        parser.out.clear()
