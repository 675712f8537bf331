"""Limits on what a server may make the sans-IO layers hold: :class:`StreamLimits`.

Why they exist: every byte of a stream is server-controlled, and a few kinds of input cost far
more memory than their size on the wire (one 16 MiB event of a million ``{"index": i}``
choices used to take 1.6 GiB; 150k tool calls in one event, 220 MB; gzip-compressed blank lines
bypass ``max_event_bytes`` because no event is ever dispatched). Each limit turns such input
into a :class:`~fluxstream.errors.LimitExceededError` (a live stream then ends ``failed``, with
the partial reply kept) while staying far above anything a real model sends, so memory stays
within a small multiple of the configured numbers.

This module imports nothing from the package (like :mod:`fluxstream.errors`), so every layer
may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_STREAM_LIMITS", "StreamLimits"]


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """Caps on server-controlled input (defaults sized far above real replies).

    :param max_choices: distinct choices in one stream (OpenAI allows ``n`` up to 128).
    :param max_tool_calls: distinct tool calls in one choice.
    :param max_reply_chars: code points of content kept for the whole reply (text, reasoning,
        refusal and tool-call arguments of every choice, summed). 32 Mi code points is
        millions of tokens; a reply is kept in memory, so this bounds the reply's size.
    :param max_bytes_without_event: bytes the SSE decoder may consume without dispatching an
        event (blank lines, comments, fields without data). Heartbeats are a few bytes each,
        so 1 MiB is a day of one ``: ping`` per second; a stream of blank lines (cheap to
        send gzip-compressed) is cut after ~0.15 s of CPU instead of spinning forever.
    """

    max_choices: int = 128
    max_tool_calls: int = 128
    max_reply_chars: int = 32 * 1024 * 1024
    max_bytes_without_event: int = 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_choices", "max_tool_calls", "max_reply_chars",
                     "max_bytes_without_event"):
            value = getattr(self, name)
            if value.__class__ is not int or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")


#: The limits used when none are given.
DEFAULT_STREAM_LIMITS = StreamLimits()
