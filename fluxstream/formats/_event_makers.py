"""The fast event makers every format builds its deltas with: ``text_delta``,
``reasoning_delta``, ``refusal_delta``, ``tool_delta`` and ``finish_event``.

One event is created per delta, and a frozen dataclass's generated ``__init__`` sets each
field through ``object.__setattr__`` (~0.6 us for a ``TextDelta``: as much as decoding its
SSE frame). The makers here build the *same* objects (same class, same fields, equal,
hashable and frozen afterwards) at under a third of that: the fields are stored on an
instance of a plain twin class that declares the same slots in the same order (so the same
memory layout: CPython allows ``__class__`` assignment exactly between such classes), which
then becomes the event class. At import, every maker is checked against the class itself;
if the event classes ever change shape, or the interpreter refuses the assignment, the
maker is the class (or a maker setting the slots through their descriptors), so it can
never build a wrong event.

They are on the per-delta path: a format binds each as a global of its own module
(``from ._event_makers import text_delta``), one dictionary lookup per call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from .._events import Finish, ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta
from .._reply import StopReason, unified_stop

__all__ = ["finish_event", "reasoning_delta", "refusal_delta", "text_delta", "tool_delta"]

_E = TypeVar("_E")
_new = object.__new__


def _twin(cls: type) -> type | None:
    """A plain class with ``cls``'s slots, in the same order; ``None`` if an instance of it
    cannot become a ``cls``."""
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or cls.__bases__ != (object,):
        return None
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": slots})
    try:
        probe: Any = _new(twin)
        probe.__class__ = cls
    except TypeError:  # pragma: no cover - another interpreter or an incompatible layout
        return None
    return twin


def _checked(make: Callable[..., _E], cls: Callable[..., _E], *args: Any) -> Callable[..., _E]:
    """``make`` if it builds what ``cls`` builds from ``args``; else ``cls`` itself."""
    try:
        fast, slow = make(*args), cls(*args)
    except Exception:  # pragma: no cover - only if the event classes change shape
        return cls
    same = (
        type(fast) is type(slow)
        and fast == slow
        and dataclasses.astuple(fast) == dataclasses.astuple(slow)  # type: ignore[call-overload]
    )
    return make if same else cls


def _channel_maker(cls: type[_E], kind: str) -> Callable[[str, int, int, str], _E]:
    twin = _twin(cls)
    if twin is None or tuple(f.name for f in dataclasses.fields(cls)) != (  # type: ignore[arg-type]
        "key", "choice", "offset", "text", "type"
    ):
        return cls  # pragma: no cover - only if the event classes change shape

    def make(key: str, choice: int, offset: int, text: str) -> _E:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.offset = offset
        ev.text = text
        ev.type = kind
        ev.__class__ = cls
        return ev  # type: ignore[no-any-return]

    return _checked(make, cls, "k", 1, 2, "t")


def _tool_maker() -> Callable[[str, int, int, str | None, str | None, str, int], ToolCallDelta]:
    names = ("key", "choice", "call", "id", "name", "arguments", "offset", "replace", "type")
    twin = _twin(ToolCallDelta)
    if twin is None or tuple(f.name for f in dataclasses.fields(ToolCallDelta)) != names:
        return ToolCallDelta  # pragma: no cover - only if the event class changes shape

    def make(key: str, choice: int, call: int, id: str | None, name: str | None,
             arguments: str, offset: int) -> ToolCallDelta:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.call = call
        ev.id = id
        ev.name = name
        ev.arguments = arguments
        ev.offset = offset
        ev.replace = False
        ev.type = "tool_call_delta"
        ev.__class__ = ToolCallDelta
        return ev  # type: ignore[no-any-return]

    return _checked(make, ToolCallDelta, "k", 1, 2, "i", "n", "{}", 3)


def _finish_maker() -> Callable[[str, int, str, StopReason | None], Finish]:
    names = ("key", "choice", "reason", "stop", "type")
    twin = _twin(Finish)
    if twin is None or tuple(f.name for f in dataclasses.fields(Finish)) != names:
        return Finish  # pragma: no cover - only if the event class changes shape

    def make(key: str, choice: int, reason: str, stop: StopReason | None) -> Finish:
        ev: Any = _new(twin)
        ev.key = key
        ev.choice = choice
        ev.reason = reason
        ev.stop = unified_stop(reason) if stop is None else stop  # Finish.__post_init__
        ev.type = "finish"
        ev.__class__ = Finish
        return ev  # type: ignore[no-any-return]

    return _checked(make, Finish, "k", 1, "end_turn", None)


#: ``TextDelta(key, choice, offset, text)``, built faster (see the module docstring).
text_delta = _channel_maker(TextDelta, "text")
#: ``ReasoningDelta(key, choice, offset, text)``, built faster.
reasoning_delta = _channel_maker(ReasoningDelta, "reasoning")
#: ``RefusalDelta(key, choice, offset, text)``, built faster.
refusal_delta = _channel_maker(RefusalDelta, "refusal")
#: ``ToolCallDelta(key, choice, call, id, name, arguments, offset)``, built faster.
tool_delta = _tool_maker()
#: ``Finish(key, choice, reason, stop)``, built faster.
finish_event = _finish_maker()
