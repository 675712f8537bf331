"""What is left of a request's length cap while its reply comes in parts (sans-IO).

A reply that moved may come in several parts: one upstream's, then a continuation's on another
upstream or on the same one (a ``continuation`` resume, a reply continued from a resume token).
A continuation is a new request, and a provider counts its cap from there: asked for the whole
cap again, it delivers past the cap the caller set, and bills for it. So every continuation
asks for what is left (:meth:`LengthBudget.continuation_cap`): the cap minus the output the
reply already used, each finished part counted by its final usage, else by its estimate
(:func:`fluxstream._usage.estimate_part`, from its content deltas and characters), and a reply
restored from a resume token a token per :data:`~fluxstream._usage.CHARS_PER_TOKEN` characters
(no delta count travels in a token). When nothing is left, the reply ends there, ``finished``
with stop ``length``, as a model that reached the cap ends (the rule is
:meth:`fluxstream._core.recovery.Recovery.decide`'s).

The same counts bill each upstream's part of a reply (a segment's usage or estimate), so
:class:`~fluxstream._io.failover.Route` reads its segments' output here too. No clock or
socket: the reply and the count of content deltas so far are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

from .._reply import Reply, Usage, UsageEstimate
from .._usage import CHARS_PER_TOKEN, content_characters, estimate_part

__all__ = ["LengthBudget", "PartOutput"]


class PartOutput(NamedTuple):
    """The output of the part of a reply still coming: its tokens (its final usage's, else
    estimated; 0 when it delivered nothing), the usage it reported (``None``: none of its
    own), and its estimate (``None`` with a final usage, or when it delivered nothing)."""

    tokens: int
    usage: Usage | None
    estimate: UsageEstimate | None


class LengthBudget:
    """The output a reply has used of its length cap, part by part.

    :param cap: the request's length cap (``None``: it has none, and nothing is counted
        against it).
    :param reply: the reply as the stream starts: a resume token's restored reply counts as
        spent already.
    :param cap_of: instead of ``cap``, what reads it from the request, asked on first use:
        only a stream that drops or continues ever needs it (reading it from a Gemini body
        merges its ``generationConfig``).
    """

    __slots__ = ("_cap", "_cap_of", "_chars_before", "_events_before", "_restored", "_spent",
                 "_usage_before")

    def __init__(
        self, cap: int | None, reply: Reply | None = None, *,
        cap_of: Callable[[], int | None] | None = None,
    ) -> None:
        self._cap = cap
        self._cap_of = cap_of
        #: Output tokens of the parts closed so far that delivered content.
        self._spent = 0
        #: Where the open part began: the reply's usage object then (a later one is its
        #: own), the content deltas and the code points of content then.
        self._usage_before = reply.usage if reply is not None else None
        self._events_before = 0
        #: ``_restored``: code points a resume token's reply held before this stream.
        self._restored = self._chars_before = (
            content_characters(reply) if reply is not None else 0
        )

    @property
    def cap(self) -> int | None:
        """The request's length cap (``None``: it has none)."""
        cap_of = self._cap_of
        if cap_of is not None:
            self._cap, self._cap_of = cap_of(), None
        return self._cap

    def part(self, reply: Reply, content_events: int) -> PartOutput:
        """The open part's output so far (``content_events``: the stream's content deltas)."""
        events = content_events - self._events_before
        chars = content_characters(reply)
        if chars >= self._chars_before:  # else the reply started over since: all of it
            chars -= self._chars_before
        usage = reply.usage if reply.usage is not self._usage_before else None
        if usage is not None and not reply.usage_partial:
            return PartOutput(usage.completion_tokens or 0, usage, None)
        if not (events or chars):
            return PartOutput(0, usage, None)
        estimate = estimate_part(events, chars, usage)
        return PartOutput(estimate.output_tokens, usage, estimate)

    def close_part(self, reply: Reply, content_events: int, spent: int) -> None:
        """The open part ended having used ``spent`` output tokens (0: it delivered
        nothing); the next one starts here."""
        self._spent += spent
        self._usage_before = reply.usage
        self._events_before = content_events
        self._chars_before = content_characters(reply)

    def restarted(self) -> None:
        """The reply started over (a ``Reset``): nothing of it is shown any more, so the
        new generation has the whole cap."""
        self._chars_before = self._restored = self._spent = 0
        self._usage_before = None

    def spent(self, reply: Reply, content_events: int) -> int:
        """Output tokens the reply has used so far: the closed parts', the open one's, and
        a resume token's reply."""
        open_part = self.part(reply, content_events).tokens
        return self._spent + open_part + math.ceil(self._restored / CHARS_PER_TOKEN)

    def left(self, reply: Reply, content_events: int) -> int | None:
        """What is left of the cap (``None``: the request has none)."""
        if self.cap is None:
            return None
        return self.cap - self.spent(reply, content_events)

    def continuation_cap(
        self, reply: Reply, content_events: int, own: int | None = None
    ) -> int | None:
        """The cap a continuation of ``reply`` asks for: what is left, one more when the
        prefill loses its trailing whitespace (Anthropic refuses it, see
        :meth:`fluxstream._parser.StreamParser.begin_continuation`: the model writes it again
        first, the echo cut hides it, and it counts against the cap there), never more than
        the upstream's ``own`` cap; ``None`` when the request has no cap (its body is sent
        with the cap it has)."""
        left = self.left(reply, content_events)
        if left is None:
            return None
        text = reply.text
        if text != text.rstrip() and text.strip():
            left += 1
        return left if own is None else min(left, own)
