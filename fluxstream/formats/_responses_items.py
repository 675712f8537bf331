"""The bookkeeping of a Responses stream's output: where each item is, and which parts' text
was shown.

Kept apart from :mod:`.responses` (the event vocabulary) because it is a state of its own
with its own rules and its own part of a resume token: servers that send no ``output_index``
(llama.cpp's) name items only by id, so each new id takes the next output position in
arrival order; and a part's text can come twice (deltas, then whole in its ``.done``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._base import MAX_SEQUENCE

__all__ = ["MAX_PARTS", "Marker", "MarkerSet", "OutputItems", "count", "item_texts"]


def count(value: object) -> int | None:
    """An index from the wire: a count (``0 <= value < 2**53``), else ``None``. A negative or
    absurd index names nothing (and a resume token could not carry it: the parser refuses)."""
    return value if value.__class__ is int and 0 <= value < MAX_SEQUENCE else None


# The parts of a Responses output that text arrived for, as ``(kind, output, part)`` markers
# (``kind``: ``text``, ``reasoning``, ``summary``, ``refusal``; ``output`` and ``part``: the
# output position and the part's index, ``None`` when the server did not say). A part's text
# can come twice: as deltas and again whole in its ``.done``; which one was shown must be
# remembered so the other is not shown too. Some servers name an index in one and leave it
# out in the other (LiteLLM streams summary deltas without ``summary_index``, then names
# ``summary_index: 0`` in their ``.done``), so a marker with an index missing matches a
# marker with any value there. Every lookup is O(1): each marker is also kept with each
# index left open.

#: Markers remembered per set. Real responses have a handful; past the cap nothing more is
#: remembered (see :class:`MarkerSet`), so a stream naming a new part in every event cannot
#: grow memory beyond it.
MAX_PARTS = 4096

Marker = tuple[str, int | None, int | None]


class MarkerSet:
    """A bounded set of markers, looked up with a missing index matching any."""

    __slots__ = ("_exact", "_loose")

    def __init__(self) -> None:
        self._exact: set[Marker] = set()
        self._loose: set[tuple[object, ...]] = set()

    def __len__(self) -> int:
        return len(self._exact)

    def __iter__(self) -> Iterator[Marker]:
        return iter(sorted(self._exact, key=repr))

    def full(self) -> bool:
        return len(self._exact) >= MAX_PARTS

    def add(self, marker: Marker) -> None:
        exact = self._exact
        if len(exact) < MAX_PARTS and marker not in exact:
            exact.add(marker)
            kind, output, part = marker
            self._loose.update((("part?", kind, output), ("output?", kind, part), (kind,)))

    def restore(self, entries: object) -> None:
        """Add the markers a resume token lists (entries of another shape left out: a token
        is data from outside)."""
        for marker in entries if isinstance(entries, list) else ():
            if (
                isinstance(marker, list) and len(marker) == 3
                and isinstance(marker[0], str)
                and all(m is None or type(m) is int for m in marker[1:])
            ):
                self.add((marker[0], marker[1], marker[2]))

    def has(self, marker: Marker) -> bool:
        """Exactly ``marker`` is in the set (both indices as given)."""
        return marker in self._exact

    def matches(self, marker: Marker) -> bool:
        """A marker naming the same part is in the set, an index missing on either side
        matching any."""
        kind, output, part = marker
        if output is not None and part is not None:
            exact = self._exact
            return (marker in exact or (kind, None, part) in exact
                    or (kind, output, None) in exact or (kind, None, None) in exact)
        loose = self._loose
        if output is None and part is None:
            return (kind,) in loose
        if part is None:
            return ("part?", kind, output) in loose or ("part?", kind, None) in loose
        return ("output?", kind, part) in loose or ("output?", kind, None) in loose


class OutputItems:
    """The output position of each item, for servers that send no ``output_index``."""

    __slots__ = ("by_id", "next")

    def __init__(self) -> None:
        #: Output position of each item by id (at most :data:`MAX_PARTS`).
        self.by_id: dict[str, int] = {}
        #: The next free output position (one past the highest seen).
        self.next = 0

    def position(self, obj: Mapping[str, Any], item_id: object, *, new: bool) -> int | None:
        """The output position an event's item has: its ``output_index``; without one, the
        position its id (``item.id`` or ``item_id``) was given, or the next free one for a
        new id. An item with neither takes the next free position when ``new`` (an
        ``output_item.added``), else none. An ``output_index`` that is there but is not a
        count names nothing."""
        given = obj.get("output_index")
        index = count(given)
        items = self.by_id
        if given is not None:
            if index is None:
                return None
            if item_id.__class__ is str and len(items) < MAX_PARTS:
                items.setdefault(item_id, index)
            if index >= self.next:
                self.next = index + 1
            return index
        if item_id.__class__ is str and item_id:
            known = items.get(item_id)
            if known is not None:
                return known
            if len(items) >= MAX_PARTS:
                return None
            new = True
        if not new or self.next >= MAX_SEQUENCE:
            return None
        position = self.next
        self.next = position + 1
        if item_id.__class__ is str and item_id:
            items[item_id] = position
        return position

    def call_of(self, obj: Mapping[str, Any], last_call: int | None) -> int | None:
        """The call an argument event is for: by ``output_index`` or ``item_id``; naming
        neither, the call opened last."""
        item_id = obj.get("item_id")
        if obj.get("output_index") is None and not (item_id.__class__ is str and item_id):
            return last_call
        return self.position(obj, item_id, new=False)

    def output_of(self, obj: Mapping[str, Any]) -> int | None:
        """The output position a part event names: its ``output_index``, else the position
        of its ``item_id`` if that item was announced (servers that send no
        ``output_index`` tell two message items' parts apart only by it), else ``None``,
        matching any. An id never announced names no position: a recorded stream names
        another item's id in a ``.done`` than in its deltas."""
        given = obj.get("output_index")
        if given is not None:
            return count(given)
        item_id = obj.get("item_id")
        return self.by_id.get(item_id) if item_id.__class__ is str else None

    def state(self) -> dict[str, Any]:
        """For a resume token."""
        return {"items": [[item, index] for item, index in self.by_id.items()],
                "positions": self.next}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Take over :meth:`state` from a token, leaving out what it does not write."""
        items = state.get("items")
        for entry in items if isinstance(items, list) else ():
            if (
                isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and count(entry[1]) is not None and len(self.by_id) < MAX_PARTS
            ):
                self.by_id[entry[0]] = entry[1]
                self.next = max(self.next, entry[1] + 1)
        positions = count(state.get("positions"))
        if positions is not None:
            self.next = max(self.next, positions)


#: The channel of each kind of message part that holds text (its field is named alike).
_MESSAGE_PARTS: dict[object, str] = {"output_text": "text", "refusal": "refusal"}


def item_texts(item: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The texts of a whole output item, as ``(channel, text)``: a message's ``output_text``
    and ``refusal`` parts, a reasoning item's ``summary`` and ``content`` parts."""
    kind = item.get("type")
    if kind == "message":
        for part in _items(item.get("content")):
            if not isinstance(part, Mapping):
                continue
            channel = _MESSAGE_PARTS.get(part.get("type"))
            text = part.get("refusal" if channel == "refusal" else "text")
            if channel is not None and isinstance(text, str) and text:
                yield channel, text
    elif kind == "reasoning":
        for field in ("summary", "content"):
            for part in _items(item.get(field)):
                text = part.get("text") if isinstance(part, Mapping) else None
                if isinstance(text, str) and text:
                    yield "reasoning", text


def _items(value: object) -> list[Any]:
    """``value`` if it is a list (a body's ``content`` / ``summary``), else nothing: a body
    is data from outside, and iterating a number or a string would crash or read letters."""
    return value if isinstance(value, list) else []
