"""The arguments of a Gemini function call that Vertex streams as ``partialArgs`` pieces
(``streamFunctionCallArguments``): the value the pieces build, and its JSON text written as it
grows, so partial arguments show while they arrive (see :mod:`fluxstream.formats.gemini`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._base import compact
from ._choice_state import fold

__all__ = ["NO_VALUE", "PartialArgs", "parse_path", "piece_value", "pieces_state",
           "restored_pieces"]

#: One step of a ``jsonPath``: ``.name``, ``[3]`` or ``['name']`` / ``["name"]``.
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d{1,9})\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def _escaped(text: str) -> str:
    """``text`` as it reads inside a JSON string."""
    if '"' not in text and "\\" not in text and text.isprintable():
        return text
    return compact(text)[1:-1]


def parse_path(path: object) -> tuple[str | int, ...] | None:
    """A ``jsonPath`` (``$.a.b[0]``, ``$['k']``) as its steps; ``None`` if it is not one."""
    if not isinstance(path, str) or path[:1] != "$":
        return None
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _STEP.match(path, position)
        if match is None:
            return None
        name, number, single, double = match.groups()
        steps.append(int(number) if number is not None else
                     name if name is not None else single if single is not None else double)
        position = match.end()
    return tuple(steps) if steps else None


class _Open:
    """A container open in the streamed text: its path, kind and the members written."""

    __slots__ = ("count", "keys", "obj", "path")

    def __init__(self, path: tuple[str | int, ...], obj: bool) -> None:
        self.path = path
        self.obj = obj
        self.count = 0
        self.keys: set[str] = set()


class PartialArgs:
    """The arguments of a call streamed as ``partialArgs`` pieces: the value they build, and
    its JSON text written as it grows.

    While pieces come in document order (each new key after the ones before it, a string
    extended while it is the last value), the text only grows: each piece appends a fragment,
    so the arguments stream like any other. A piece out of that order (an earlier key set
    again) stops the text there; when the call closes, the whole value's JSON replaces what
    was streamed from where they differ (a ``replace`` delta)."""

    __slots__ = ("continuing", "fold_at", "ordered", "paths", "root", "run", "stack",
                 "string", "written")

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}
        self.ordered = True
        #: Open containers of the text, the root first (empty before the first piece).
        self.stack: list[_Open] = []
        #: The path of the string left open at the end of the text.
        self.string: tuple[str | int, ...] | None = None
        #: The path whose last piece said ``willContinue`` (the next one extends it), and the
        #: pieces of that string not yet joined into ``root`` (joined once, when it ends:
        #: extending a string in place on every piece copied it every time, quadratic).
        self.continuing: tuple[str | int, ...] | None = None
        self.run: list[str] = []
        #: The text written so far (folded as it grows, see :func:`~._choice_state.fold`).
        self.written: list[str] = []
        self.fold_at = 256
        #: ``jsonPath`` strings already parsed (the same few paths come again and again).
        self.paths: dict[str, tuple[str | int, ...] | None] = {}

    def steps(self, path: object) -> tuple[str | int, ...] | None:
        """:func:`parse_path`, remembering the last few paths."""
        if path.__class__ is not str:
            return None
        known = self.paths.get(path)
        if known is None:
            known = parse_path(path)
            if len(self.paths) < 64:
                self.paths[path] = known
        return known

    def put(self, steps: tuple[str | int, ...], value: Any, extend: bool, more: bool) -> str | None:
        """Apply one piece (``extend``: a ``stringValue``; ``more``: its ``willContinue``);
        the text to append (``""`` when out of order), or ``None`` if the path does not fit
        the value built so far (the piece is then not used)."""
        if extend and steps == self.continuing:  # the string being streamed goes on
            self.run.append(value)
            if not more:
                self.settle()
                self.continuing = None
                self.run = []
            if not self.ordered or self.string != steps:
                return ""
            text = _escaped(value)
            if not more:
                self.string = None
                text += '"'
            self._write(text)
            return text
        if self.continuing is not None:
            self.settle()
            self.continuing = None
            self.run = []
        if not self._set(steps, value):
            return None
        if extend and more:
            self.continuing = steps
            self.run = [value]
        if not self.ordered:
            return ""
        written = self._text(steps, value, extend, more)
        if written is None:
            self.ordered = False
            return ""
        self._write(written)
        return written

    def extend(self, path: str, value: str) -> str | None:
        """The text of a piece that extends the string being streamed at ``path`` and says
        ``willContinue``, the usual piece (``None``, nothing done, for any other)."""
        steps = self.paths.get(path)
        if steps is None or steps != self.continuing or steps != self.string or not self.ordered:
            return None
        self.run.append(value)
        text = _escaped(value)
        self._write(text)
        return text

    def settle(self) -> None:
        """Join the pieces of the string being streamed into ``root``."""
        if self.continuing is not None and len(self.run) > 1:
            joined = "".join(self.run)
            self.run = [joined]
            self._set(self.continuing, joined)

    def _write(self, text: str) -> None:
        written = self.written
        written.append(text)
        if len(written) > self.fold_at:
            self.fold_at = fold(written, self.fold_at - 256)

    def _set(self, steps: tuple[str | int, ...], value: Any) -> bool:
        """Set the value at ``steps``, making the containers on the way; ``False`` when a
        step goes through a scalar, is of the wrong kind for its container or skips array
        items."""
        node: Any = self.root
        step: Any
        last = len(steps) - 1
        for depth, step in enumerate(steps):
            if not isinstance(node, (dict, list)) or isinstance(node, dict) != isinstance(
                step, str
            ):
                return False  # a step through a scalar, or of the wrong kind
            if isinstance(node, list) and step > len(node):
                return False
            if depth == last:
                if isinstance(node, list) and step == len(node):
                    node.append(None)
                node[step] = value
                return True
            if isinstance(node, dict):
                child = node.get(step)
            else:
                child = node[step] if step < len(node) else None
            if child is None:
                child = {} if isinstance(steps[depth + 1], str) else []
                if isinstance(node, list) and step == len(node):
                    node.append(child)
                else:
                    node[step] = child
            node = child
        return False  # pragma: no cover - steps is never empty

    def _text(self, steps: tuple[str | int, ...], value: Any, extend: bool,
              more: bool) -> str | None:
        """The text a piece appends in document order, or ``None`` when it is out of it."""
        out: list[str] = []
        if self.string is not None:
            out.append('"')
            self.string = None
        stack = self.stack
        if not stack:
            stack.append(_Open((), True))
            out.append("{")
        parent = steps[:-1]
        while len(stack) > 1 and stack[-1].path != parent[: len(stack[-1].path)]:
            out.append("}" if stack.pop().obj else "]")
        for depth in range(len(stack[-1].path), len(steps)):
            top = stack[-1]
            step = steps[depth]
            if isinstance(step, str):
                if step in top.keys:
                    return None
                top.keys.add(step)
                head = compact(step) + ":"
            else:
                if step != top.count:
                    return None
                head = ""
            out.append(("," if top.count else "") + head)
            top.count += 1
            if depth + 1 < len(steps):
                obj = isinstance(steps[depth + 1], str)
                out.append("{" if obj else "[")
                stack.append(_Open(steps[: depth + 1], obj))
        text = compact(value)
        if extend and more and isinstance(value, str):
            text = text[:-1]
            self.string = steps
        out.append(text)
        return "".join(out)

    def close(self) -> str:
        """The text that ends the arguments (``""`` once out of order)."""
        if not self.ordered:
            return ""
        out = ['"'] if self.string is not None else []
        self.string = None
        if not self.stack:
            out.append("{}")
        while self.stack:
            out.append("}" if self.stack.pop().obj else "]")
        text = "".join(out)
        self._write(text)
        return text

    def final(self) -> str:
        """The whole value's JSON (what replaces the text when it went out of order)."""
        self.settle()
        return compact(self.root)



# --------------------------------------------------------------------------- pieces



NO_VALUE: Any = object()


def piece_value(piece: object) -> tuple[Any, bool]:
    """A ``partialArgs`` piece's value and whether it extends a string."""
    if piece.__class__ is not dict:
        return NO_VALUE, False
    got: dict[str, Any] = piece
    if "stringValue" in got:
        value = got["stringValue"]
        return (value, True) if isinstance(value, str) else (NO_VALUE, False)
    if "numberValue" in got:
        value = got["numberValue"]
        ok = value.__class__ in (int, float)
        return (value, False) if ok else (NO_VALUE, False)
    if "boolValue" in got:
        value = got["boolValue"]
        return (value, False) if value.__class__ is bool else (NO_VALUE, False)
    if "nullValue" in got:
        return None, False
    return NO_VALUE, False


def pieces_state(writer: PartialArgs) -> dict[str, Any]:
    writer.settle()
    return {
        "root": writer.root,
        "written": "".join(writer.written),
        "ordered": writer.ordered,
        "string": list(writer.string) if writer.string is not None else None,
        "continuing": list(writer.continuing) if writer.continuing is not None else None,
        "stack": [[list(o.path), o.obj, o.count, sorted(o.keys)] for o in writer.stack],
    }


def _steps(value: object) -> tuple[str | int, ...] | None:
    if isinstance(value, list) and all(
        isinstance(step, str) or type(step) is int for step in value
    ):
        return tuple(value)
    return None


def restored_pieces(state: object) -> PartialArgs:
    """:func:`pieces_state` read back; a damaged state gives a writer that streams nothing
    more and replaces the arguments by the value of the pieces still to come at the close."""
    writer = PartialArgs()
    if not isinstance(state, Mapping):
        writer.ordered = False
        return writer
    root, written, stack = state.get("root"), state.get("written"), state.get("stack")
    if not (isinstance(root, dict) and isinstance(written, str) and isinstance(stack, list)):
        writer.ordered = False
        return writer
    writer.root = root
    writer.written = [written] if written else []
    writer.ordered = state.get("ordered") is not False
    writer.string = _steps(state.get("string"))
    writer.continuing = _steps(state.get("continuing"))
    node: Any = root
    for step in writer.continuing or ():
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            node = None
            break
    if isinstance(node, str):
        writer.run = [node]  # the string the next piece extends
    else:
        writer.continuing = None
    for entry in stack:
        if not (isinstance(entry, list) and len(entry) == 4):
            writer.ordered = False
            break
        path, obj, count, keys = entry
        steps = _steps(path)
        if steps is None or type(count) is not int or not isinstance(keys, list):
            writer.ordered = False
            break
        opened = _Open(steps, obj is True)
        opened.count = count
        opened.keys = {k for k in keys if isinstance(k, str)}
        writer.stack.append(opened)
    return writer
