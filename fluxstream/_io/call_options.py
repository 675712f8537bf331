"""A call's own options, gathered into one value at the typed signature and forwarded whole.

``client.chat.stream(...)`` and every other typed signature spell out the per-call keywords
(``content_key``, ``retry``, ``timeouts``, ``fallbacks``...) for users, IDEs and type
checkers; right there they become one :class:`CallOptions`, and everything below (the
generic endpoint, the route, the stream) reads that one value. A new per-call option is a
field here, a parameter of each typed signature (and its place in the value each one makes),
and the code that reads it; ``tests/client/test_call_options.py`` holds every signature to the
fields, and checks that whatever a call passes arrives.

A ``NamedTuple`` rather than a frozen dataclass: immutable all the same, and made on every
call, where it costs a quarter of a frozen dataclass (as :class:`~fluxstream.sse.
ServerSentEvent`). ``None`` in a field means "the client's" (its policy, its fallbacks...).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .._core.think_tags import ThinkTags
from .._observe import StreamObserver
from .._retry import ResumePolicy, RetryPolicy
from .._timeouts import Timeouts
from .._upstream import Failover, Upstream

__all__ = ["RESUME_OPTIONS", "CallOptions", "in_order"]


class CallOptions(NamedTuple):
    """What one ``stream``, ``complete`` or ``resume`` call asked for, as its signature
    typed it (see each typed signature's docstring for what each does)."""

    #: The API's own tool definitions (``stream`` only).
    tools: Sequence[Mapping[str, Any]] | None = None
    #: Names the logical request (``stream`` only; generated when ``None``).
    content_key: str | None = None
    extra_headers: Mapping[str, str] | None = None
    #: A data frame that does not decode is an error, not a skipped frame (``stream`` only).
    strict: bool = False
    retry: RetryPolicy | None = None
    resume: ResumePolicy | None = None
    response_format: Any = None
    #: A :class:`fluxstream.relay.ReplyLog` that records the stream (``stream`` only).
    log: Any = None
    timeouts: Timeouts | None = None
    observers: Sequence[StreamObserver] = ()
    fallbacks: Sequence[Upstream] | None = None
    failover: Failover | None = None
    raise_for_outcome: bool | None = None
    #: Reasoning inside the text between tags read as reasoning (``None``: the client's).
    think_tags: ThinkTags | bool | None = None
    #: Path events (``PathStart``/``PathDelta``/``PathDone``) for the JSON of tool-call
    #: arguments and of a structured reply (``stream`` only).
    json_paths: bool = False


#: The options ``resume`` takes: those that do not make a new request (no tools, content key,
#: strictness or log: the token has them, or they are the stream's that was recorded).
RESUME_OPTIONS = (
    "extra_headers", "resume", "retry", "response_format", "timeouts", "observers", "fallbacks",
    "failover", "raise_for_outcome", "think_tags",
)

#: A :class:`CallOptions` of every field's value, in field order: how the typed ``stream``
#: signatures make theirs, once per call. The ``NamedTuple``'s own ``__new__`` binds thirteen
#: keyword arguments, which cost making a stream ~8% more instructions (cachegrind,
#: ``benchmarks/bench_setup.py``) than this one tuple; the order is held by
#: ``tests/client/test_call_options.py`` (each field given a value of its own).
in_order = functools.partial(tuple.__new__, CallOptions)
