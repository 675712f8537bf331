"""What the path events of a JSON document must be, worked out from the decoded document
alone (never from the parser under test), and the helpers that compare streams of them."""

from __future__ import annotations

from typing import Any

from fluxstream import PathDelta, PathDone, PathStart
from fluxstream._json_paths import MAX_DEPTH

#: One path event, with how string pieces were split left out: ("start", path, kind),
#: ("delta", path, text of consecutive pieces joined), ("done", path, value).
Item = tuple[str, tuple[Any, ...], Any]


def expected(value: Any, path: tuple[Any, ...] = (), max_depth: int = MAX_DEPTH) -> list[Item]:
    """The events of ``value`` in document order: a value starts, a string grows, a value
    completes after everything inside it; values deeper than ``max_depth`` are not
    announced on their own."""
    out: list[Item] = []
    if isinstance(value, dict):
        out.append(("start", path, "object"))
        if len(path) < max_depth:
            for key, child in value.items():
                out += expected(child, (*path, key), max_depth)
    elif isinstance(value, list):
        out.append(("start", path, "array"))
        if len(path) < max_depth:
            for index, child in enumerate(value):
                out += expected(child, (*path, index), max_depth)
    elif isinstance(value, str):
        out.append(("start", path, "string"))
        if value:
            out.append(("delta", path, value))
    else:
        out.append(("start", path, "scalar"))
    out.append(("done", path, value))
    return out


def normalized(events: list[Any]) -> list[Item]:
    """Path events as :data:`Item` s, consecutive pieces of one string joined; the pieces'
    offsets are checked to be contiguous from 0 on the way."""
    out: list[Item] = []
    next_offset: dict[tuple[Any, ...], int] = {}
    for event in events:
        if isinstance(event, PathStart):
            out.append(("start", event.path, event.kind))
            next_offset[event.path] = 0
        elif isinstance(event, PathDelta):
            assert event.offset == next_offset[event.path], event
            next_offset[event.path] += len(event.text)
            if out and out[-1][0] == "delta" and out[-1][1] == event.path:
                out[-1] = ("delta", event.path, out[-1][2] + event.text)
            else:
                out.append(("delta", event.path, event.text))
        elif isinstance(event, PathDone):
            out.append(("done", event.path, event.value))
    return out


def is_prefix(part: list[Item], full: list[Item]) -> bool:
    """``part`` is what ``full`` starts with, its last string's text possibly cut short."""
    if not part:
        return True
    if len(part) > len(full) or part[:-1] != full[: len(part) - 1]:
        return False
    last, there = part[-1], full[len(part) - 1]
    if last[0] == "delta" and there[0] == "delta" and last[1] == there[1]:
        return str(there[2]).startswith(last[2])
    return last == there


def at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value
