"""What the ``fluxstream`` command prints: live text, choice by choice, and the summary.

Everything printed passes through :class:`Output`, which shows control characters visibly
(``\\x1b``) instead of sending them to the terminal: a reply, a tool name, a finish reason or
an error message comes from a server or a capture, and raw escape sequences in it could retitle
the window, clear the screen or write the clipboard (OSC 52) — or hide text from the reader.
Newline and tab are kept (a reply has them); ``--raw`` opts out.
"""

from __future__ import annotations

import re
from typing import TextIO

from .. import apis
from ..events import Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDone
from ..reply import Choice, Outcome, Reply
from ..stream import ReplyStream

__all__ = [
    "FORMAT_NAMES",
    "MIN_RATE_SECONDS",
    "MIN_RATE_TOKENS",
    "LivePrinter",
    "Output",
    "json_safe",
    "summary",
    "tokens",
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
#: 600000 tokens/s), a clock tick or a late wake-up (1-15 ms) is a large share of a short span,
#: and over a few tokens the first token's own time (counted in, but before the span) skews
#: the quotient by 1/N.
MIN_RATE_TOKENS = 10
MIN_RATE_SECONDS = 0.5


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

    def write(self, text: str) -> None:
        self.stream.write(text if self.raw else visible(text))

    def flush(self) -> None:
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


class LivePrinter:
    """Prints a reply's events as they arrive, one choice after another.

    With ``n`` choices a server interleaves them delta by delta; printed as they come they are
    unreadable. So one choice is live at a time — the first that has output (choice 0 in
    practice) — and the others are kept until it finishes; then the next (by index) is printed
    with what it has so far and goes on live. Each choice after the first is labelled
    ``[choice i]``, and the first too when more than one choice was asked for (``choices``).
    """

    def __init__(self, out: Output, *, choices: int = 1) -> None:
        self._out = out
        self._label_first = choices > 1
        self._lanes: dict[int, _Lane] = {}
        self._live: _Lane | None = None
        self._shown: set[int] = set()

    def event(self, event: object) -> None:
        if isinstance(event, Finish):
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
    Anthropic say ``input_tokens`` / ``output_tokens``; Anthropic sends no total)."""
    u = reply.usage
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


def _usage(reply: Reply) -> str | None:
    """``prompt 12, completion 30, total 42``, leaving out what the server did not say."""
    if reply.usage is None:
        return None
    named = zip(("prompt", "completion", "total"), tokens(reply), strict=True)
    parts = [f"{name} {count}" for name, count in named if count is not None]
    return ", ".join(parts) or "none of the counts"


def _rate(count: int, span: float) -> str:
    if count >= MIN_RATE_TOKENS and span >= MIN_RATE_SECONDS:
        return f"{count / span:.0f}"
    if span < MIN_RATE_SECONDS:
        return f"- ({count} tokens in {span * 1000:.1f} ms: too fast to measure)"
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
    if survived is not None:
        out.write(f"survived:       {survived}\n")
    # The cause of a drop that was resumed is told by ``survived``; only a bad end needs it.
    bad_end = reply.outcome in (Outcome.TRUNCATED, Outcome.FAILED, None)
    if stream is not None and stream.cause is not None and bad_end:
        out.write(f"cause:          {type(stream.cause).__name__}: {stream.cause}\n")
    out.flush()
