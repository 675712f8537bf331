"""The parts of a Responses output that text arrived for, as ``(kind, output, part)``
markers (``kind``: ``text``, ``reasoning``, ``summary``, ``refusal``; ``output`` and
``part``: the output position and the part's index, ``None`` when the server did not say).

A part's text can come twice: as deltas and again whole in its ``.done``. Which one was
shown must be remembered so the other is not shown too; and since some servers name an
index in one and leave it out in the other (LiteLLM streams summary deltas without
``summary_index``, then names ``summary_index: 0`` in their ``.done``), a marker with an
index missing matches a marker with any value there. Every lookup is O(1): each marker is
also kept with each index left open.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["MAX_PARTS", "Marker", "MarkerSet"]

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
