"""A test's say over each request: its faults, its reply's content, or a whole answer.

The server computes every reply from the request (:mod:`.script`) and takes faults from its
own settings or a request header. A test that drives a client it does not control (an SDK,
an application) can send neither, so a :class:`RequestPlan` given to the server is asked once
per request, before the request is answered, and what it returns is used for that request
only: faults (over the server's own, under the request's header), profiles added to the
request's, a scripted reply (:class:`~.scripted.ScriptedReply`, whose content replaces the
computed one and is rendered in every API's format), or a whole :data:`~.answers.Answer`
(a recorded response replayed, a refusal). ``fluxstream.testing`` is the plan's user.

The plan is called on the server's event loop and may be changed from the test's thread, so
an implementation guards its own state; it must not block (it runs between two requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .answers import Answer
from .scripted import ScriptedReply

__all__ = ["NOTHING_PLANNED", "Planned", "RequestPlan"]


@dataclass(frozen=True)
class Planned:
    """What a plan decided for one request (the defaults: nothing)."""

    #: Fault keys and values (:mod:`.faults`), over the server's own.
    faults: Mapping[str, str] = field(default_factory=dict)
    #: Profile names added to the request's.
    profiles: frozenset[str] = frozenset()
    #: The content the reply says instead of the computed one.
    reply: ScriptedReply | None = None
    #: A whole answer, sent instead of the route's.
    answer: Answer | None = None


NOTHING_PLANNED = Planned()


class RequestPlan(Protocol):
    """Asked once per request (``headers``: lower-case names, as received)."""

    def plan(
        self, method: str, path: str, query: str, headers: tuple[tuple[str, str], ...], body: Any
    ) -> Planned: ...
