"""What a format keeps per choice, whatever its vocabulary: :class:`ChoiceState` (offsets per
channel, the tool calls, the surrogate halves held back) and :class:`ToolCallState` (one
call's identity, delivered length and streamed fragments, folded as they grow: :func:`fold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._events import Event
from .._limits import StreamLimits
from ..errors import LimitExceededError
from ._event_makers import reasoning_delta, refusal_delta, text_delta, tool_delta
from ._surrogates import REPLACEMENT, fix_surrogates, is_high_half

__all__ = ["CHOICE_SLOTS", "ChoiceState", "ToolCallState", "fold"]

_FOLD = 256  # argument fragments kept per call before folding them into one string
#: Every join of kept fragments goes through this global, so that tests can count the
#: characters copied and hold the fold to O(n).
_join = "".join


def fold(parts: list[str], start: int) -> int:
    """Join ``parts[start:]`` (what arrived since the last fold) into one piece, in place;
    returns the length past which to fold next. Only new fragments are copied: joining the
    whole list every ``_FOLD`` fragments was quadratic (200 000 argument deltas of 100
    characters took 3.8 s), as the assembler's fold once was."""
    parts[start:] = [_join(parts[start:])]
    return len(parts) + _FOLD


class ToolCallState:
    """What a format remembers about one tool call: identity, delivered length and, for
    formats whose final ``done`` value replaces the streamed one, the streamed fragments."""

    __slots__ = ("fold_at", "fragments", "id", "length", "name", "start_input")

    def __init__(self, kept: bool = True) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.length = 0
        #: Streamed argument fragments (``kept``); ``None`` when nothing compares them (Chat
        #: Completions, Anthropic) or after a resume (the text is not known here).
        self.fragments: list[str] | None = [] if kept else None
        #: ``fragments`` is folded when it grows past this (see :func:`fold`).
        self.fold_at = _FOLD
        #: Anthropic: the ``input`` of ``content_block_start`` (used when no fragment arrives).
        self.start_input: object = None

    def add(self, text: str) -> int:
        """Account for a streamed argument fragment; returns its offset (the length before
        it). Every ``_FOLD`` fragments the new ones are folded into one chunk, so a call with
        many tiny fragments costs a few strings, not a list entry per delta."""
        offset = self.length
        self.length = offset + len(text)
        fragments = self.fragments
        if fragments is not None:
            fragments.append(text)
            if len(fragments) > self.fold_at:
                self.fold_at = fold(fragments, self.fold_at - _FOLD)
        return offset

    def replace(self, final: str) -> None:
        """The provider's final arguments replace everything streamed."""
        self.length = len(final)
        self.fragments = [final]
        self.fold_at = 1 + _FOLD

    def settle(self, final: str) -> tuple[str, int, bool] | None:
        """The provider's final arguments (Responses' ``.done``) take the place of what was
        streamed: ``None`` when they are exactly that, else the delta that makes them so
        (``rest`` at ``offset``; ``replace``: what was delivered past ``offset`` is wrong).
        A final value that extends the fragments is one more fragment. After a resume only
        the length of what was streamed is known, not the text, so the final value replaces
        all of it (trusting it as a prefix spliced the two when they disagree)."""
        fragments = self.fragments
        if fragments is None:
            agree = 0
        else:
            streamed = _join(fragments)
            if streamed == final:
                return None
            agree = len(streamed) if final.startswith(streamed) else _common(streamed, final)
        replace = agree < self.length
        self.replace(final)
        return final[agree:], agree, replace


def _common(a: str, b: str) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


# --------------------------------------------------------------------------- one choice

class ChoiceState:
    """What a format keeps for one choice, whatever its vocabulary: the code points delivered
    per channel (``text``, ``reasoning``, ``refusal``), the tool calls by number, the call
    touched last, and the high surrogate halves held back per channel (a channel name, or a
    call's number).

    A mixin: a Chat Completions choice is one object per choice, while the event-typed
    formats describe a single choice and keep its state on the format itself (one attribute
    less on their hot path). Both declare :data:`CHOICE_SLOTS`; the mixin's own ``__slots__``
    is empty, so no instance gets a ``__dict__`` (which would slow every attribute lookup on
    the formats' hot paths), and hidden from the type checker, which would otherwise refuse
    the mixin's assignments to slots its subclasses declare.

    Why halves are held (see :mod:`._surrogates`): servers that cut text by UTF-16 unit send
    an emoji's high half at the end of one fragment and its low half at the start of the
    next; :meth:`join` holds a trailing high half back and puts it in front of the channel's
    next fragment, so the pair is delivered once, as one code point.
    """

    if not TYPE_CHECKING:
        __slots__ = ()

    text: int
    reasoning: int
    refusal: int
    calls: dict[int, ToolCallState]
    last_call: int | None
    held: dict[str | int, str] | None

    def clear_choice(self) -> None:
        """Nothing delivered yet."""
        self.text = self.reasoning = self.refusal = 0
        self.calls = {}
        self.last_call = None
        self.held = None

    def deliver(self, channel: str, key: str, choice: int, text: str, out: list[Event]) -> None:
        """``text`` (ready: joined, non-empty) on a text channel, at the channel's offset
        (branches, not ``getattr``: reasoning deltas come as often as text)."""
        size = len(text)
        if channel == "text":
            out.append(text_delta(key, choice, self.text, text))
            self.text += size
        elif channel == "reasoning":
            out.append(reasoning_delta(key, choice, self.reasoning, text))
            self.reasoning += size
        else:
            out.append(refusal_delta(key, choice, self.refusal, text))
            self.refusal += size

    def name_call(self, call: ToolCallState, cid: object, name: object) -> tuple[str | None,
                                                                              str | None]:
        """Take a call's ``id`` and ``name`` from their first non-empty string; returns
        those that are new (what a ``ToolCallDelta`` announces)."""
        new_id = cid if isinstance(cid, str) and cid and call.id is None else None
        new_name = name if isinstance(name, str) and name and call.name is None else None
        call.id = call.id or new_id
        call.name = call.name or new_name
        return new_id, new_name

    def open_call(self, number: int, limits: StreamLimits, *, kept: bool = True) -> ToolCallState:
        """A new tool call, refused past ``max_tool_calls`` before anything is kept for it
        (the assembler would refuse it too, but only after the format held it)."""
        calls = self.calls
        if len(calls) >= limits.max_tool_calls:
            raise LimitExceededError("max_tool_calls", limits.max_tool_calls, len(calls) + 1)
        call = calls[number] = ToolCallState(kept)
        self.last_call = number
        return call

    def restore_offsets(self, counts: Mapping[str, Any],
                        ids: Mapping[int, tuple[Any, Any]]) -> None:
        """Offsets and tool-call identity from a resume token (``counts`` as
        :meth:`fluxstream._assembly.ReplyAssembler.offsets` writes one choice's, ``ids`` the
        reply's ``{call: (id, name)}``): only lengths are known, not the streamed text."""
        self.text = int(counts.get("text", 0))
        self.reasoning = int(counts.get("reasoning", 0))
        self.refusal = int(counts.get("refusal", 0))
        for call_key, length in (counts.get("tool_calls") or {}).items():
            number = int(call_key)
            call = self.calls[number] = ToolCallState(kept=False)
            call.id, call.name = ids.get(number, (None, None))
            call.length = int(length)
            self.last_call = number

    # ------------------------------------------------------------------ surrogate halves

    def join(self, channel: str | int, text: str) -> str:
        """``text`` ready to deliver on ``channel``: the half held from the channel's previous
        fragment in front, a trailing high half held back, pairs joined into code points and
        any other lone half replaced. May return ``""``."""
        held = self.held
        if held:
            before = held.pop(channel, "")
            if before:
                text = before + text
        last = text[-1:]
        if is_high_half(last):
            if held is None:
                held = self.held = {}
            held[channel] = last
            text = text[:-1]
        return fix_surrogates(text)

    def flush_held(self, key: str, choice: int, out: list[Event]) -> None:
        """The choice ends: every half still held is delivered as U+FFFD (no low half will
        come; at a cut end this is not called: the rest of the payload is lost anyway)."""
        held = self.held
        if not held:
            return
        self.held = None
        for channel in held:
            if isinstance(channel, int):
                call = self.calls.get(channel)
                if call is not None:
                    out.append(tool_delta(key, choice, channel, None, None, REPLACEMENT,
                                          call.add(REPLACEMENT)))
            else:
                self.deliver(channel, key, choice, REPLACEMENT, out)

    def held_state(self) -> list[list[Any]]:
        """The held halves, for a resume token: a token taken between an emoji's two halves
        must give the resumed format the first one, or the emoji becomes U+FFFD. ``[channel,
        call number or None, UTF-16 unit]``: the half as a number, since a lone half is not
        valid in every JSON encoder."""
        return [
            ["tool", channel, ord(half)] if isinstance(channel, int) else [channel, None, ord(half)]
            for channel, half in (self.held or {}).items()
        ]

    def restore_held(self, state: object) -> bool:
        """Take over :meth:`held_state` from a token (entries that are not what it writes, or
        name a call the reply does not have, are left out); whether any half was taken."""
        taken = False
        for entry in state if isinstance(state, list) else ():
            if not (isinstance(entry, list) and len(entry) == 3):
                continue
            channel, index, unit = entry
            if type(unit) is not int or not 0xD800 <= unit <= 0xDBFF:
                continue
            key: str | int
            if channel in ("text", "reasoning", "refusal") and index is None:
                key = channel
            elif channel == "tool" and type(index) is int and index in self.calls:
                key = index
            else:
                continue
            if self.held is None:
                self.held = {}
            self.held[key] = chr(unit)
            taken = True
        return taken


#: The slots a class mixing in :class:`ChoiceState` declares.
CHOICE_SLOTS = ("calls", "held", "last_call", "reasoning", "refusal", "text")

