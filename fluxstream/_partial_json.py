"""Incremental best-effort parsing of a JSON document that is still arriving.

Why not just ``pydantic_core.from_json(prefix, allow_partial=...)`` after every fragment? It
re-parses the whole prefix every time: asking after each of 5,000 fragments of a 544 KB tool
argument parses ~1.4 GB in total (quadratic; see ``benchmarks/README.md``). :class:`PartialJSON`
instead reads each fragment once, keeping

* the stack of open containers (dicts and lists, already holding every completed child),
* the decoded pieces of an open string, and the text of an open number or literal.

Completed values are never touched again, so a snapshot (:meth:`PartialJSON.value`) only
shallow-copies the containers on the open path and joins the open string: the scanning is
linear in the input, and each snapshot costs the size of the open containers plus the open
string, not a re-parse. (No approach can make a snapshot cheaper than the string it returns.)

Semantics follow ``from_json(prefix, allow_partial="trailing-strings")``: an unfinished string
value is included as far as it arrived (an unfinished escape at its end is left out); an
unfinished key, a key without a value, and an unfinished number or literal at the very end
are left out; open containers are closed. After a syntax error the value stays what it was just
before the error (best effort; ``from_json`` would give up entirely).

Snapshots share completed containers with each other and with the parser: treat them as
read-only.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import pydantic_core

__all__ = ["PartialJSON", "parse_partial"]

_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]

# The body of a string up to (not including) its closing quote, or to the end of the text.
# A backslash at the very end (escape split between fragments) is included.
_STRING_BODY = re.compile(r'[^"\\]*(?:\\(?:.|$)[^"\\]*)*', re.DOTALL)
_TOKEN = re.compile(r"[-+0-9.eEa-zIN]*")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
# An escape that is not complete yet at the end of a raw string piece, including a complete
# high surrogate whose low half may still follow.
_TAIL_ESCAPE = re.compile(
    r"(?:\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\(?:u[0-9a-fA-F]{0,3})?)?|\\(?:u[0-9a-fA-F]{0,3})?)$"
)
# NaN and the infinities too: json.loads, pydantic_core.from_json (the fast path) and pydantic's
# model_validate_json all read them, so stepping through must as well.
_LITERALS: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}
# For the fast path: everything up to the next bracket, complete strings included (a
# bracket inside a string does not count). Stops at a bracket, an unclosed string or the end.
_UP_TO_BRACKET = re.compile(r'(?:[^"\[\]{}]+|"[^"\\]*(?:\\.[^"\\]*)*")*', re.DOTALL)
_from_json = pydantic_core.from_json
_BUFFER_MAX = 4096

# Parser states.
_VALUE, _KEY, _COLON, _AFTER, _STRING, _TOKEN_STATE, _END, _ERROR = range(8)
_MISSING: Any = object()


def _decode(raw: str) -> str:
    if "\\" not in raw:
        return raw
    return str(_scanstring(raw + '"', 0, False)[0])


_NONE_OPEN: frozenset[int] = frozenset()


def _container_end(text: str, start: int) -> tuple[int, frozenset[int]]:
    """Index just past the bracket closing the container opened at ``start``, or -1 when it
    does not close within ``text``. One regex step per bracket; strings are skipped whole.

    On -1 also the positions of every bracket opened on the way that does not close within
    ``text`` either (``start`` included): the caller asks about each of them next, and must
    not scan again for them. That keeps ``[[[[...`` (16k unclosed brackets in one fragment
    took 26 s when every one rescanned the rest of the text) linear.
    """
    opened: list[int] = []
    pos = start
    n = len(text)
    skip = _UP_TO_BRACKET.match
    while True:
        m = skip(text, pos)
        assert m is not None
        pos = m.end()
        if pos >= n:
            return -1, frozenset(opened)
        c = text[pos]
        if c == "[" or c == "{":
            opened.append(pos)
        elif c == "]" or c == "}":
            opened.pop()
            if not opened:
                return pos + 1, _NONE_OPEN
        else:  # a string that does not close within the text
            return -1, frozenset(opened)
        pos += 1


def _safe_cut(raw: str) -> int:
    """Length of the longest prefix of ``raw`` that ends outside an escape sequence."""
    if "\\" not in raw[-12:]:
        return len(raw)
    m = _TAIL_ESCAPE.search(raw)
    if m is None:
        return len(raw)
    start = m.start()
    backslashes = 0
    while start - backslashes - 1 >= 0 and raw[start - backslashes - 1] == "\\":
        backslashes += 1
    return len(raw) if backslashes % 2 else start


class PartialJSON:
    """Feed a JSON document in fragments; ask for its best-effort value at any time."""

    __slots__ = (
        "_buffer",
        "_keys",
        "_root",
        "_stack",
        "_state",
        "_str_escape",
        "_str_is_key",
        "_str_parts",
        "_str_tail",
        "_token",
        "_token_more",
        "consumed",
    )

    #: Longest unclosed nested container kept as raw text and re-tried whole (one C-level parse)
    #: instead of stepped through. A subclass sets 0 to step through every container, so that
    #: :meth:`open_containers` always shows the open path (structured output needs that).
    buffer_max: ClassVar[int] = _BUFFER_MAX

    def __init__(self) -> None:
        #: Characters fed so far.
        self.consumed = 0
        self._stack: list[Any] = []  # open containers, outermost first
        self._keys: list[Any] = []  # per open dict: the key of its pending / open child
        self._root: Any = _MISSING
        self._state = _VALUE
        self._str_parts: list[str] = []  # decoded pieces of the open string
        self._str_tail = ""  # raw text of the open string not decoded yet (a split escape)
        self._str_is_key = False
        self._str_escape = False  # the open string's raw text ends in an unpaired backslash
        self._token = ""
        # Pieces of the open token from later fragments, joined once when it ends (a long
        # number in many small fragments grown with += would copy it all every fragment).
        self._token_more: list[str] = []
        # Raw text of a small nested container that has not closed yet: re-tried as a whole
        # (one C-level parse) when more text arrives, instead of stepping through it.
        self._buffer = ""

    # ------------------------------------------------------------------ feeding

    def feed(self, text: str) -> None:
        """Read one more fragment: O(len(text)) plus one step per structural character."""
        self.consumed += len(text)
        # Re-scanning a buffered container costs at most a few fragments' worth per fragment,
        # so buffering keeps the total linear.
        limit = min(self.buffer_max, 8 * len(text))
        if self._buffer:
            text, self._buffer = self._buffer + text, ""
        i, n = 0, len(text)
        state = self._state
        # Positions in ``text`` of brackets known not to close within it (see _container_end).
        unclosed = _NONE_OPEN
        # Containers opened before this position are stepped through: they lie inside one
        # that the C-level parse refused (see below), which would refuse them again.
        stepped = -1
        while i < n:
            if state == _STRING:
                if self._str_escape:  # the previous fragment ended inside an escape
                    self._string_piece(text[i])
                    i += 1
                    if self._state == _ERROR:  # not an escape: a syntax error, as in one piece
                        state = _ERROR
                        break
                    continue
                m = _STRING_BODY.match(text, i)
                assert m is not None
                j = m.end()
                if j < n:  # closing quote
                    state = self._end_string(text[i:j])
                    i = j + 1
                else:
                    self._string_piece(text[i:j])
                    i = j
                continue
            if state == _TOKEN_STATE:
                m = _TOKEN.match(text, i)
                assert m is not None
                j = m.end()
                if j < n:  # the token ends in this fragment
                    if self._token_more:
                        self._join_token()
                    self._token += text[i:j]
                    i = j
                    state = self._end_token()
                else:
                    self._token_more.append(text[i:j])
                    i = j
                continue
            c = text[i]
            if c in " \t\n\r":
                m = _WHITESPACE.match(text, i)
                assert m is not None
                i = m.end()
                continue
            i += 1
            if state == _VALUE:
                if c == '"':
                    state, self._str_is_key = _STRING, False
                elif c == "{" or c == "[":
                    if i - 1 in unclosed or i <= stepped:
                        end = -1
                    else:
                        end, still_open = _container_end(text, i - 1)
                        if end < 0:
                            unclosed = still_open
                    if end > 0:
                        # Fast path: the whole container is in this fragment, so one C-level
                        # parse builds it (most elements of a big array arrive this way).
                        try:
                            value = _from_json(text[i - 1 : end])
                        except (ValueError, TypeError):
                            # Refused: a syntax error, or what json.loads accepts and from_json
                            # does not (a lone surrogate escape; TypeError: a raw lone
                            # surrogate). Stepping through finds the same value (or the same
                            # error position) as any other cut of the text would.
                            stepped = end
                            end = -1
                        else:
                            self._put(value, closed=True)
                            state = self._after_scalar()
                            i = end
                            continue
                    if i <= stepped:
                        self._put({} if c == "{" else [])
                        state = _KEY if c == "{" else _VALUE
                    elif self._stack and n - i < limit:
                        self._buffer = text[i - 1 :]
                        break
                    elif c == "{":
                        self._put({})
                        state = _KEY
                    else:
                        self._put([])
                        state = _VALUE
                elif c in "-0123456789tfnNI":
                    self._token = c
                    state = _TOKEN_STATE
                elif c == "]" and self._stack and type(self._stack[-1]) is list:
                    state = self._close()
                else:
                    state = _ERROR
            elif state == _KEY:
                if c == '"':
                    state, self._str_is_key = _STRING, True
                elif c == "}":
                    state = self._close()
                else:
                    state = _ERROR
            elif state == _COLON:
                state = _VALUE if c == ":" else _ERROR
            elif state == _AFTER:
                top = self._stack[-1]
                if c == ",":
                    state = _VALUE if type(top) is list else _KEY
                elif (c == "]" and type(top) is list) or (c == "}" and type(top) is dict):
                    state = self._close()
                else:
                    state = _ERROR
            else:  # _END (trailing text) or _ERROR: ignore the rest
                state = _ERROR
                break
        if self._state != _ERROR:  # a string piece that failed to decode stopped the parser
            self._state = state

    def _put(self, value: Any, *, closed: bool = False) -> None:
        """Attach a value (scalar, complete container, or a container being opened)."""
        stack = self._stack
        if stack:
            top = stack[-1]
            if type(top) is list:
                top.append(value)
            else:
                top[self._keys[-1]] = value
        else:
            self._root = value
        if not closed and (type(value) is dict or type(value) is list):
            stack.append(value)
            self._keys.append(None)

    def _close(self) -> int:
        self._stack.pop()
        self._keys.pop()
        return _AFTER if self._stack else _END

    def _after_scalar(self) -> int:
        return _AFTER if self._stack else _END

    def _string_piece(self, raw: str) -> None:
        raw = self._str_tail + raw
        end = len(raw)
        while end and raw[end - 1] == "\\":
            end -= 1
        self._str_escape = (len(raw) - end) % 2 == 1
        cut = _safe_cut(raw)
        if cut:
            try:
                self._str_parts.append(_decode(raw[:cut]))
            except ValueError:
                self._state = _ERROR
        self._str_tail = raw[cut:]

    def _end_string(self, raw: str) -> int:
        raw = self._str_tail + raw
        self._str_tail = ""
        parts = self._str_parts
        try:
            parts.append(_decode(raw))
        except ValueError:
            return _ERROR
        value = parts[0] if len(parts) == 1 else "".join(parts)
        self._str_parts = []
        if self._str_is_key:
            self._keys[-1] = value
            return _COLON
        self._put(value)
        return self._after_scalar()

    def _join_token(self) -> str:
        more = self._token_more
        if more:
            self._token += "".join(more)
            more.clear()
        return self._token

    def _end_token(self) -> int:
        token, self._token = self._join_token(), ""
        value = self._token_value(token)
        if value is _MISSING:
            return _ERROR
        self._put(value)
        return self._after_scalar()

    @staticmethod
    def _token_value(token: str) -> Any:
        if token in _LITERALS:
            return _LITERALS[token]
        if _NUMBER.fullmatch(token):
            if any(c in token for c in ".eE"):
                return float(token)
            try:
                return int(token)
            except ValueError:  # past sys.get_int_max_str_digits(): json.loads refuses it too
                return _MISSING
        return _MISSING

    # ------------------------------------------------------------------ snapshots

    def value(self) -> Any:
        """The best-effort value so far (``None`` if nothing usable arrived yet)."""
        state = self._state
        tail: Any = _MISSING
        if state == _STRING and not self._str_is_key:
            parts = self._str_parts
            if len(parts) > 1:
                parts[:] = ["".join(parts)]
            tail = parts[0] if parts else ""
        elif state == _TOKEN_STATE:
            tail = self._token_value(self._join_token())
        elif self._buffer:
            try:
                tail = _from_json(self._buffer, allow_partial="trailing-strings")
            except (ValueError, TypeError):  # TypeError: a raw lone surrogate
                tail = _MISSING
        stack = self._stack
        if not stack:
            if self._root is not _MISSING:
                return self._root
            return None if tail is _MISSING else tail
        keys = self._keys
        child: Any = _MISSING
        for depth in range(len(stack) - 1, -1, -1):
            container = stack[depth]
            if type(container) is list:
                copy: Any = container.copy()
                if child is not _MISSING:
                    copy[-1] = child
                elif tail is not _MISSING:
                    copy.append(tail)
            else:
                copy = container.copy()
                if child is not _MISSING:
                    copy[keys[depth]] = child
                elif tail is not _MISSING and state != _KEY and keys[depth] is not None:
                    copy[keys[depth]] = tail
            child = copy
        return child

    # ------------------------------------------------------------------ structure (read-only)
    # For layers that mirror the document as it grows (fluxstream.structured): cheap views of
    # the parser's state, no copies. Treat every returned container as read-only.

    @property
    def failed(self) -> bool:
        """A syntax error (or text after the complete document) stopped the parser."""
        return self._state == _ERROR

    @property
    def complete(self) -> bool:
        """The top-level value is complete (later text, if any, is ignored)."""
        return not self._stack and self._root is not _MISSING

    @property
    def pending_token(self) -> bool:
        """A number or literal is being read: its value is not final yet."""
        return self._state == _TOKEN_STATE

    def open_containers(self) -> tuple[list[Any], list[Any]]:
        """The open containers, outermost first, and per container the key of its pending or
        open child (dicts only). An open container holds every completed child, and its open
        child container (the next entry) as its last element."""
        return self._stack, self._keys

    def open_string(self) -> str | None:
        """The decoded text of the open string value (not a key), or ``None``."""
        if self._state != _STRING or self._str_is_key:
            return None
        parts = self._str_parts
        if len(parts) > 1:
            parts[:] = ["".join(parts)]
        return parts[0] if parts else ""


def parse_partial(text: str) -> Any:
    """Best-effort value of a JSON prefix in one pass (``None`` when nothing usable)."""
    parser = PartialJSON()
    parser.feed(text)
    return parser.value()
