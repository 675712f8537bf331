"""The AI SDK's UI message stream: a reply's events as the chunks ``useChat`` reads.

Vercel's AI SDK (the ``ai`` npm package) renders a chat with ``useChat`` (React, Vue, Svelte).
It reads a response of SSE events whose ``data:`` is one JSON *chunk*, marked by the header
``x-vercel-ai-ui-message-stream: v1`` and closed by ``data: [DONE]``. This module is that
protocol as a second encoding of the events every fluxstream stream yields, so a page built
on ``useChat`` renders a fluxstream reply with no adapter of its own.

How the events map (one choice is the message: choice 0 unless told otherwise)::

    (start of the response)      start, start-step
    TextDelta                    text-start (first of a run), text-delta
    ReasoningDelta               reasoning-start (first of a run), reasoning-delta
    RefusalDelta                 a text part of its own (the refusal is what the user reads)
    ToolCallDelta                tool-input-start (once the name is known), tool-input-delta
    ToolCallDone                 tool-input-available (input: the parsed arguments), or
                                 tool-input-error when they are not JSON
    Reset                        reset-step, start-step (the new generation replaces the old)
    ErrorEvent                   error
    End done / finished          finish-step, finish (finishReason from the choice's Finish)
    End truncated                finish-step, finish with finishReason "interrupted"
    End failed                   error (unless one was sent), finish-step, finish "error"
    End cancelled                abort
    (the response's end)         data: [DONE]

A run of one kind (text, reasoning, refusal) is one part; a part is ended (``text-end``,
``reasoning-end``) when another kind or a tool call begins, so the page shows the parts in the
order the model produced them. Usage and the outcome travel as the finish's
``messageMetadata`` (``{"outcome": ..., "usage": {...}}``).

Why offsets are checked here too: a reply's deltas carry the number of code points already
delivered on their channel, so a delta that repeats delivered text (a relay replay that
overlaps) is cut to what is new, and the page never shows a character twice. It costs one
comparison per delta.

Why errors are masked by default: an upstream's error message is written for the operator
(it may name the account, the model's limits, sometimes part of a key), not for the browser.
``error_text`` chooses what the page is told; the default says only that an error occurred,
as the AI SDK's own server helpers do.
"""

from __future__ import annotations

from ._ai_sdk import (
    DONE,
    FINISH_REASONS,
    UI_MESSAGE_STREAM_HEADERS,
    UIMessageStream,
    UIMessageStreamEncoder,
    chat_messages,
    masked_error,
)

__all__ = [
    "DONE",
    "FINISH_REASONS",
    "UI_MESSAGE_STREAM_HEADERS",
    "UIMessageStream",
    "UIMessageStreamEncoder",
    "chat_messages",
    "masked_error",
]
