"""Performing a retry or resume decision: which request a dropped stream sends next.

:class:`~fluxstream._core.recovery.Recovery` (sans-IO) decides *whether* and *how* a stream
reconnects; this module carries a decision out on a :class:`~fluxstream._io.channel.Channel`:

* ``retry`` (before any content): nothing was shown, the same request again;
* ``resume`` by ``last_event_id`` (the same request with ``Last-Event-ID``, the reply checked
  before anything is spliced), ``starting_after`` (OpenAI's re-read of a stored Responses
  response), ``continuation`` (the partial answer sent back as a trailing assistant turn,
  asking for what is left of the length cap:
  :meth:`~fluxstream._core.length_budget.LengthBudget.continuation_cap`) or ``restart`` (the
  request again, announced by a ``Reset``).

A strategy refused on the way (a re-read the server cannot serve, a reconnect answered by a
whole body) hands over to the next one, as :class:`~fluxstream._core.recovery.Recovery`
decides; when that decision is to end at ``length`` (a continuation with nothing left of the
cap), nothing is sent and the reader is told so (no attempt) to end the reply.

It sits above the channel (it only calls the channel's ``connect``/``close``/``pause``) so
that the channel stays the loop over attempts and the reads, and each strategy's request is
written down in one place. What that request looks like for the stream's API (the
continuation's body, the re-read's path) is asked of the request's
:class:`~fluxstream.apis.Api`, never guessed from its URL.
"""

from __future__ import annotations

import logging

from .._core.recovery import Decision
from .._events import Event
from ..errors import APIStatusError, ContentTypeError, one_line, show_key
from .attempt import Attempt
from .channel import Channel

__all__ = ["TOKEN_REASON", "reconnect"]

logger = logging.getLogger("fluxstream")

#: The reason given for a resume from a token (not a drop: nothing to warn about).
TOKEN_REASON = "resumed from a token"
#: Statuses of a ``starting_after`` re-read that say it cannot work here (the response was
#: not stored, or the server has no such endpoint): the next strategy takes over.
_NOT_REPLAYABLE = frozenset({400, 404, 405, 410, 501})


async def reconnect(
    channel: Channel, decision: Decision, reason: str
) -> tuple[Attempt | None, list[Event]]:
    """Perform a ``retry`` or ``resume`` decision after ``reason`` (a drop, an error
    event, a resume token); the events to deliver first (a restart's ``Reset``). No attempt:
    the strategy that was next would continue a reply whose length cap is spent, and
    nothing was sent (the reader ends it at ``length``)."""
    if decision.action == "retry":
        return await _retry(channel, decision, reason), []
    recovery = channel.recovery
    recovery.resumes += 1
    if reason != TOKEN_REASON:
        logger.warning(
            "stream %s dropped (%s); resuming by %s (%d/%d)",
            show_key(channel.parser.content_key), one_line(reason), decision.strategy,
            recovery.resumes, recovery.resume.max_resumes, extra=channel.log_extra(),
        )
    return await _resume(channel, decision, reason)

async def _retry(channel: Channel, decision: Decision, reason: str) -> Attempt:
    """Before any content (a drop, a transient error event): nothing was shown, so this is
    a plain retry; the Reset that announces the new attempt is not passed on."""
    await channel.close(drain=False)
    attempts = channel.recovery.attempts
    if decision.reason == "error event":
        channel.parser.reset(attempts, "error before content")
    else:
        channel.parser.reset(attempts, "dropped before content")
        reason = f"dropped early ({reason})"
    await channel.wait_to_retry(attempts, decision.delay, reason)
    return await channel.connect()

async def _resume(
    channel: Channel, decision: Decision, reason: str
) -> tuple[Attempt | None, list[Event]]:
    parser = channel.parser
    policy = channel.recovery.resume
    await channel.close(drain=False)
    await channel.pause(decision.delay)
    events: list[Event] = []
    channel.resuming_by = decision.strategy
    if decision.strategy == "starting_after":
        return await _reread(channel, reason)
    if decision.strategy == "last_event_id":
        last_id = parser.last_event_id
        parser.new_connection(resume_after=last_id)
        # The request whose stream the ids number (a continuation's, when it was one).
        attempt = await channel.connect(
            headers={"Last-Event-ID": last_id}, body=channel.sent_body, fresh_budget=True
        )
        if attempt.is_json:
            # The whole reply instead of the events after ``last_id``: no ids to check it
            # against what was shown, so it is a rejected reconnect, never spliced.
            refused = _whole_body(attempt, "the whole reply, not its events after the resume point")
            await channel.close(drain=False)
            decision = channel.after_rejected_resume(refused)
            return await _next_strategy(channel, decision, reason, refused)
    elif decision.strategy == "continuation":
        spec = channel.spec
        # What is left of the cap, never more than the request being continued asks.
        cap = channel.recovery.budget.continuation_cap(
            parser.reply, channel.progress.content_events, spec.api.length_cap(spec.body))
        body = spec.body if cap is None else spec.api.with_length_cap(spec.body, cap)
        text = parser.begin_continuation(min_overlap=policy.min_overlap)
        body = spec.api.continuation_body(body, text, policy.prefix_flag)
        attempt = await channel.connect(body=body, fresh_budget=True)
    else:
        channel.recovery.restarts += 1
        events = parser.reset(channel.recovery.restarts, f"restart after a drop ({reason})")
        attempt = await channel.connect(fresh_budget=True)
    return attempt, events


async def _next_strategy(
    channel: Channel, decision: Decision, reason: str, refused: BaseException
) -> tuple[Attempt | None, list[Event]]:
    """After a strategy was refused: the next one (``decision``), no attempt when it would
    end the reply at ``length``, or the refusal raised when none is left."""
    if decision.action == "end_at_length":
        return None, []
    if decision.action != "resume":
        raise refused
    return await _resume(channel, decision, reason)


def _whole_body(attempt: Attempt, what: str) -> ContentTypeError:
    """A resume answered by a whole JSON body (``what`` it was) where events were asked for:
    refused, with the status and content type that came."""
    response = attempt.response
    ctype = str(response.headers.get("content-type", "application/json"))
    return ContentTypeError(ctype, status_code=response.status_code, what=f"{ctype!r}: {what}")


async def _reread(channel: Channel, reason: str) -> tuple[Attempt | None, list[Event]]:
    """OpenAI's resume: ``GET /responses/{id}?stream=true&starting_after=N`` streams the
    stored response's events after the last one delivered. The format drops any event at
    or below ``N`` (a server that starts over shows nothing twice). A status that says
    the response cannot be re-read here rules the strategy out; the next one applies."""
    parser = channel.parser
    response_id, sequence = parser.response_id, parser.sequence
    assert response_id is not None and sequence is not None  # DropState.replayable
    parser.new_connection()
    try:
        attempt = await channel.connect(
            get=channel.spec.api.replay_path(response_id, sequence),
            fresh_budget=True,
        )
        if attempt.is_json:
            # The whole response object instead of its events (``stream`` ignored):
            # reading it would show the delivered text again. Not a re-read.
            refused = _whole_body(attempt, "the whole response, not its events")
            await channel.close(drain=False)
            raise refused
    except (APIStatusError, ContentTypeError) as exc:
        if isinstance(exc, APIStatusError) and exc.status_code not in _NOT_REPLAYABLE:
            raise
        channel.recovery.rule_out("starting_after")
        decision = channel.recovery.resume_decision(channel.drop_state(exc))
        logger.warning(
            "stream %s: resume by starting_after refused (%s); %s",
            show_key(parser.content_key), one_line(str(exc)),
            f"resuming by {decision.strategy}" if decision.strategy else "ending",
            extra=channel.log_extra(),
        )
        return await _next_strategy(channel, decision, reason, exc)
    return attempt, []
