"""What the ``fluxstream`` command prints: live text, choice by choice, and the summary.

Everything printed passes through :class:`Output`, which shows control characters visibly
(``\\x1b``) instead of sending them to the terminal: a reply, a tool name, a finish reason or
an error message comes from a server or a capture, and raw escape sequences in it could retitle
the window, clear the screen or write the clipboard (OSC 52) — or hide text from the reader.
Newline and tab are kept (a reply has them); ``--raw`` opts out.
"""

from __future__ import annotations

import json
import os
import re
from typing import TextIO

from .. import apis
from .._events import (
    Finish,
    Handoff,
    PathDone,
    ReasoningDelta,
    RefusalDelta,
    Reset,
    TextDelta,
    ToolCallDone,
)
from .._reply import Choice, Outcome, Reply, Segment, Usage
from .._stream import ReplyStream

__all__ = [
    "FORMAT_NAMES",
    "MIN_RATE_SECONDS",
    "MIN_RATE_TOKENS",
    "LivePrinter",
    "Output",
    "handoff_note",
    "json_safe",
    "path_note",
    "segment_lines",
    "summary",
    "tokens",
    "usage_text",
    "visible",
]

#: How the summary and the hints name each wire format (its API's title).
FORMAT_NAMES = {api.name: api.title for api in apis.registered()}

#: C0 controls but newline and tab, DEL, and the C1 controls (U+0080-U+009F: terminals that
#: read UTF-8 take U+009B as CSI, the same as ESC [).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What JSON output must still escape: pydantic's JSON escapes the C0 controls, not these.
_JSON_UNSAFE = re.compile("[\x7f-\x9f]")

#: A tokens/s rate is shown only over at least this many completion tokens and this much time
#: after the first token. Below that it measures the network and the scheduler, not the model:
#: a local or buffering server hands over a whole reply in one read (30 tokens in 50 µs "are"
#: 600000 tokens/s), and over a few tokens the first token's own time (counted in, but before
#: the span) skews the quotient by 1/N. A tenth of a second keeps a clock tick or a late
#: wake-up (1-15 ms) within 15 % and still measures a model at ~100 tokens/s over a short
#: reply (half a second said "too fast to measure" of 30 tokens in 300 ms).
MIN_RATE_TOKENS = 10
MIN_RATE_SECONDS = 0.1
#: How much of a completed path's JSON value a note shows (a tool's ``content`` argument may
#: be a whole file; the note says where it is, the reply itself shows all of it).
PATH_VALUE_CHARS = 80


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as ``\\xNN``
    (``\\r\\n`` becomes a newline first: it is one, from a server that writes them)."""
    if _CONTROLS.search(text) is None:
        return text
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n"))


def json_safe(text: str) -> str:
    """JSON text with DEL and the C1 controls escaped as ``\\u00NN`` too (still the same JSON:
    they can only occur inside strings)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class Output:
    """A text stream that shows control characters visibly (see the module docstring), unless
    ``raw``."""

    def __init__(self, stream: TextIO, *, raw: bool = False) -> None:
        self.stream = stream
        self.raw = raw
        #: Whether the last text written ended a line (nothing written: it did).
        self.at_line_start = True

    def write(self, text: str) -> None:
        self.stream.write(text if self.raw else visible(text))
        if text:
            self.at_line_start = text.endswith("\n")

    def flush(self) -> None:
        self.stream.flush()

    def shares_place_with(self, other: Output) -> bool:
        """Whether ``other`` writes to the same place (one terminal, or ``2>&1``): then
        what each writes interleaves on the same lines."""
        try:
            return os.path.sameopenfile(self.stream.fileno(), other.stream.fileno())
        except (OSError, ValueError, AttributeError):  # no file behind one of them
            return False

    def isatty(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty()) if isatty is not None else False

    def note(self, text: str) -> None:
        """``text`` as a line of its own, dim on a terminal (unless ``NO_COLOR`` is set):
        an aside, such as a handoff, that should be seen without drowning the reply. The
        dimming codes are ours; ``text`` still has its control characters shown."""
        line = visible(text)
        if self.isatty() and not os.environ.get("NO_COLOR"):
            line = f"\x1b[2m{line}\x1b[22m"
        self.stream.write(line + "\n")
        self.at_line_start = True
        self.stream.flush()


class _Lane:
    """One choice's output: rendered as it arrives, kept until the choice may be printed."""

    __slots__ = ("channel", "finished", "index", "parts")

    def __init__(self, index: int) -> None:
        self.index = index
        self.parts: list[str] = []
        self.channel: str | None = None
        self.finished = False

    def render(self, event: object) -> None:
        kind = type(event)
        if kind is ToolCallDone:
            call = event.call  # type: ignore[attr-defined]
            self.parts.append(f"\n[tool call {call.index}] {call.name}({call.arguments})")
            self.channel = "tool"
            return
        channel = {TextDelta: "text", ReasoningDelta: "reasoning", RefusalDelta: "refusal"}[kind]
        if self.channel != channel:
            if self.channel:
                self.parts.append("\n")
            if channel != "text":
                self.parts.append(f"[{channel}] ")
            self.channel = channel
        self.parts.append(event.text)  # type: ignore[attr-defined]


_PRINTED = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallDone)


def handoff_note(event: Handoff, *, content_shown: bool) -> str:
    """The line that tells a reader the reply moved to another upstream: where, why, and
    from which offset (``content_shown``: whether any of the reply was printed before)."""
    where, why = event.upstream, event.reason
    if event.restarted:
        return f"↪ restarted on {where} after {why} (the reply starts over)"
    if not content_shown and event.offset == 0:
        return f"↪ trying {where} after {why}"
    return f"↪ continued on {where} after {why} at offset {event.offset}"


def path_note(event: PathDone, *, choice: bool = False) -> str:
    """The line that says a JSON path of a tool call's arguments (or of a structured reply)
    is complete: whose, which path, its value as JSON, cut to :data:`PATH_VALUE_CHARS`
    (``choice``: name the choice too, when several were asked for). Control characters in
    keys and values stay escaped: ``repr`` and JSON escape them, :meth:`Output.note` the
    rest."""
    whose = "reply" if event.call is None else f"tool {event.call}"
    if choice:
        whose = f"choice {event.choice} {whose}"
    value = json.dumps(event.value, ensure_ascii=False)
    if len(value) > PATH_VALUE_CHARS:
        value = value[: PATH_VALUE_CHARS - 1] + "…"
    return f"· {whose} path {event.path!r} = {value}"


class LivePrinter:
    """Prints a reply's events as they arrive, one choice after another.

    With ``n`` choices a server interleaves them delta by delta; printed as they come they are
    unreadable. So one choice is live at a time — the first that has output (choice 0 in
    practice) — and the others are kept until it finishes; then the next (by index) is printed
    with what it has so far and goes on live. Each choice after the first is labelled
    ``[choice i]``, and the first too when more than one choice was asked for (``choices``).

    A :class:`~fluxstream._events.Handoff` (the reply moved to a fallback) is one line on
    ``notes`` (stderr), between the text before and after it; the text itself goes on where
    it was, so the reply reads whole. A :class:`~fluxstream._events.Reset` (the reply starts
    over) is marked ``[restarted]`` and what follows is printed afresh. A completed JSON path
    (:class:`~fluxstream._events.PathDone`, only when path events were asked for) is a note
    too (:func:`path_note`).
    """

    def __init__(self, out: Output, *, choices: int = 1, notes: Output | None = None) -> None:
        self._out = out
        self._notes = notes
        self._label_first = choices > 1
        self._lanes: dict[int, _Lane] = {}
        self._live: _Lane | None = None
        self._shown: set[int] = set()
        #: The handoffs seen, in order.
        self.handoffs: list[Handoff] = []

    def event(self, event: object) -> None:
        if isinstance(event, Handoff):
            self._handoff(event)
        elif isinstance(event, Reset):
            self._restart()
        elif isinstance(event, Finish):
            # Not the end of its output: a format may send the choice's last tool call
            # after its finish. The next choice's turn comes with the next choice's output.
            self._lane(event.choice).finished = True
        elif isinstance(event, _PRINTED):
            lane = self._lane(event.choice)
            lane.render(event)
            live = self._live
            if live is not None and live is not lane and live.finished:
                self._next()
            if lane is self._live:
                self._drain(lane)
        elif isinstance(event, PathDone):
            self.note(path_note(event, choice=self._label_first))

    def _handoff(self, event: Handoff) -> None:
        self.handoffs.append(event)
        shown = any(lane.index in self._shown for lane in self._lanes.values())
        self.note(handoff_note(event, content_shown=shown))

    def note(self, text: str) -> None:
        """``text`` as a line of its own on ``notes``, between the reply's text before and
        after it: a handoff, a resume, a warning; never in the middle of a printed line when
        both go to one terminal (or ``2>&1``)."""
        notes = self._notes
        if notes is None:
            return
        self._out.flush()
        if not self._out.at_line_start and self._out.shares_place_with(notes):
            notes.stream.write("\n")  # the same terminal or file: the note on its own line
            self._out.at_line_start = True
        notes.note(text)

    def _restart(self) -> None:
        """A new generation: what was printed stays (a terminal cannot take it back), marked
        as replaced; the new one is printed as if nothing had been."""
        if self._shown:
            self._out.write("\n[restarted]\n")
            self._out.flush()
        self._lanes.clear()
        self._live = None
        self._shown.clear()

    def close(self) -> None:
        """Print every choice not printed yet (the stream ended or was interrupted), and
        what arrived for a choice after its turn was over."""
        self._live = None
        for index in sorted(self._lanes):
            lane = self._lanes[index]
            if index not in self._shown:
                self._show(lane)
            elif lane.parts:
                self._out.write(f"\n\n[choice {index}, continued]")
                self._drain(lane)

    def _lane(self, index: int) -> _Lane:
        lane = self._lanes.get(index)
        if lane is None:
            lane = self._lanes[index] = _Lane(index)
            if self._live is None:  # the first choice, or every one before has finished
                self._show(lane)
                self._live = lane
        return lane

    def _next(self) -> None:
        self._live = None
        for index in sorted(self._lanes):
            if index in self._shown:
                continue
            lane = self._lanes[index]
            self._show(lane)
            if not lane.finished:
                self._live = lane
                return

    def _show(self, lane: _Lane) -> None:
        if self._shown:
            self._out.write(f"\n\n[choice {lane.index}]\n")
        elif self._label_first:
            self._out.write(f"[choice {lane.index}]\n")
        self._shown.add(lane.index)
        self._drain(lane)

    def _drain(self, lane: _Lane) -> None:
        if lane.parts:
            self._out.write("".join(lane.parts))
            lane.parts.clear()
            self._out.flush()


# ---------------------------------------------------------------------------- summary


def _stop(choice: Choice) -> str:
    """``length (choice 0, finish reason "max_tokens")``: the unified stop, and the API's own
    word for it when that is another."""
    raw = choice.finish_reason
    if raw is None:
        return f"- (choice {choice.index}, no finish reason)"
    stop = choice.stop or "other"
    said = "" if raw == stop else f', finish reason "{raw}"'
    return f"{stop} (choice {choice.index}{said})"


def tokens(reply: Reply) -> tuple[int | None, int | None, int | None]:
    """Prompt, completion and total tokens, whatever the format calls them (Responses and
    Anthropic say ``input_tokens`` / ``output_tokens``; Anthropic sends no total); of every
    upstream together when the reply moved between them."""
    return _tokens_of(reply.total_usage if reply.segments else reply.usage)


def _tokens_of(u: Usage | None) -> tuple[int | None, int | None, int | None]:
    if u is None:
        return None, None, None
    prompt = u.prompt_tokens if u.prompt_tokens is not None else getattr(u, "input_tokens", None)
    completion = u.completion_tokens
    if completion is None:
        completion = getattr(u, "output_tokens", None)
    total = u.total_tokens
    if total is None and isinstance(prompt, int) and isinstance(completion, int):
        total = prompt + completion
    return prompt, completion, total


def usage_text(usage: Usage) -> str:
    """``prompt 12, completion 30, total 42``, leaving out what the server did not say."""
    named = zip(("prompt", "completion", "total"), _tokens_of(usage), strict=True)
    parts = [f"{name} {count}" for name, count in named if count is not None]
    return ", ".join(parts) or "none of the counts"


def _usage(reply: Reply) -> str | None:
    """The reply's usage line: every upstream's together when it moved between them."""
    if any(s.usage is not None or s.usage_estimate is not None for s in reply.segments):
        total = reply.total_usage
        if total is None:
            return None
        return f"{usage_text(total)} (all upstreams{', estimated in part' * total.estimated})"
    return usage_text(reply.usage) if reply.usage is not None else None


def _segment(number: int, segment: Segment) -> str:
    model = f" ({segment.model})" if segment.model else ""
    requests = f"{segment.requests} request{'' if segment.requests == 1 else 's'}"
    usage = f", usage {usage_text(segment.usage)}" if segment.usage is not None else ""
    estimate = segment.usage_estimate
    if estimate is not None:  # no final count came: what it cost, estimated
        counted = Usage(prompt_tokens=estimate.input_tokens,
                        completion_tokens=estimate.output_tokens)
        usage = f", usage {usage_text(counted)} (estimated)"
    return (f"{number}. {segment.upstream}{model}: characters {segment.start}-{segment.end},"
            f" {requests}{usage}; {segment.ended}")


def segment_lines(reply: Reply) -> list[str]:
    """One line per upstream that had a part in the reply (none without fallbacks): who,
    which characters of choice 0's text, the requests and usage there, and how it ended."""
    return [_segment(i, s) for i, s in enumerate(reply.segments, 1)]


def _rate(count: int, span: float) -> str:
    if count >= MIN_RATE_TOKENS and span >= MIN_RATE_SECONDS:
        return f"{count / span:.0f}"
    if span < MIN_RATE_SECONDS:
        return f"- ({count} tokens in {span * 1000:.1f} ms: too short to measure)"
    return f"- (only {count} tokens)"


def summary(
    reply: Reply, stream: ReplyStream | None, out: Output, survived: str | None = None, *,
    other_format: int = 0,
) -> None:
    """The lines after a reply: outcome, how each choice stopped, usage, timing and counters
    (``stream``: a live stream's; else the reply's own, for a replay, where ``other_format``
    counts the frames of another wire format than the one read)."""
    out.write("\n\n")
    out.write(f"outcome:        {reply.outcome.value if reply.outcome else 'unknown'}\n")
    for choice in reply.choices:
        out.write(f"stop:           {_stop(choice)}\n")
    if reply.error is not None:
        out.write(f"error:          {reply.error.message}\n")
    usage = _usage(reply)
    if usage is not None:
        out.write(f"usage:          {usage}\n")
    if stream is not None:
        stats = stream.stats
        first = stats.time_to_first_token
        if first is not None:
            out.write(f"first token:    {first * 1000:.1f} ms\n")
        completion = tokens(reply)[1]
        if stats.duration is not None and first is not None and completion:
            out.write(f"tokens/s:       {_rate(completion, stats.duration - first)}\n")
        counts = (stats.bytes, stats.events, stats.heartbeats, stats.skipped_frames)
    else:
        counts = (reply.bytes, reply.events, reply.heartbeats, reply.skipped_frames)
    other = f", of another format {other_format}" if other_format else ""
    out.write(f"bytes/events:   {counts[0]} / {counts[1]}")
    out.write(f" (heartbeats {counts[2]}, skipped {counts[3]}{other})\n")
    for i, line in enumerate(segment_lines(reply)):
        out.write(f"{'segments:' if i == 0 else '':<16}{line}\n")
    if survived is not None:
        out.write(f"survived:       {survived}\n")
    # The cause of a drop that was resumed is told by ``survived``; only a bad end needs it.
    bad_end = reply.outcome in (Outcome.TRUNCATED, Outcome.FAILED, None)
    if stream is not None and stream.cause is not None and bad_end:
        out.write(f"cause:          {type(stream.cause).__name__}: {stream.cause}\n")
    out.flush()
