"""Usage and cost on every outcome, sans-IO: an estimate when the server reported no usage, and
the cost of a reply from prices the caller gives.

A stream that is cancelled, cut, or served by a server that never sends ``usage`` ends with
``reply.usage`` ``None``, or with only a snapshot the format sent before the end
(``reply.usage_partial``: Anthropic's ``message_start`` says ``output_tokens: 1``,
Gemini's running ``usageMetadata`` counts the output so far). The client's
:class:`UsageLedger` settles every reply when its stream ends: it fills
``reply.usage_estimate`` (a :class:`~fluxstream._reply.UsageEstimate`, always marked estimated)
in those cases, and ``reply.cost`` when the caller priced the model. It remembers the input
tokens the server reported per content key (bounded), so a reply of a content key whose
earlier reply reported them (a retry of the same request by the caller, a second stream
resumed from a token) gets them in its estimate.

A reply served by several upstreams (:class:`~fluxstream._upstream.Upstream`) is billed per
part: each :class:`~fluxstream._reply.Segment` carries its reported usage or, when none was
final, its estimate (:func:`estimate_part`), and the cost adds the parts up, each priced by
its own model.

No price table is shipped: prices change. The caller passes :class:`ModelPrice` per model
(``AsyncClient(prices={"gpt-4o-mini": ModelPrice(input="0.15", output="0.60")})``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from ._reply import Reply, Usage, UsageEstimate

__all__ = [
    "ModelPrice", "UsageLedger", "content_characters", "estimate_output_tokens",
    "estimate_part", "reply_cost",
]

#: One token per delta while deltas average at most this many characters: servers that stream
#: one token per chunk (llama.cpp, vLLM, OpenAI) send deltas of one token, which is a few
#: characters; longer deltas mean a server that batches tokens (Anthropic's text deltas).
ONE_TOKEN_DELTA_CHARS = 8.0
#: Characters per token where deltas batch tokens: the usual rule of thumb for English text.
CHARS_PER_TOKEN = 4.0
#: Content keys whose input tokens are remembered (the oldest is forgotten first).
REMEMBERED_KEYS = 4096
_MILLION = Decimal(1_000_000)


def estimate_output_tokens(content_events: int, characters: int) -> int:
    """Output tokens estimated from ``content_events`` deltas carrying ``characters`` code
    points (text, reasoning, refusal and tool-call arguments of every choice).

    The heuristic: a server that streams one token per delta is counted exactly (one token a
    delta) while its deltas average at most :data:`ONE_TOKEN_DELTA_CHARS` characters; past
    that, deltas batch several tokens, and the count is the characters divided by
    :data:`CHARS_PER_TOKEN` (never fewer than the deltas). Within 10% of the server's own
    count on llama.cpp (tests/integration); tokenizers differ, so it is an estimate.
    """
    if content_events <= 0:
        return 0
    if characters <= ONE_TOKEN_DELTA_CHARS * content_events:
        return content_events
    return max(content_events, math.ceil(characters / CHARS_PER_TOKEN))


def estimate_part(
    content_events: int, characters: int, snapshot: Usage | None
) -> UsageEstimate:
    """The estimated tokens of one part of a reply (an upstream's segment, or a whole stream)
    that ended without a final usage: ``content_events`` deltas carrying ``characters`` code
    points, and the ``snapshot`` it reported before its end, if any. Its output never counts
    fewer than the snapshot had (a running count is true so far; Anthropic's placeholder 1
    is not more than any content); its input is the snapshot's (known at the start)."""
    output = estimate_output_tokens(content_events, characters)
    inputs = None
    if snapshot is not None:
        output = max(output, snapshot.completion_tokens or 0)
        inputs = snapshot.prompt_tokens
    return UsageEstimate(output_tokens=output, input_tokens=inputs)


def _price(value: Decimal | str | int | None, name: str) -> None:
    if value is None:
        return
    try:
        number = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError(f"ModelPrice {name} is a decimal number, not {value!r}") from None
    if not number.is_finite() or number < 0:
        raise ValueError(f"ModelPrice {name} is a finite price of 0 or more, not {value!r}")


@dataclass(frozen=True)
class ModelPrice:
    """Prices of one model per million tokens, in the caller's currency (``Decimal``, or
    anything ``Decimal`` takes: ``"0.15"``). ``cached_input`` prices the input tokens the
    server read from its prompt cache (``usage.prompt_tokens_details.cached_tokens``);
    ``None``: as ``input``. A price is a finite number, 0 or more (``ValueError``
    otherwise), so no cost is ever negative."""

    input: Decimal | str | int
    output: Decimal | str | int
    cached_input: Decimal | str | int | None = None

    def __post_init__(self) -> None:
        _price(self.input, "input")
        _price(self.output, "output")
        _price(self.cached_input, "cached_input")

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Decimal:
        """The cost of these counts; a negative count (from no format: they drop them, but a
        reply may be built by hand or read back from anywhere) counts as none."""
        input_tokens, output_tokens = max(input_tokens, 0), max(output_tokens, 0)
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = (
            Decimal(input_tokens - cached) * Decimal(self.input)
            + Decimal(cached) * Decimal(cached_price)
            + Decimal(output_tokens) * Decimal(self.output)
        )
        return total / _MILLION


def _part_cost(
    price: ModelPrice, usage: Usage | None, estimate: UsageEstimate | None
) -> Decimal | None:
    """The cost of one part: from its estimate when it has one (it is set only when no final
    count came; the snapshot's cached input still counts as cached), else from its usage."""
    details = usage.prompt_tokens_details if usage is not None else None
    cached = (details.cached_tokens if details is not None else None) or 0
    if estimate is not None:
        return price.cost(estimate.input_tokens or 0, estimate.output_tokens, cached)
    if usage is None:
        return None
    return price.cost(usage.prompt_tokens or 0, usage.completion_tokens or 0, cached)


def reply_cost(reply: Reply, prices: Mapping[str, ModelPrice], model: str | None) -> Decimal | None:
    """The cost of ``reply`` from its usage (or its estimate), priced by the reply's own model
    or else the requested ``model``; ``None`` without a price or any token count.

    A reply served by several upstreams is the sum of its segments' costs, each priced by the
    segment's model (else as above); ``None`` when a segment with tokens to bill has no
    price (a partial sum would read as the whole bill)."""
    fallback = prices.get(reply.model or "") or prices.get(model or "")
    billed = [s for s in reply.segments if s.usage is not None or s.usage_estimate is not None]
    if billed:
        total = Decimal(0)
        for segment in billed:
            price = prices.get(segment.model or "") or fallback
            part = None if price is None else _part_cost(
                price, segment.usage, segment.usage_estimate)
            if part is None:
                return None
            total += part
        return total
    if fallback is None:
        return None
    return _part_cost(fallback, reply.usage, reply.usage_estimate)


def content_characters(reply: Reply) -> int:
    """Code points of content in ``reply``: what its output tokens were spent on."""
    total = 0
    for choice in reply.choices:
        total += len(choice.text) + len(choice.reasoning or "") + len(choice.refusal or "")
        for call in choice.tool_calls:
            total += len(call.arguments)
    return total


class UsageLedger:
    """One client's settling of replies (see the module docstring). Not thread-safe; a
    client's streams run in one event loop."""

    __slots__ = ("_inputs", "prices")

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        self.prices: dict[str, ModelPrice] = dict(prices or {})
        self._inputs: OrderedDict[str, int] = OrderedDict()

    def settle(
        self, reply: Reply, content_events: int, model: str | None
    ) -> tuple[UsageEstimate | None, Decimal | None]:
        """The stream of ``reply`` ended: its usage estimate (if no final usage came) and its cost
        (if its model is priced); remembers its input tokens if they were reported.
        ``content_events``: content deltas received; ``model``: the requested model."""
        return self.settle_parts(
            reply.content_key, reply.usage, reply.usage_estimate, reply.usage_partial,
            content_events, model, lambda: reply,
        )

    def settle_parts(
        self, key: str, usage: Usage | None, estimate: UsageEstimate | None, partial: bool,
        content_events: int, model: str | None, reply: Callable[[], Reply],
    ) -> tuple[UsageEstimate | None, Decimal | None]:
        """:meth:`settle`, from the parts of the reply it always reads (its content key,
        usage, estimate and whether the usage is partial); ``reply()`` makes the whole reply,
        asked only to estimate the content or to price it. Every stream's end settles: most
        have their final usage and no prices, and need no snapshot of the reply for it."""
        if usage is not None and usage.prompt_tokens is not None and key:
            self._inputs[key] = usage.prompt_tokens  # a snapshot's input count is true too
            self._inputs.move_to_end(key)
            if len(self._inputs) > REMEMBERED_KEYS:
                self._inputs.popitem(last=False)
        whole: Reply | None = None
        if estimate is None and (usage is None or partial):
            whole = reply()
            estimate = estimate_part(content_events, content_characters(whole), usage)
            if estimate.input_tokens is None and key:
                estimate = estimate.model_copy(update={"input_tokens": self._inputs.get(key)})
        if not self.prices:
            return estimate, None
        priced = (whole or reply()).model_copy(update={"usage_estimate": estimate})
        return estimate, reply_cost(priced, self.prices, model)
