"""Usage and cost on every outcome, sans-IO: an estimate when the server reported no usage, and
the cost of a reply from prices the caller gives.

A stream that is cancelled, cut, or served by a server that never sends ``usage`` ends with
``reply.usage`` ``None``. The client's :class:`UsageLedger` settles every reply when its
stream ends: it fills ``reply.usage_estimate`` (a :class:`~fluxstream.reply.UsageEstimate`,
always marked estimated) in that case, and ``reply.cost`` when the caller priced the model.
It remembers the input tokens the server reported per content key (bounded), so a reply of a
content key whose earlier reply reported them (a retry of the same request by the caller, a
second stream resumed from a token) gets them in its estimate.

No price table is shipped: prices change. The caller passes :class:`ModelPrice` per model
(``AsyncClient(prices={"gpt-4o-mini": ModelPrice(input="0.15", output="0.60")})``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from .reply import Reply, UsageEstimate

__all__ = ["ModelPrice", "UsageLedger", "estimate_output_tokens", "reply_cost"]

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


@dataclass(frozen=True)
class ModelPrice:
    """Prices of one model per million tokens, in the caller's currency (``Decimal``, or
    anything ``Decimal`` takes: ``"0.15"``). ``cached_input`` prices the input tokens the
    server read from its prompt cache (``usage.prompt_tokens_details.cached_tokens``);
    ``None``: as ``input``."""

    input: Decimal | str | int
    output: Decimal | str | int
    cached_input: Decimal | str | int | None = None

    def cost(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0) -> Decimal:
        cached = min(max(cached_tokens, 0), input_tokens)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = (
            Decimal(input_tokens - cached) * Decimal(self.input)
            + Decimal(cached) * Decimal(cached_price)
            + Decimal(output_tokens) * Decimal(self.output)
        )
        return total / _MILLION


def reply_cost(reply: Reply, prices: Mapping[str, ModelPrice], model: str | None) -> Decimal | None:
    """The cost of ``reply`` from its usage (or its estimate), priced by the reply's own model
    or else the requested ``model``; ``None`` without a price or any token count."""
    price = prices.get(reply.model or "") or prices.get(model or "")
    if price is None:
        return None
    usage = reply.usage
    if usage is not None:
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens if details is not None else None) or 0
        return price.cost(usage.prompt_tokens or 0, usage.completion_tokens or 0, cached)
    estimate = reply.usage_estimate
    if estimate is None:
        return None
    return price.cost(estimate.input_tokens or 0, estimate.output_tokens)


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
        """The stream of ``reply`` ended: its usage estimate (if no usage came) and its cost
        (if its model is priced); remembers its input tokens if they were reported.
        ``content_events``: content deltas received; ``model``: the requested model."""
        key = reply.content_key
        usage = reply.usage
        estimate = reply.usage_estimate
        if usage is not None:
            if usage.prompt_tokens is not None and key:
                self._inputs[key] = usage.prompt_tokens
                self._inputs.move_to_end(key)
                if len(self._inputs) > REMEMBERED_KEYS:
                    self._inputs.popitem(last=False)
        elif estimate is None:
            estimate = UsageEstimate(
                output_tokens=estimate_output_tokens(content_events, content_characters(reply)),
                input_tokens=self._inputs.get(key) if key else None,
            )
        if not self.prices:
            return estimate, None
        priced = reply.model_copy(update={"usage_estimate": estimate})
        return estimate, reply_cost(priced, self.prices, model)
