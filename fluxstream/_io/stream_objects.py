"""``ReplyStream``'s structured output: ``objects()``, ``partial_tool_call()``, ``parsed``.

A mixin of :class:`~fluxstream._stream.ReplyStream`, in a module of its own so that the
stream's class stays the iteration/lifecycle face. The work is done by
:mod:`fluxstream._io.structured_output` (a view fed by ``ReplyStream.__anext__``) and
:mod:`fluxstream.structured` (sans-IO); the pacing of ``objects(coalesce=)`` is the stream's
own ``text(coalesce=)`` machinery (``ReplyStream._paced``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core.coalesce import Picked
from .._events import Event, ToolCallDelta
from .structured_output import Structured, StructuredView, hand_out

if TYPE_CHECKING:  # pragma: no cover
    from .._parser import StreamParser
    from .._reply import Reply
    from ..structured import ObjectBuilder, StructuredResult
    from .reader import StreamReader

__all__ = ["StructuredOutput", "track"]

P = TypeVar("P")
U = TypeVar("U")


class StructuredOutput:
    """Typed partial objects and the structured result of a stream (see ``ReplyStream``)."""

    _view: StructuredView | None
    _pos: int
    _batch: list[Event]
    _parser: StreamParser
    _reader: StreamReader

    if TYPE_CHECKING:  # provided by ReplyStream

        @property
        def reply(self) -> Reply: ...

        def __aiter__(self) -> AsyncIterator[Event]: ...

        async def __anext__(self) -> Event: ...

        def _paced(
            self,
            via: AsyncIterator[Event],
            coalesce: float,
            pick: Callable[[Event], P | None],
            join: Callable[[list[P]], U],
        ) -> AsyncIterator[U]: ...

    def objects(
        self, tp: Any = None, *, coalesce: float | None = None, live: bool = False
    ) -> AsyncIterator[Any]:
        """Typed partial objects of the structured reply as its JSON arrives.

        The type is the ``response_format=`` the stream was opened with (for Anthropic, the
        object is the forced tool's input), or ``tp`` (for a stream opened with a ``dict``
        ``response_format`` or from a resume token; given before any event was delivered).
        An object is yielded whenever it changed: complete fields set and validated, strings
        and lists growing, fields not started absent from ``model_fields_set`` (the user's own
        class, built like ``model_construct``); a value once complete never changes. With
        ``coalesce`` (seconds), at most one object per interval, paced like
        ``text(coalesce=)``.

        Each object yielded is a snapshot that later text never changes: only the parts
        still being filled in are copied, values already complete (which never change) are
        shared between snapshots, so treat them as read-only (``copy.deepcopy`` one to edit
        it). A snapshot costs the size of the containers still open (for a list that grows,
        a plain list copy), not of the whole object: ~0.1 s for 11,000 snapshots of a 70 KB
        object. ``live=True`` yields the one partial object that the stream updates in place
        instead (O(size of each delta); keep no reference across iterations). Bad output
        never raises here: the objects stop at the last valid state and :attr:`parsed` (or
        ``reply.parse(Model)``) raises :class:`~fluxstream.errors.ParseError`. A ``Reset``
        (a restarted generation) starts the object over.
        """
        return self._objects(tp, coalesce, live, self)

    def _objects(
        self, tp: Any, coalesce: float | None, live: bool, via: AsyncIterator[Event]
    ) -> AsyncIterator[Any]:
        view = self._structured_view(tp)

        def pick_builder(_event: Event) -> ObjectBuilder[Any] | None:
            return view.take()

        if coalesce is None:
            def pick(_event: Event) -> Any:
                builder = view.take()
                return None if builder is None else hand_out(builder, live)

            return Picked(via, pick)
        return self._paced(via, coalesce, pick_builder,
                           lambda batch: hand_out(batch[-1], live))

    def partial_tool_call(self, event: ToolCallDelta, tp: Any, *, live: bool = False) -> Any:
        """The typed partial arguments (``tp``: a pydantic model or any adaptable type) of
        ``event``'s tool call, as far as the stream has delivered them (``event`` included).

        Ask with a ``ToolCallDelta`` of the call (usually the one just received); the first
        ask reads the arguments delivered so far in one pass, and from then on the stream
        keeps that call's partial object up to date as it delivers events (linear in the
        arguments). A snapshot by
        default (as in :meth:`objects`: complete values shared, read-only); ``live=True``
        returns the object the stream updates in place. The final object:
        ``ToolCall.parse_arguments(Model)``.
        """
        view = self._view
        if view is None:
            view = self._view = StructuredView()
        return view.call(event, tp, lambda: (self._parser.reply, self._batch[self._pos :]),
                         live)

    def _structured_view(self, tp: Any) -> StructuredView:
        view = self._view
        if view is not None and view.structured is not None:
            if tp is not None and tp != view.structured.type:
                raise ValueError("this stream already reads its objects as another type")
            return view
        if tp is None:
            raise ValueError("no type: open the stream with response_format=Model, "
                             "or pass the type to objects()")
        if self._pos > 0:
            raise ValueError("objects(Model) must be called before the stream delivers events")
        self._track(Structured(tp))
        assert self._view is not None
        return self._view

    def _track(self, structured: Structured) -> None:
        """Track structured output (the client does it for ``response_format=Model``; call
        it before any event is delivered)."""
        view = self._view
        if view is None:
            view = self._view = StructuredView()
        # What the reply holds but was not delivered yet comes through __anext__ later; what
        # it holds beyond that (a resumed stream's partial reply) is fed now.
        view.track(structured, self._parser.reply, self._batch[self._pos :])

    @property
    def parsed(self) -> StructuredResult[Any]:
        """The structured result of the reply so far (final once the stream has ended), for
        the stream's ``response_format`` type: ``value`` is the validated instance when
        ``complete``; a reply cut short (``length``, ``max_tokens``, a network cut) gives the
        last partial object with ``complete=False`` and the ``reason``; a refusal gives
        ``refusal``. Same as ``stream.reply.parse(Model)``.

        :raises ParseError: the output is not JSON, not an object, or does not validate.
        :raises LookupError: the stream has no structured type.
        """
        view = self._view
        if view is None or view.structured is None:
            raise LookupError("no structured type: open the stream with response_format=Model")
        structured = view.structured
        return self.reply.parse(structured.type, tool=structured.tool)


def track(stream: StructuredOutput, structured: Structured) -> None:
    """Make ``stream`` track ``structured`` from its first event: what an endpoint does for
    ``response_format=Model`` (and a resume for the type its token was asked for)."""
    stream._track(structured)
