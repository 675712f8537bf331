"""The formats' own kept text grows linearly with what arrives.

Two formats keep streamed text beside the assembler: the Responses format keeps each tool
call's argument fragments (its final ``.done`` value is compared with them) and the Anthropic
format keeps each thinking block's text (sent back as a ``ReasoningBlock``). Both folded
their fragments by joining *everything* every 256 fragments — quadratic, as the assembler's
fold once was (``assembly.py``): 200 000 argument deltas of 100 characters took 3.8 s in the
format alone, 400 000 took 19.5 s. Measured against the same deltas of a channel the format
does not keep (text), in the same process, so machine load cancels out; in CPU time
(``process_time``), which other processes on a loaded machine do not add to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from fluxstream.formats import _choice_state
from fluxstream.formats.anthropic_messages import AnthropicMessagesFormat
from fluxstream.formats.responses import ResponsesFormat

N = 80_000
PIECE = "x" * 400


def _seconds(run: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()  # CPU time: a loaded machine's other processes do not count
        run()
        best = min(best, time.process_time() - started)
    return best


def _responses(kind: str) -> Callable[[], None]:
    def run() -> None:
        fmt = ResponsesFormat("k")
        fmt.dispatch("response.output_item.added", {
            "output_index": 0, "item": {"type": "function_call", "call_id": "c", "name": "f"}})
        dispatch = fmt.dispatch
        event = {"output_index": 0, "content_index": 0, "delta": PIECE}
        for _ in range(N):
            dispatch(kind, event)
    return run


def _anthropic(block: dict[str, Any], delta: dict[str, Any]) -> Callable[[], None]:
    def run() -> None:
        fmt = AnthropicMessagesFormat("k")
        fmt.dispatch("content_block_start", {"index": 0, "content_block": block})
        dispatch = fmt.dispatch
        event = {"index": 0, "delta": delta}
        for _ in range(N):
            dispatch("content_block_delta", event)
        fmt.dispatch("content_block_stop", {"index": 0})
    return run


def test_responses_arguments_cost_what_text_costs() -> None:
    text = _seconds(_responses("response.output_text.delta"))
    arguments = _seconds(_responses("response.function_call_arguments.delta"))
    assert arguments < 4 * text + 0.05, (arguments, text)


def test_anthropic_thinking_costs_what_text_costs() -> None:
    text = _seconds(_anthropic({"type": "text", "text": ""},
                               {"type": "text_delta", "text": PIECE}))
    thinking = _seconds(_anthropic({"type": "thinking", "thinking": ""},
                                   {"type": "thinking_delta", "thinking": PIECE}))
    assert thinking < 4 * text + 0.05, (thinking, text)


def _count_joins(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    copied = 0

    def counting(parts: list[str]) -> str:
        nonlocal copied
        joined = "".join(parts)
        copied += len(joined)
        return joined

    monkeypatch.setattr(_choice_state, "_join", counting)
    return lambda: copied


def test_the_fold_copies_each_character_once(monkeypatch: pytest.MonkeyPatch) -> None:
    copied = _count_joins(monkeypatch)
    call = _choice_state.ToolCallState()
    for _ in range(100_000):
        call.add("xy")
    assert call.fragments is not None and "".join(call.fragments) == "xy" * 100_000
    assert copied() <= 2 * 100_000
    fmt = AnthropicMessagesFormat("k")
    fmt.dispatch("content_block_start", {"index": 0, "content_block": {"type": "thinking"}})
    before = copied()
    for _ in range(100_000):
        fmt.dispatch("content_block_delta",
                     {"index": 0, "delta": {"type": "thinking_delta", "thinking": "xy"}})
    events = fmt.dispatch("content_block_stop", {"index": 0})
    assert events[0].block["thinking"] == "xy" * 100_000  # type: ignore[attr-defined]
    assert copied() - before <= 2 * 2 * 100_000


def test_anthropic_usage_fields_are_bounded() -> None:
    """``message_delta.usage`` is merged into the usage so far, and every merge is
    normalized again: a stream whose every ``message_delta`` adds a field made each event
    cost the fields so far — 8000 events (570 KB) took 9 s. The merged usage keeps a bounded
    number of fields (real usage has under ten), the known ones still update."""
    fmt = AnthropicMessagesFormat("k")
    fmt.dispatch("message_start", {"message": {"id": "m", "usage": {"input_tokens": 1,
                                                                    "output_tokens": 1}}})
    dispatch = fmt.dispatch
    started = time.process_time()
    for i in range(3000):
        dispatch("message_delta", {"delta": {}, "usage": {f"k{i}": i, "output_tokens": i}})
    spread = time.process_time() - started
    started = time.process_time()
    for i in range(3000):
        dispatch("message_delta", {"delta": {}, "usage": {"k": i, "output_tokens": i}})
    same = time.process_time() - started
    events = dispatch("message_delta", {"delta": {}, "usage": {"output_tokens": 7}})
    usage = events[0].usage  # type: ignore[attr-defined]
    assert usage.output_tokens == 7 and usage.input_tokens == 1
    assert len(usage.model_dump()) <= 80
    assert spread < 4 * same + 0.05, (spread, same)


def test_anthropic_stop_reasons_do_not_rescan_every_block() -> None:
    """Every new stop reason closes the blocks still open, which walked every block of the
    message (up to 4096) per ``message_delta``: a stream alternating stop reasons after
    4000 empty blocks cost 4000 block visits per 64-byte event."""

    def run(blocks: int) -> float:
        fmt = AnthropicMessagesFormat("k")
        fmt.dispatch("message_start", {"message": {"id": "m"}})
        for i in range(blocks):
            fmt.dispatch("content_block_start",
                         {"index": i, "content_block": {"type": "text", "text": ""}})
        started = time.process_time()
        for i in range(4000):
            fmt.dispatch("message_delta", {"delta": {"stop_reason": "ab"[i % 2]}})
        return time.process_time() - started

    few, many = min(run(1) for _ in range(2)), min(run(4000) for _ in range(2))
    assert many < 4 * few + 0.05, (many, few)


def test_anthropic_signature_deltas_are_linear() -> None:
    """``signature_delta`` fragments were appended with ``str +=`` on the block: each copied
    the signature so far (40 000 deltas of 100 characters took 21.6 s)."""

    def run(kind: str) -> float:
        fmt = AnthropicMessagesFormat("k")
        fmt.dispatch("content_block_start",
                     {"index": 0, "content_block": {"type": "thinking", "thinking": ""}})
        event = {"index": 0, "delta": {"type": kind, kind.removesuffix("_delta"): PIECE}}
        started = time.process_time()
        for _ in range(20_000):
            fmt.dispatch("content_block_delta", event)
        events = fmt.dispatch("content_block_stop", {"index": 0})
        elapsed = time.process_time() - started
        kept = events[0].block  # type: ignore[attr-defined]
        assert len(kept["signature" if kind == "signature_delta" else "thinking"]) == (
            20_000 * len(PIECE))
        return elapsed

    thinking = min(run("thinking_delta") for _ in range(2))
    signature = min(run("signature_delta") for _ in range(2))
    assert signature < 4 * thinking + 0.05, (signature, thinking)
