"""A reply's content as a test states it, rendered by the server in every API's format.

The computed replies of :mod:`.script` suit the server's own tests, which know them; a test
of an application wants its own words, tool calls, reasoning, usage and choices on the
wire. A :class:`ScriptedReply` replaces only the content: ids, framing, continuation (a
resume after a drop gets the rest of the scripted text), faults and every provider's quirks
stay the server's, so a scripted reply is exactly as hard on a client as a computed one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ScriptedChoice", "ScriptedReply", "ScriptedToolCall"]


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call: its function's name and its arguments (a JSON object)."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScriptedChoice:
    """One choice: text and reasoning as the deltas they are streamed in, tool calls, and
    the finish reason (``None``: ``tool_calls`` when there are calls, else ``stop``)."""

    text: tuple[str, ...] = ()
    reasoning: tuple[str, ...] = ()
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    finish_reason: str | None = None


@dataclass(frozen=True)
class ScriptedReply:
    """A whole reply: its choices, its usage (``None``: counted as the server counts), and
    whether an in-band error event follows the text instead of the finish."""

    choices: tuple[ScriptedChoice, ...]
    usage: Mapping[str, int] | None = None
    error: bool = False
