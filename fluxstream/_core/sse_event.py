"""The event :class:`fluxstream.sse.SSEDecoder` dispatches, below both halves of the decoder.

Its home is :mod:`fluxstream.sse` (its ``__module__``, so reprs, pickles and the docs say
``fluxstream.sse.ServerSentEvent``). It lives here because two modules build it: the state
machine in :mod:`fluxstream.sse` and the run shortcuts in :mod:`fluxstream._core.sse_runs`,
which ``sse`` imports (so they cannot import ``sse``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["ServerSentEvent", "new_event"]


class ServerSentEvent(NamedTuple):
    """One dispatched event. Immutable (a named tuple: cheap to create, compare and hash).

    ``id`` is the last event ID in force when the event was dispatched: like the browser's
    ``lastEventId`` it persists across events until the server sets another. ``retry`` is the
    valid ``retry`` value (milliseconds) given in the same block, else ``None``.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None


ServerSentEvent.__module__ = "fluxstream.sse"  # its home (see above)

# ``ServerSentEvent(...)`` runs the NamedTuple's generated Python ``__new__``; ``tuple.__new__``
# builds the identical object at well under half the cost. Used once per event on hot paths.
new_event: Callable[[type[ServerSentEvent], tuple[str, str, str, int | None]], ServerSentEvent]
new_event = tuple.__new__
