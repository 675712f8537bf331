"""The general path of every fast path between bytes and events, switched on for a test.

The differential tests run the same bytes with the fast paths and without them and require
the same results. Each switch turns one fast path off for every registered format at once
(``fluxstream.formats.FORMATS``), so a new format is covered the day it is registered:

* :func:`sse_line_loop`: the parser's SSE decoder without its shortcuts
  (:class:`fluxstream.sse.LineDecoder`: every read through the WHATWG line loop);
* :func:`feed_one_by_one`: every format's ``feed_many`` as the contract defines it,
  :meth:`~fluxstream.formats._base.FormatBase.feed_many`: ``feed`` one event at a time
  (``pydantic_core.from_json`` and every rule of the format; no inline path, no msgspec);
* :func:`without_quick_decoders`: every format's typed ``quick_decoder`` off (``None``), so
  that its ``feed_many`` takes the path it takes for a frame the typed decoder refuses.

:func:`shown` is what the tests compare: everything a parser shows for the same reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fluxstream import _parser as parser
from fluxstream._events import Event
from fluxstream._parser import StreamParser
from fluxstream.errors import FluxstreamError
from fluxstream.formats import FORMATS
from fluxstream.formats._base import FormatBase
from fluxstream.sse import LineDecoder


@contextlib.contextmanager
def patched(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    """Set each ``(owner, name, value)`` while the block runs, then put back what was there
    (an attribute the owner did not hold itself is deleted again, so a class inherits anew).
    A context manager rather than ``monkeypatch``: Hypothesis tests switch per example."""
    saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in changes]
    try:
        for owner, name, value in changes:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


_MISSING = object()


def sse_line_loop() -> contextlib.AbstractContextManager[None]:
    """Parsers built inside the block decode with :class:`~fluxstream.sse.LineDecoder`."""
    return patched((parser, "SSEDecoder", LineDecoder))


def feed_one_by_one() -> contextlib.AbstractContextManager[None]:
    """Every registered format's ``feed_many`` is ``feed`` for each event in turn."""
    return patched(*((cls, "feed_many", FormatBase.feed_many) for cls in FORMATS.values()))


def quick_decoder_formats() -> list[type[Any]]:
    """The registered formats with a typed quick decoder."""
    return [cls for cls in FORMATS.values() if getattr(cls, "quick_decoder", None) is not None]


def without_quick_decoders(*classes: type[Any]) -> contextlib.AbstractContextManager[None]:
    """``quick_decoder = None`` on ``classes`` (default: every registered format with one)."""
    return patched(*((cls, "quick_decoder", None) for cls in classes or quick_decoder_formats()))


def shown(stream_parser: StreamParser, reads: list[bytes]) -> tuple[Any, ...]:
    """Everything ``stream_parser`` shows for ``reads``: the events, the error raised (its
    type and message), the wire state after every read, and at the end the reply, the
    offsets and the wire state."""
    events: list[Event] = []
    states: list[Any] = []
    error = None
    try:
        for data in reads:
            events += stream_parser.feed(data)
            states.append(stream_parser.wire_state())
        events += stream_parser.close()
    except FluxstreamError as exc:
        error = (type(exc), str(exc))
    return (events, error, states, stream_parser.reply.model_dump(), stream_parser.offsets(),
            stream_parser.wire_state())
