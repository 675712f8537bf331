"""Reasoning a server sends inside the text, between tags (``<think>…</think>``), split out.

Many OpenAI-compatible servers (llama.cpp without a reasoning parser, vLLM and Ollama with
several open models, proxies) put a model's reasoning into the answer's text between tags.
:class:`TagSplitter` turns those spans into :class:`~fluxstream._events.ReasoningDelta`\\ s
and the rest into :class:`~fluxstream._events.TextDelta`\\ s, one choice at a time, sans-IO.

Why it is written this way:

* **Exact at every read boundary.** A tag may arrive split over chunks (llama.cpp sends
  ``<``, ``t``, ``hi``, ``n``, ``k``, ``>``); the splitter holds back only the end of the text
  that could still become a tag (at most a tag's length) and decides it when the next piece,
  the choice's finish or the stream's end comes. The deltas it gives out carry offsets it
  counts itself (code points of text and of reasoning delivered per choice), so a renderer's
  ``buf[offset:] = text`` is right whatever the cuts, across a reconnect, a failover (the
  splitter belongs to the parser, which outlives both) and the relay (which records what
  the parser gave out).
* **At the start of a turn only, by default.** A model that writes about ``<think>`` in its
  answer is not reasoning: only an opening tag before any other text (whitespace aside) opens
  reasoning. ``ThinkTags(anywhere=True)`` opens one wherever it appears.
* **An unclosed tag is reasoning, and says so.** A stream cut (or a length cap reached) inside
  the tags leaves reasoning without its closing tag; it stays reasoning and
  :meth:`TagSplitter.unclosed` names the choice (the reply's ``Choice.reasoning_unclosed``).
* **Nothing per delta when off.** The parser holds ``None`` instead of a splitter and checks
  that once per read.
* **The wire text is kept as spans, not copied.** A ``Last-Event-ID`` reconnect compares the
  text a server replays with what was delivered; the splitter gives that text back
  (:meth:`TagSplitter.wire_text`) from the reply's text and reasoning and the few markup
  strings it consumed, without keeping a second copy of the reply.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .._events import Event, Finish, ReasoningDelta, TextDelta
from .._reply import Choice
from ..formats._event_makers import reasoning_delta, text_delta

__all__ = ["ThinkTags", "TagSplitter"]

#: Whitespace allowed before an opening tag at the start of a turn, and kept out of the text
#: after a closing tag; past it the whitespace is text (bounded: nothing is held for ever).
MAX_WHITESPACE = 64
_WHITESPACE = " \t\r\n"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,31}")

# A choice's state.
_START = 0  # nothing but whitespace yet: an opening tag may come
_REASONING = 1  # inside the tags
_AFTER = 2  # just after a closing tag: whitespace goes with the tag
_TEXT = 3  # the answer; no tag is looked for any more
_SCAN = 4  # the answer, with ``anywhere``: an opening tag may still come


@dataclass(frozen=True)
class ThinkTags:
    """Which tags carry reasoning inside the text, and where they count.

    :param names: tag names, each opened as ``<name>`` and closed as ``</name>`` (the
        closing tag must name the tag that opened).
    :param anywhere: open reasoning at a tag anywhere in the text, not only at the start of
        the turn (where a model that writes *about* tags would lose its answer to them).
    """

    names: tuple[str, ...] = ("think", "thinking", "reasoning")
    anywhere: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.names, str) or not self.names:
            raise ValueError("ThinkTags.names must be a non-empty tuple of tag names")
        for name in self.names:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ValueError(
                    f"ThinkTags.names: {name!r} is not a tag name (a letter, then up to 31"
                    " letters, digits or _.:-)"
                )

    @property
    def opening(self) -> tuple[str, ...]:
        """The opening tags, as they appear in the text."""
        return tuple(f"<{name}>" for name in self.names)


def think_tags_of(value: ThinkTags | bool | None) -> ThinkTags | None:
    """A client's or a call's ``think_tags=``: ``True`` the default tags, ``False``/``None``
    off, or a :class:`ThinkTags` as given."""
    if value is None or value is False:
        return None
    if value is True:
        return ThinkTags()
    if isinstance(value, ThinkTags):
        return value
    raise TypeError(f"think_tags must be a bool or a ThinkTags, not {type(value).__name__}")


class _ChoiceTags:
    """One choice's state: where it is, what it holds back, what it gave out, and the spans
    of the wire text (``("t"|"r", start, end, "")`` slices of the reply's text or reasoning,
    ``("T", start, -1, "")`` the answer's text from ``start`` to its end, or
    ``("m", 0, 0, markup)``: a tag and the whitespace beside it)."""

    __slots__ = ("close", "held", "mode", "reasoning", "spaces", "spans", "text", "unclosed")

    def __init__(self, mode: int, text: int = 0, reasoning: int = 0) -> None:
        self.mode = mode
        self.held = ""
        self.close = ""
        self.spaces = 0  # whitespace taken with the closing tag
        self.text = text
        self.reasoning = reasoning
        self.unclosed = False
        self.spans: list[tuple[str, int, int, str]] = []

    def span(self, kind: str, start: int, end: int) -> None:
        spans = self.spans
        if spans:
            last = spans[-1]
            if last[0] == kind and last[2] == start:
                spans[-1] = (kind, last[1], end, "")
                return
        spans.append((kind, start, end, ""))

    def markup(self, text: str) -> None:
        spans = self.spans
        if spans and spans[-1][0] == "m":
            spans[-1] = ("m", 0, 0, spans[-1][3] + text)
        else:
            spans.append(("m", 0, 0, text))


class TagSplitter:
    """Splits tagged reasoning out of each choice's text (see the module docstring).

    :param tags: the tags and where they count.
    :param key: the content key stamped on the deltas it makes.
    """

    def __init__(self, tags: ThinkTags, key: str) -> None:
        self.tags = tags
        self.key = key
        self._opening = tags.opening
        self._longest = max(len(tag) for tag in self._opening)
        self._choices: dict[int, _ChoiceTags] = {}

    # ------------------------------------------------------------------ events

    def split(self, events: list[Event]) -> list[Event]:
        """``events`` with each choice's text split (tags out, reasoning as reasoning) and
        every reasoning delta's offset counted across both sources; held-back text is
        decided before a choice's :class:`~fluxstream._events.Finish`."""
        out: list[Event] = []
        choices = self._choices
        for event in events:
            cls = event.__class__
            if cls is TextDelta:
                st = choices.get(event.choice)  # type: ignore[union-attr]
                if st is not None and st.mode == _TEXT:  # the answer: as it came, re-counted
                    text = event.text  # type: ignore[union-attr]
                    start = st.text
                    st.text = start + len(text)
                    out.append(text_delta(self.key, event.choice, start, text)  # type: ignore[union-attr]
                               if start != event.offset else event)  # type: ignore[union-attr]
                    continue
                self._text(event, out)  # type: ignore[arg-type]
            elif cls is ReasoningDelta:
                st = self._state(event.choice)  # type: ignore[union-attr]
                self._reasoning(st, event.choice, event.text, out)  # type: ignore[union-attr]
            else:
                if cls is Finish:
                    self._flush_choice(event.choice, out)  # type: ignore[union-attr]
                out.append(event)
        return out

    def flush(self) -> list[Event]:
        """The stream ends: what each choice holds back is decided (reasoning inside an
        unclosed tag stays reasoning, and the choice is marked :meth:`unclosed`)."""
        out: list[Event] = []
        for index in self._choices:
            self._flush_choice(index, out)
        return out

    def reset(self) -> None:
        """A new generation replaces the reply: every choice starts over."""
        self._choices.clear()

    def restore(self, choices: Iterable[Choice]) -> None:
        """Go on with a reply taken over (its choices, from a resume token): a choice with
        text reads on as text; one with only reasoning reads on inside the tags (its tags,
        gone with the old process, are the first name's)."""
        self._choices.clear()
        for choice in choices:
            index, text, reasoning = choice.index, choice.text, choice.reasoning or ""
            if text:
                st = _ChoiceTags(_START, 0, len(reasoning))
                self._answer(st)
                st.text = len(text)
                if st.mode == _SCAN:
                    st.span("t", 0, len(text))
            elif reasoning:
                st = _ChoiceTags(_REASONING, 0, len(reasoning))
                st.close = f"</{self.tags.names[0]}>"
                st.markup(self._opening[0])
                st.span("r", 0, len(reasoning))
            else:
                continue
            self._choices[index] = st

    # ------------------------------------------------------------------ state

    def unclosed(self) -> list[int]:
        """The choices whose reasoning ended without its closing tag."""
        return [index for index, st in self._choices.items() if st.unclosed]

    def delivered(self, choices: Iterable[Choice]) -> dict[int, str]:
        """Each choice's text as the server sent it (what a replaying server's is compared
        with)."""
        return {choice.index: self.wire_of(choice) for choice in choices}

    def wire_of(self, choice: Choice) -> str:
        """``choice``'s text as the server sent it, tags and reasoning in it."""
        return self.wire_text(choice.index, choice.text, choice.reasoning or "")

    def wire_text(self, index: int, text: str, reasoning: str) -> str:
        """The text the server sent for choice ``index`` (tags included), given the reply's
        ``text`` and ``reasoning`` of it: what a replaying server's text is compared with."""
        st = self._choices.get(index)
        if st is None:
            return text
        parts: list[str] = []
        for kind, start, end, markup in st.spans:
            if kind == "m":
                parts.append(markup)
            elif kind == "T":  # the answer, to its end
                parts.append(text[start:])
            else:
                parts.append((text if kind == "t" else reasoning)[start:end])
        parts.append(st.held)
        return "".join(parts)

    def _state(self, index: int) -> _ChoiceTags:
        st = self._choices.get(index)
        if st is None:
            st = self._choices[index] = _ChoiceTags(_START)
        return st

    # ------------------------------------------------------------------ giving out

    def _give_text(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> None:
        if text:
            start = st.text
            st.text = end = start + len(text)
            if st.mode != _TEXT:  # past the answer's start its one span runs to the end
                st.span("t", start, end)
            out.append(text_delta(self.key, index, start, text))

    def _give_reasoning(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> None:
        if text:
            start = st.reasoning
            st.reasoning = end = start + len(text)
            st.span("r", start, end)
            out.append(reasoning_delta(self.key, index, start, text))

    def _reasoning(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> None:
        """A provider's own reasoning delta: it goes on the same channel, so its offset is
        counted with the tagged reasoning (it is not part of the text on the wire)."""
        if text:
            start = st.reasoning
            st.reasoning = start + len(text)
            out.append(reasoning_delta(self.key, index, start, text))

    def _flush_choice(self, index: int, out: list[Event]) -> None:
        st = self._choices.get(index)
        if st is None:
            return
        held, st.held = st.held, ""
        if st.mode == _REASONING:
            st.unclosed = True
            self._give_reasoning(st, index, held, out)
        else:
            self._give_text(st, index, held, out)
            if st.mode == _START:
                self._answer(st)

    # ------------------------------------------------------------------ the state machine

    def _answer(self, st: _ChoiceTags) -> None:
        """The answer starts: no tag is looked for any more (unless ``anywhere``). Its text
        to the end is one span, so nothing is recorded per delta from here on."""
        if self.tags.anywhere:
            st.mode = _SCAN
        else:
            st.mode = _TEXT
            st.spans.append(("T", st.text, -1, ""))

    def _text(self, event: TextDelta, out: list[Event]) -> None:
        index = event.choice
        st = self._choices.get(index)
        if st is None:
            st = self._choices[index] = _ChoiceTags(_START)
        text = st.held + event.text
        st.held = ""
        while text:
            mode = st.mode
            if mode == _START:
                text = self._start(st, index, text, out)
            elif mode == _REASONING:
                text = self._inside(st, index, text, out)
            elif mode == _AFTER:
                text = self._after(st, text)
            elif mode == _SCAN:
                text = self._scan(st, index, text, out)
            else:
                self._give_text(st, index, text, out)
                text = ""

    def _start(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> str:
        rest = text.lstrip(_WHITESPACE)
        lead = len(text) - len(rest)
        if lead > MAX_WHITESPACE:
            self._answer(st)
            return text
        if not rest:
            st.held = text
            return ""
        for name, tag in zip(self.tags.names, self._opening, strict=True):
            if rest.startswith(tag):
                st.markup(text[: lead + len(tag)])
                st.close = f"</{name}>"
                st.mode = _REASONING
                return rest[len(tag):]
        if len(rest) < self._longest and any(tag.startswith(rest) for tag in self._opening):
            st.held = text  # could still become an opening tag
            return ""
        self._answer(st)
        return text

    def _inside(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> str:
        close = st.close
        at = text.find(close)
        if at >= 0:
            self._give_reasoning(st, index, text[:at], out)
            st.markup(close)
            st.spaces = 0
            st.mode = _AFTER
            return text[at + len(close):]
        # Hold back the end that could be the start of the closing tag (one '<' in it).
        cut = text.rfind("<", max(0, len(text) - len(close) + 1))
        if cut >= 0 and close.startswith(text[cut:]):
            st.held = text[cut:]
            text = text[:cut]
        self._give_reasoning(st, index, text, out)
        return ""

    def _after(self, st: _ChoiceTags, text: str) -> str:
        rest = text.lstrip(_WHITESPACE)
        lead = text[: len(text) - len(rest)]
        if lead:
            room = MAX_WHITESPACE - st.spaces
            if len(lead) > room:  # too much: the rest of it is text
                st.markup(lead[:room])
                self._answer(st)
                return text[room:]
            st.spaces += len(lead)
            st.markup(lead)
        if rest:
            self._answer(st)
        return rest

    def _scan(self, st: _ChoiceTags, index: int, text: str, out: list[Event]) -> str:
        at = text.find("<")
        while at >= 0:
            for name, tag in zip(self.tags.names, self._opening, strict=True):
                if text.startswith(tag, at):
                    self._give_text(st, index, text[:at], out)
                    st.markup(tag)
                    st.close = f"</{name}>"
                    st.mode = _REASONING
                    return text[at + len(tag):]
            tail = text[at:]
            if len(tail) < self._longest and any(tag.startswith(tail) for tag in self._opening):
                self._give_text(st, index, text[:at], out)
                st.held = tail
                return ""
            at = text.find("<", at + 1)
        self._give_text(st, index, text, out)
        return ""
