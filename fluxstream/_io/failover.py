"""Carrying a stream over to the next upstream, before or after its content started.

:class:`Route` is a stream's ordered upstreams (the client's own first, then ``fallbacks``)
with the segments each served; :func:`hand_off` moves a :class:`~fluxstream._io.channel.Channel`
to the next upstream that answers:

* before any content nothing was shown: the request, translated into that upstream's API
  (:func:`fluxstream.apis.portable.convert_body`), is simply sent there;
* after content the reply goes on there: the delivered text is sent as the assistant's partial
  answer the way that API continues one (its :meth:`~fluxstream.apis.Api.continuation_body`:
  Anthropic's prefill, the ``prefix`` flag of Chat Completions servers), and the parser, now
  reading that API's wire format from the offsets delivered so far, cuts the echo; offsets
  stay contiguous, so ``buf[offset:]`` never shows a character twice; where the API has no
  prefill (OpenAI's Responses API) the text goes as an assistant turn followed by a short
  instruction to go on from exactly where it stopped;
* a reply that cannot be continued (cut inside a tool call's arguments, several choices) is
  restarted there, announced by a ``Reset``.

A continuation asks for what is left of the request's length cap
(:class:`~fluxstream._core.length_budget.LengthBudget`, the stream's one count of it), and
never more than that upstream's own ``max_tokens``; :func:`end_at_length` ends a reply whose
cap is spent, ``finished`` with stop ``length``, instead of asking.

Each segment carries its usage, or its estimate when it delivered content without a final
count (:func:`fluxstream._usage.estimate_part`), so the bill of a reply that moved adds up.

*When* to move is not decided here: the reader asks
:meth:`~fluxstream._core.recovery.Recovery.decide` (the upstream's own retries and resume
strategies come first, as without fallbacks; a hand-off is what happens when they are spent)
and calls this module to perform a ``hand_off``, a ``continue_here`` or an ``end_at_length``.
The pure rules (which failures move on, a segment's kind) are :mod:`fluxstream._core.failover`'s.
Reasoning is never carried over (see :mod:`fluxstream.apis.portable`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._core.error_hold import ErrorHold
from .._core.failover import FAILOVER_ERRORS, CoolDown, may_fail_over, reason_of, segment_end
from .._core.length_budget import LengthBudget
from .._events import Event, Handoff
from .._parser import StreamParser
from .._reply import Outcome, Segment, SegmentEnd
from ..apis import Api, ApiFeatureError
from ..apis.portable import convert_body
from ..errors import APIStatusError, FluxstreamError, one_line, show_key
from .attempt import Attempt, RequestSpec
from .channel import Channel

__all__ = [
    "Route", "Target", "continue_here", "end_at_length", "hand_off", "moves_on", "start_on",
]

logger = logging.getLogger("fluxstream")

#: A segment's kind by the reply's outcome, when the stream ended on it.
_BY_OUTCOME = {
    Outcome.DONE: SegmentEnd.DONE, Outcome.FINISHED: SegmentEnd.DONE,
    Outcome.TRUNCATED: SegmentEnd.TRUNCATED, Outcome.CANCELLED: SegmentEnd.CANCELLED,
    Outcome.FAILED: SegmentEnd.FAILED,
}
#: Connects an upstream before content, the way the stream's first request is connected
#: (raced against the next upstream with ``hedge_after``): the attempt and the events to
#: deliver first.
Connect = Callable[[], Awaitable[tuple[Attempt, list[Event]]]]


@dataclass(frozen=True)
class Target:
    """One upstream as a stream uses it: its name, API, model and length cap overrides, and
    how a request body of its API becomes a request sent there (with its URL, key and
    headers)."""

    label: str
    api: Api
    model: str | None
    max_tokens: int | None
    request: Callable[[dict[str, Any]], RequestSpec]


class Route:
    """A stream's upstreams in order, the one serving now, and the segments so far."""

    def __init__(
        self,
        targets: Sequence[Target],
        body: dict[str, Any],
        *,
        cooldown: CoolDown | None,
        per_upstream_attempts: int,
        min_overlap: int,
        prefix_flag: dict[str, object],
        hedge_after: float | None = None,
    ) -> None:
        if not targets:
            raise ValueError("a route needs at least one upstream")
        self.targets = tuple(targets)
        self.index = 0
        #: The request as the first upstream's API has it: what every other one translates.
        self.body = body
        self.cooldown = cooldown
        self.per_upstream_attempts = per_upstream_attempts
        self.min_overlap = min_overlap
        self.prefix_flag = prefix_flag
        #: Seconds without content before the next upstream is asked too (see
        #: :mod:`fluxstream._io.hedge`; ``None``: no hedging).
        self.hedge_after = hedge_after
        #: No upstream is left to move to (the last one's segment is closed).
        self.exhausted = False
        #: The latest failure of a request to a fallback: what a stream that found no
        #: upstream left raises (the first upstream's failure is its cause).
        self.last_error: BaseException | None = None
        #: Handoffs made but not delivered yet: a hedge moved the route, then its request
        #: failed too (raised, not returned); the next events delivered start with them.
        self.undelivered: list[Event] = []
        #: A read's error event, held back from the reply while an upstream is left to move
        #: to (the stream's parser runs each read through it), until the reader decides.
        self.hold = ErrorHold()
        self._finished = False
        self._done: list[Segment] = []
        self._start = 0
        #: The stream's channel (its clocks count each segment's content deltas) and the
        #: count of its length cap, which also reads each segment's output: see :meth:`attach`.
        self._channel: Channel | None = None
        self._budget = LengthBudget(None)

    @property
    def length_cap(self) -> int | None:
        """The request's length cap, as the first upstream's API keeps it."""
        return self.targets[0].api.length_cap(self.body)

    def attach(self, channel: Channel) -> None:
        """The stream's channel, once, before anything is read: each segment's output is
        read from its count of the length cap (a resume token's reply counts as spent)."""
        self._channel = channel
        self._budget = channel.recovery.budget
        self._start = len(channel.parser.reply.text)  # a resumed reply's text came before

    def _content_events(self) -> int:
        return self._channel.progress.content_events if self._channel is not None else 0

    @property
    def current(self) -> Target:
        return self.targets[self.index]

    def first(self, now: float) -> Target:
        """The upstream to ask first: the first that is not cooling down (or, when all are,
        the first: trying is better than failing unasked)."""
        cooldown = self.cooldown
        if cooldown is not None:
            for i, target in enumerate(self.targets):
                if not cooldown.cooling(target.label, now):
                    for skipped in self.targets[:i]:
                        self._skipped(skipped)
                    self.index = i
                    break
        return self.current

    def body_for(self, target: Target) -> dict[str, Any]:
        """The request for ``target``: translated into its API, with its own overrides."""
        body = convert_body(self.body, self.targets[0].api, target.api)
        if target.model is not None:
            body["model"] = target.model
        if target.max_tokens is not None:
            body = target.api.with_length_cap(body, target.max_tokens)
        if target is not self.targets[0]:
            target.api.ask_usage(body)
        body["stream"] = True
        return body

    def model_of(self, target: Target) -> str | None:
        model = target.model or self.body.get("model")
        return model if isinstance(model, str) else None

    # ------------------------------------------------------------------ segments

    def _skipped(self, target: Target) -> None:
        logger.info("upstream %s skipped: cooling down", target.label)
        self.noted(target, SegmentEnd.COOLING_DOWN, "", 0)

    def close_segment(
        self, parser: StreamParser, ended: str, requests: int, kind: SegmentEnd | None = None,
    ) -> None:
        """The serving upstream's part ends (``ended``: why; ``kind``: how, else worked out
        from the reason and whether it delivered content, see :func:`segment_end`)."""
        reply = parser.reply
        target = self.current
        end = len(reply.choices[0].text) if reply.choices else 0
        events = self._content_events()
        output, usage, estimate = self._budget.part(reply, events)
        delivered = end > self._start or estimate is not None or (usage is not None and output)
        self._done.append(Segment(
            upstream=target.label, api=target.api.name, model=self.model_of(target),
            start=self._start, end=max(end, self._start),
            kind=segment_end(ended, bool(delivered)) if kind is None else kind,
            detail=ended, usage=usage, usage_estimate=estimate, requests=requests,
            request_id=None if parser.rate_limits is None else parser.rate_limits.request_id,
        ))
        self._budget.close_part(reply, events, output if delivered else 0)
        self._start = end
        parser.segments = list(self._done)

    def noted(self, target: Target, kind: SegmentEnd, detail: str, requests: int) -> None:
        """A segment for ``target``, which delivered nothing while another upstream serves
        (a hedge that lost its race or failed, the one it beat, one cooling down)."""
        self._done.append(Segment(
            upstream=target.label, api=target.api.name, model=self.model_of(target),
            start=self._start, end=self._start, kind=kind, detail=detail, requests=requests,
        ))

    def take_undelivered(self) -> list[Event]:
        events, self.undelivered = self.undelivered, []
        return events

    def peek(self, now: float) -> Target | None:
        """The upstream :meth:`advance` would move to at ``now``, without moving."""
        for target in self.targets[self.index + 1:]:
            if self.cooldown is None or not self.cooldown.cooling(target.label, now):
                return target
        return None

    def take_over(self, target: Target) -> None:
        """``target``, further on, serves from now on (a hedge won its race); those between
        were cooling down when it was asked: recorded as skipped."""
        index = self.targets.index(target, self.index + 1)
        for skipped in self.targets[self.index + 1:index]:
            self._skipped(skipped)
        self.index = index

    def drop(self, target: Target) -> None:
        """``target``, further on, was asked already and failed (a hedge): this stream does
        not ask it again."""
        index = self.targets.index(target, self.index + 1)
        self.targets = self.targets[:index] + self.targets[index + 1:]

    def failed(self, now: float) -> None:
        """The serving upstream failed (for the circuit breaker)."""
        if self.cooldown is not None:
            self.cooldown.failed(self.current.label, now)

    def advance(self, now: float) -> Target | None:
        """The next upstream not cooling down (those skipped are recorded), or ``None``."""
        while self.index + 1 < len(self.targets):
            self.index += 1
            target = self.current
            if self.cooldown is not None and self.cooldown.cooling(target.label, now):
                self._skipped(target)
                continue
            return target
        return None

    def finish(self, parser: StreamParser, requests: int) -> None:
        """The stream ended: the serving upstream's segment ends with the reply's outcome."""
        if self._finished:
            return
        self._finished = True
        if self.exhausted:
            parser.segments = list(self._done)
            return
        reply = parser.reply
        outcome = reply.outcome
        kind = _BY_OUTCOME.get(outcome, SegmentEnd.TRUNCATED) if outcome else SegmentEnd.TRUNCATED
        detail = "" if outcome is Outcome.DONE else reply.end_reason or "ended"
        self.close_segment(parser, detail, requests, kind)
        if self.cooldown is not None and parser.saw_content:
            self.cooldown.succeeded(self.current.label)


def moves_on(channel: Channel, error: BaseException) -> bool:
    """Whether a request of ``channel`` that failed with ``error`` may be asked of another
    upstream (:func:`~fluxstream._core.failover.may_fail_over`, by the statuses the retry
    policy and the request's API retry)."""
    statuses = channel.recovery.retry.retry_status | channel.spec.api.retry_statuses
    return may_fail_over(error, statuses)


def start_on(channel: Channel, route: Route, now: float) -> None:
    """Before the first request: when the first upstream is cooling down, the stream starts
    on the first one that is not (nothing was read: only the request and the wire format
    change)."""
    target = route.first(now)
    if route.index == 0:
        return
    body = route.body_for(target)
    channel.parser.switch_format(target.api.name)
    channel.spec = target.request(body)


async def hand_off(
    channel: Channel, route: Route, reason: str, connect: Connect | None = None,
) -> tuple[Attempt, list[Event]] | None:
    """Move ``channel`` to the next upstream that answers (after the serving one failed for
    ``reason``); the attempt and the events to deliver first (a :class:`Handoff` per upstream
    tried, and a ``Reset`` where the reply starts over), or ``None`` when none is left.

    Before content the next upstream is asked by ``connect`` when given (the reader's own
    first connect: hedged against the upstream after it with ``hedge_after``). A
    continuation asks for what is left of the length cap (the reader has decided that
    something is: see :func:`end_at_length`). A request the next upstream's API cannot be
    asked (a feature it lacks) ends the route there; with none left, an error event is no
    longer held back (it ends the reply, as without fallbacks)."""
    try:
        moved = await _hand_off(channel, route, reason, connect)
    except FluxstreamError as exc:
        logger.warning("failover refused: %s", reason_of(exc))
        route.exhausted = True
        return None
    if moved is None:
        route.hold.active = False
    return moved


async def _hand_off(
    channel: Channel, route: Route, reason: str, connect: Connect | None,
) -> tuple[Attempt, list[Event]] | None:
    parser = channel.parser
    recovery = channel.recovery
    events: list[Event] = route.take_undelivered()
    while True:
        now = time.monotonic()
        route.failed(now)
        route.close_segment(parser, reason, recovery.attempts)
        continuing = parser.saw_content and parser.continuable()
        target = route.advance(now)
        if target is None:
            route.exhausted = True
            return None
        await channel.close(drain=False)
        offset = len(parser.reply.text)
        body = route.body_for(target)
        cap = recovery.budget.continuation_cap(
            parser.reply, channel.progress.content_events, target.max_tokens
        ) if continuing else None
        parser.switch_format(target.api.name)
        channel.spec = target.request(body)
        channel.resuming_by = None
        recovery.next_upstream(now)
        if not parser.saw_content:
            channel.progress.start(now)  # its own first-token deadline
        asked = body if cap is None else target.api.with_length_cap(body, cap)
        send, how = _continuation(parser, route, target, asked)
        restarted = how == "restart"
        events.append(Handoff(
            parser.content_key, target.label, target.api.name, route.model_of(target),
            reason, offset, restarted,
        ))
        logger.warning(
            "stream %s: %s failed (%s) at offset %d; %s on %s",
            show_key(parser.content_key), route.targets[route.index - 1].label
            if route.index else "?", one_line(reason), offset,
            "restarting" if restarted else ("continuing" if send is not None else "asking"),
            target.label,
            # a handler tells this line by its fields, not its wording (the CLI shows the
            # Handoff event instead)
            extra={**channel.log_extra(), "handoff_to": target.label, "handoff_offset": offset},
        )
        if restarted:
            recovery.restarts += 1
            events += parser.reset(recovery.restarts, f"restarted on {target.label}")
            recovery.budget.restarted()
        try:
            if how == "ask" and connect is not None:
                attempt, first = await connect()
                return attempt, events + first
            attempt = await _send(channel, route, asked, send, how)
        except FAILOVER_ERRORS as exc:
            route.last_error = exc
            reason = reason_of(exc)
            events += route.take_undelivered()  # a hedge that moved on, then failed too
            continue
        return attempt, events


async def continue_here(
    channel: Channel, route: Route, reason: str
) -> Attempt | None:
    """Continue the delivered text on the upstream serving it now, the way a hand-off to it
    would (:func:`_continuation`: a prefill, or an assistant turn and an instruction), asking
    for what is left of the length cap; the attempt, or ``None`` when the reply cannot be
    continued as text.

    For a reply whose own resume cannot apply there: a token of a reply another upstream
    was continuing (its ids number that continuation, not the token's request), or a
    ``Last-Event-ID`` reconnect of such a continuation that the server did not honour.
    The caller's fallbacks already allow continuing the reply on another upstream;
    continuing it where it is asks no more of the model, and keeps the upstream that
    was answering."""
    parser = channel.parser
    recovery = channel.recovery
    if not parser.continuable() or recovery.resumes >= recovery.resume.max_resumes:
        return None
    target = route.current
    body = channel.spec.body
    cap = recovery.budget.continuation_cap(
        parser.reply, channel.progress.content_events, target.max_tokens)
    if cap is not None:
        body = target.api.with_length_cap(body, cap)
    send, how = _continuation(parser, route, target, body)
    if send is None:
        return None
    await channel.close(drain=False)
    logger.warning(
        "stream %s: %s; continuing the text on %s", show_key(parser.content_key),
        one_line(reason), target.label, extra=channel.log_extra(),
    )
    recovery.resumes += 1
    channel.resuming_by = "continuation"
    return await _send(channel, route, body, send, how, fresh_budget=True)


async def end_at_length(channel: Channel, route: Route | None, reason: str) -> list[Event]:
    """The reply's length cap is spent when it would be continued (after ``reason``): no
    request, the reply ends ``finished`` with stop ``length``, as a model that reached the
    cap ends (asking for more would deliver past the cap the caller set). With a route the
    serving upstream's segment ends for ``reason`` (it failed, for the circuit breaker) and
    no upstream is left to move to. The events to deliver."""
    parser = channel.parser
    reason = one_line(reason)[:200]
    events: list[Event] = []
    if route is not None:
        events = route.take_undelivered()
        route.failed(time.monotonic())
        route.close_segment(parser, reason, channel.recovery.attempts)
        route.exhausted = True
    await channel.close(drain=False)
    logger.info(
        "stream %s: the length cap is spent (%s); the reply ends here",
        show_key(parser.content_key), reason, extra=channel.log_extra(),
    )
    return events + parser.end_at_length(f"length cap spent when {reason}"[:200])


async def _send(
    channel: Channel, route: Route, body: dict[str, Any], send: dict[str, Any] | None,
    how: str, *, fresh_budget: bool = False,
) -> Attempt:
    """Send ``send`` (``None``: ``body``) to the upstream serving now. A prefill refused
    with a 400 (Gemini: "Requests ending with a model turn are not supported"; a
    self-hosted server without prefill) is asked once more, there, with the text as an
    assistant turn and a continue instruction: the request is the same but for its last
    turn, so that turn is the likely fault, and moving on would leave an upstream that
    can continue the reply the other way."""
    try:
        return await channel.connect(body=send, fresh_budget=fresh_budget)
    except APIStatusError as exc:
        if how != "prefill" or exc.status_code != 400:
            raise
        refused = exc
    instructed, how = _continuation(channel.parser, route, route.current, body, prefill=False)
    if how != "instruction":
        raise refused
    logger.warning(
        "stream %s: %s refused the prefill (%s); asking with a continue instruction",
        show_key(channel.parser.content_key), route.current.label, reason_of(refused),
        extra=channel.log_extra(),
    )
    return await channel.connect(body=instructed, fresh_budget=fresh_budget)


def _continuation(
    parser: StreamParser, route: Route, target: Target, body: dict[str, Any], *,
    prefill: bool = True,
) -> tuple[dict[str, Any] | None, Literal["ask", "prefill", "instruction", "restart"]]:
    """The body that continues the delivered text on ``target`` (``None``: send ``body``
    as it is), and how: ``ask`` (nothing was shown), ``prefill``, ``instruction``, or
    ``restart`` (the reply must start over there instead; ``prefill=False``: not by a
    prefill).

    A prefill where the API has one (the model's next token follows the text); where it has
    none (OpenAI's Responses API), the text as an assistant turn and a user turn asking for
    the rest (:meth:`~fluxstream.apis.Api.instructed_continuation_body`): weaker, since the
    model may rephrase what the echo cut (exact overlaps only) cannot remove, but the text
    already shown stays. Only a reply no text continuation can extend (cut inside a tool
    call's arguments, several choices) starts over."""
    if not parser.saw_content:
        return None, "ask"
    if not parser.continuable():
        return None, "restart"
    api = target.api
    text = parser.begin_continuation(min_overlap=route.min_overlap)
    if api.assistant_prefill and prefill:
        flag = api.continuation_flag
        try:
            return api.continuation_body(
                body, text, dict(flag) if flag is not None else route.prefix_flag
            ), "prefill"
        except ApiFeatureError:
            pass
    try:
        return api.instructed_continuation_body(body, text), "instruction"
    except ApiFeatureError:
        return None, "restart"
