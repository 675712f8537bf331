"""What a Responses output's content parts and reasoning summaries become, for
:class:`~fluxstream.formats.responses.ResponsesFormat`.

A part's text can come twice: streamed as ``*.delta`` events, then whole in the part's
``*.done`` (and some servers send only the ``.done``). The deltas win; a ``.done`` is shown
only for a part none of whose text was streamed, and a delta that arrives after a ``.done``
that was shown is dropped. Kept apart from the event vocabulary of :mod:`.responses` because
this is the one rule every text channel shares (text, reasoning-text parts, reasoning
summaries, refusals), each part named by a marker of :mod:`._responses_items`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._events import Event
from ._json_event import JsonEventFormat
from ._responses_items import Marker, MarkerSet, OutputItems, count

__all__ = ["PartReader"]


class PartReader(JsonEventFormat):
    """The parts of a response's output: where each item is (:attr:`items`), which parts
    received deltas and whose ``.done`` text was shown, and the part streamed last (the
    text fast path checks that a fragment continues it)."""

    __slots__ = ("_parts", "_shown", "_text_part", "items")

    def _new_parts(self) -> None:
        """Parts and items are a response's own (a continuation is a new response)."""
        #: Parts that received deltas: their ``.done`` text is not shown.
        self._parts = MarkerSet()
        #: Parts whose ``.done`` text was shown: a delta of theirs arriving later is not.
        self._shown = MarkerSet()
        self._text_part: tuple[object, object, object] | None = None
        #: Output positions by item id (servers that send no ``output_index``).
        self.items = OutputItems()

    def _delta(
        self,
        channel: str,
        obj: Mapping[str, Any],
        out: list[Event],
        part: str = "content_index",
        kind: str | None = None,
    ) -> None:
        """A streamed fragment of a part; ``kind`` names the part's kind when it is not the
        channel (summary parts count by ``summary_index``, apart from reasoning-text parts)."""
        text = obj.get("delta")
        if text.__class__ is not str or not text:
            return
        marker = (kind or channel, self.items.output_of(obj), count(obj.get(part)))
        if self._shown.has(marker):
            out += self.skip("delta after its part's .done", obj)
            return
        self._parts.add(marker)
        self.add_to(channel, text, out)

    def _part_done(
        self,
        channel: str,
        obj: Mapping[str, Any],
        field: str,
        out: list[Event],
        part: str = "content_index",
        kind: str | None = None,
    ) -> None:
        """A part's final text, used only when none of it was streamed as deltas (a delta
        that arrives after it is then dropped: exactly the same part only, as dropping a
        delta that belongs to another part would lose text)."""
        marker: Marker = (kind or channel, self.items.output_of(obj), count(obj.get(part)))
        if self._parts.full() or self._parts.matches(marker):
            return
        text = obj.get(field)
        if text.__class__ is not str or not text:
            return
        self._parts.add(marker)
        self._shown.add(marker)
        self.add_to(channel, text, out)

