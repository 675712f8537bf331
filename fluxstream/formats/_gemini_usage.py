"""Gemini's usage snapshot: ``usageMetadata`` read as a :class:`~fluxstream._wire.Usage`, and
when it is delivered.

Every event of a Gemini stream carries the usage so far, a snapshot that grows (the last one
wins). Checking and validating one on every event cost as much as the rest of the event, so a
snapshot is only kept as it comes, and delivered when it first comes, when a candidate
finishes or the prompt is blocked (then it is final) and when the body ends. The fast path of
``feed_many`` keeps even less: the frame the snapshot came in, compared as a typed
:class:`~fluxstream.formats._gemini_quick.QuickUsage`, its dict built only when it is read.
Kept apart from the format's frames because it is a state of its own with its own part of a
resume token (the last snapshot, and whether it was delivered).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from .._events import Event, UsageUpdate
from .._wire import Usage
from ._gemini_candidates import CandidateReader, count
from ._gemini_quick import DICT_DECODER, QuickUsage
from ._surrogates import clean_tree
from ._usage_fields import USAGE_DROPPED, checked_usage_model, fill_usage

__all__ = ["MAX_USAGE_FIELDS", "UsageSnapshot", "filled_usage", "gemini_usage"]

#: Usage fields kept (real ``usageMetadata`` has about ten).
MAX_USAGE_FIELDS = 64

_dict_of = DICT_DECODER.decode


def gemini_usage(raw: Mapping[str, Any]) -> Usage:
    """``usageMetadata`` as a :class:`~fluxstream._wire.Usage`: Gemini's own fields kept, and
    the Chat Completions names filled in. ``completion_tokens`` counts the thoughts too
    (``candidatesTokenCount + thoughtsTokenCount``), as OpenAI counts reasoning tokens in
    them; ``total_tokens`` is ``totalTokenCount`` (it also counts tool-use prompt tokens)."""
    return filled_usage(raw, checked_usage_model(raw)[2])


def filled_usage(raw: Mapping[str, Any], result: Usage) -> Usage:
    """:func:`gemini_usage` of ``raw``, whose checked fields ``result`` holds already (a
    fresh ``Usage``: it is filled in place)."""
    prompt = count(raw.get("promptTokenCount"))
    output = count(raw.get("candidatesTokenCount"))
    thoughts = count(raw.get("thoughtsTokenCount"))
    cached = count(raw.get("cachedContentTokenCount"))
    total = count(raw.get("totalTokenCount"))
    completion = None
    if output is not None or thoughts is not None:
        completion = (output or 0) + (thoughts or 0)
    return fill_usage(result, prompt=prompt, completion=completion, total=total,
                      cached=cached, reasoning=thoughts)


class UsageSnapshot(CandidateReader):
    """The last usage snapshot and its delivery, over the candidates (whether every one
    finished makes the snapshot final). :class:`~fluxstream.formats.gemini.GeminiFormat`
    notes a snapshot as its events bring one, and sends it when the stream settles."""

    __slots__ = ("_blocked", "_usage_dict", "_usage_frame", "_usage_sent", "_usage_typed")
    #: The prompt was blocked (``promptFeedback.blockReason``): no candidate will come, and
    #: the usage is final.
    _blocked: bool
    #: Whether the last usage snapshot (:attr:`_usage`) was delivered (``None``: none came
    #: yet).
    _usage_sent: bool | None
    #: The last usage snapshot's dict (see :attr:`_usage`), unless it is still only
    #: ``_usage_frame``: the frame whose ``usageMetadata`` it is, its dict not built yet.
    _usage_dict: dict[str, Any] | None
    _usage_frame: str | None
    #: The snapshot as a typed QuickUsage, when the fast path decoded it (the fast path
    #: compares the next one with it; ``None``: it compares the dicts, once).
    _usage_typed: QuickUsage | None

    @property
    def _usage(self) -> dict[str, Any] | None:
        """The last usage snapshot, as the general path keeps it. The fast path, which reads
        a snapshot only as a typed :class:`QuickUsage`, keeps the frame it came in instead,
        and its dict is built from that frame when first read here (the snapshot grows on
        every event, and is read only when delivered or saved)."""
        frame = self._usage_frame
        if frame is not None:
            self._usage_frame = None
            kept: dict[str, Any] = _dict_of(frame)["usageMetadata"]
            self._usage_dict = kept
        return self._usage_dict

    @_usage.setter
    def _usage(self, value: dict[str, Any] | None) -> None:
        self._usage_dict = value
        self._usage_frame = None
        self._usage_typed = None

    def _note_usage(self, usage: object, obj: Mapping[str, Any], scan: bool,
                    out: list[Event]) -> None:
        """A snapshot of the usage so far. It rides on every event and grows; it is delivered
        when it first comes, when a candidate finishes and when the body ends (validating a
        snapshot on every event cost as much as the rest of the event; the last one wins)."""
        if usage.__class__ is not dict:
            out += self._skip(obj, "usageMetadata is not an object")
            return
        if not usage or usage == self._usage:
            return
        raw: dict[str, Any] = usage
        if len(raw) > MAX_USAGE_FIELDS:
            raw = dict(itertools.islice(raw.items(), MAX_USAGE_FIELDS))
        self._usage = clean_tree(raw) if scan else raw
        first = self._usage_sent is None
        self._usage_sent = False
        if first:
            self._send_usage(out)

    def _send_usage(self, out: list[Event]) -> None:
        """Deliver the last snapshot if it was not yet: final once every candidate finished
        or the prompt was blocked (before that it counts the output so far, not the
        reply's)."""
        if self._usage_sent is not False or self._usage is None:
            return
        self._usage_sent = True
        # Checked and validated once: what is kept fits, so its Usage is gemini_usage's.
        clean, dropped, checked = checked_usage_model(self._usage)
        if dropped:
            out += self._skip(self._usage, USAGE_DROPPED)
        cands = self._cands.values()
        final = self._blocked or (
            bool(cands) and all(st.finish is not None for st in cands))
        out.append(UsageUpdate(filled_usage(clean, checked), final))
