"""A request body's JSON, decoded within bounds (``fluxstream serve`` is public).

A body is at most ``max_body_bytes`` (:mod:`.connection` drops a larger one unread), but a
few MiB of ``{},`` decode to ~25x their size and a deep one overflows the stack of whatever
walks it: :func:`more_values_than` refuses the first before decoding, :func:`parse_body`
refuses the second. Both answer with a problem the server sends as a 413 or 400.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "MAX_JSON_VALUES", "deeper_than", "more_values_than", "parse_body"]

#: Deepest JSON nesting a request body may have (real requests nest a dozen levels or so).
MAX_JSON_DEPTH = 128
#: Most JSON values a request body may hold. A value costs up to ~100 bytes decoded however
#: short it is on the wire (``{},`` is 3 bytes, its dict 64 and a list slot 8), so this bounds
#: what decoding costs beyond the body's own text to tens of MiB, whatever the body size;
#: real requests hold a few thousand.
MAX_JSON_VALUES = 250_000

#: Bytes of the body looked at at once when counting values outside strings.
_COUNT_WINDOW = 64 * 1024


def more_values_than(body: bytes | bytearray, limit: int) -> bool:
    """Whether ``body`` holds more than ``limit`` JSON values, judged before decoding and at C
    speed: every value after the first in an array or object follows a ``,``, and every array
    or object opens with ``[`` or ``{``, so their count bounds the values. Those characters
    inside strings are text, so when the rough count is over, only the parts outside strings
    are counted: escaped quotes removed, the text between every other ``"`` is outside. It
    goes by windows, so the check itself costs at most one copy of the body (when it has
    backslashes). Where the body is not valid JSON the count may be off from there on; the
    decoder stops at that point too."""

    def count(text: bytes | bytearray) -> int:
        return text.count(b",") + text.count(b"{") + text.count(b"[")

    if count(body) <= limit:
        return False
    text = body
    if b"\\" in text:  # drop escape pairs first, so that every quote left is a delimiter
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    outside = 0
    in_string = False
    for start in range(0, len(text), _COUNT_WINDOW):
        parts = text[start : start + _COUNT_WINDOW].split(b'"')
        outside += count(b"".join(parts[1 if in_string else 0 :: 2]))
        if outside > limit:
            return True
        in_string ^= len(parts) % 2 == 0  # an odd number of quotes in this window
    return False


def parse_body(body: bytes | bytearray) -> tuple[Any, str | None]:
    """The request's JSON (``None`` if it is not JSON: the routes answer 400 for that), and a
    problem to answer 400 with. Nesting is bounded: ``json.loads`` raises ``RecursionError``
    (not ``ValueError``) on a deep body, and a value that loads can still overflow the stack
    of what walks it later (the digest, the renderers), so a value nested deeper than
    :data:`MAX_JSON_DEPTH` is refused."""
    if not body:
        return None, None
    too_deep = f"request body nested deeper than {MAX_JSON_DEPTH} levels"
    try:
        parsed = json.loads(body)
    except RecursionError:
        return None, too_deep
    except ValueError:
        return None, None
    return parsed, (too_deep if deeper_than(parsed, MAX_JSON_DEPTH) else None)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (iterative: no
    recursion on the value it checks)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        if depth > limit:
            return True
        todo.extend((child, depth + 1) for child in item if isinstance(child, (list, dict)))
    return False
