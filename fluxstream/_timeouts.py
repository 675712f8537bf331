"""Every deadline of a stream as one value (:class:`Timeouts`); which passed (:class:`Deadline`).

Why one value: a stream is bounded by the HTTP library's own timeouts (connect, read, write,
pool) and by clocks only fluxstream keeps (the first token, the gap between content, the grace
after every choice finished). Passed as loose keywords they had to be threaded through every
layer by name, and which one ended a stream had to be guessed afterwards. A :class:`Timeouts`
travels whole from the client to the stream's clocks, and the layer where a deadline passes
names it with a :class:`Deadline`, which the raised error (``error.deadline``) and
``stream.stats.deadline`` carry up unchanged.

A value remembers which fields were given (:attr:`Timeouts.given`): a request's own
``timeouts=`` overrides only those over the client's (:meth:`Timeouts.merge`), as
``Timeouts(stall=5)`` means "a stall limit of 5 s, the rest as configured".

Like :mod:`fluxstream._limits`, this module imports nothing from the package, so every layer
(the errors included) may use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from enum import Enum
from typing import Any

__all__ = ["DEFAULT_TIMEOUTS", "Deadline", "Timeouts"]


class Deadline(str, Enum):
    """Which deadline passed: carried by the timeout errors (``error.deadline``) and by
    ``stream.stats.deadline``. A ``str`` enum, so it compares equal to its value and logs
    as it reads (``Deadline.STALL == "stall"``)."""

    #: The HTTP library could not connect within ``connect``.
    CONNECT = "connect"
    #: The HTTP library could not send the request within ``write``.
    WRITE = "write"
    #: No pooled connection came free within ``pool``.
    POOL = "pool"
    #: The response head did not arrive within the read timeout (``idle``, else ``read``).
    HEAD = "head"
    #: No content within ``first_token`` seconds of the request (it also bounds the head).
    FIRST_TOKEN = "first_token"
    #: No byte at all for the read timeout (``idle``, else ``read``) once the body started.
    IDLE = "idle"
    #: Bytes but no content for ``stall`` seconds, after the first content.
    STALL = "stall"
    #: Every choice finished and no sentinel came within ``finish_grace``: the stream ends
    #: ``finished`` (no error).
    FINISH_GRACE = "finish_grace"

    def __str__(self) -> str:
        return self.value


class _NotGiven:
    """The default of a :class:`Timeouts` field that was not given (``None`` means "no
    limit"). Its repr is what ``help()`` shows, as the client's ``NOT_GIVEN``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_GIVEN"


_NOT_GIVEN: Any = _NotGiven()

#: The fields, in the order a repr shows them, with the value each has when not given.
_DEFAULTS: dict[str, float | None] = {
    "connect": 10.0,
    "read": 600.0,  # reasoning models think silently for minutes
    "write": 60.0,
    "pool": 60.0,
    "idle": None,
    "stall": None,
    "first_token": None,
    "finish_grace": 2.0,
}
_FIELDS = tuple(_DEFAULTS)
#: The fields the HTTP library enforces (the rest are fluxstream's own clocks).
HTTP_FIELDS = ("connect", "read", "write", "pool")


class Timeouts:
    """Every deadline of a stream, in seconds (``None``: no limit). Frozen and hashable.

    :param connect: to open a connection (the HTTP library's connect timeout).
    :param read: the HTTP library's read timeout: the longest wait for any byte, the
        response head included, unless ``idle`` is given.
    :param write: to send the request.
    :param pool: to get a connection from the pool.
    :param idle: seconds without any byte before the stream ends with
        :class:`~fluxstream.errors.IdleTimeoutError` (replaces ``read`` between reads; with
        neither, ``stall`` bounds a silent socket too).
    :param stall: seconds between two pieces of content, from the first content on, before
        :class:`~fluxstream.errors.StallTimeoutError` (heartbeats are not content).
    :param first_token: seconds from the request to the first content, across retries,
        before :class:`~fluxstream.errors.FirstTokenTimeoutError`; also bounds the head.
    :param finish_grace: once every choice finished, how long to wait for the sentinel
        before ending the stream ``finished``.

    A field not given reads as its default (10, 600, 60, 60 s; no ``idle``, ``stall`` or
    ``first_token`` limit; a 2 s ``finish_grace``), except that a client takes ``connect``,
    ``read``, ``write`` and ``pool`` from an injected ``http_client`` when they are not given.
    Values are checked: a negative, NaN or infinite number is a ``ValueError`` (use ``None``
    for no limit), anything but a number or ``None`` a ``TypeError``.
    """

    __slots__ = ("connect", "finish_grace", "first_token", "given", "idle", "pool", "read",
                 "stall", "write")

    connect: float | None
    read: float | None
    write: float | None
    pool: float | None
    idle: float | None
    stall: float | None
    first_token: float | None
    finish_grace: float | None
    #: The names of the fields that were given (what :meth:`merge` takes over another value).
    given: frozenset[str]

    def __init__(
        self,
        *,
        connect: float | None = _NOT_GIVEN,
        read: float | None = _NOT_GIVEN,
        write: float | None = _NOT_GIVEN,
        pool: float | None = _NOT_GIVEN,
        idle: float | None = _NOT_GIVEN,
        stall: float | None = _NOT_GIVEN,
        first_token: float | None = _NOT_GIVEN,
        finish_grace: float | None = _NOT_GIVEN,
    ) -> None:
        values = {
            "connect": connect, "read": read, "write": write, "pool": pool, "idle": idle,
            "stall": stall, "first_token": first_token, "finish_grace": finish_grace,
        }
        given = []
        for name, value in values.items():
            if value is _NOT_GIVEN:
                value = _DEFAULTS[name]
            else:
                value = _seconds(name, value)
                given.append(name)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "given", frozenset(given))

    # ------------------------------------------------------------------ a frozen value

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Timeouts is frozen: use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Timeouts is frozen")

    def _items(self) -> Iterator[tuple[str, float | None]]:
        """The given fields and their values, in field order."""
        given = self.given
        return ((name, getattr(self, name)) for name in _FIELDS if name in given)

    def __repr__(self) -> str:
        """Only the given fields: ``eval(repr(t)) == t``, and a request's override shows
        exactly what it overrides."""
        return "Timeouts(" + ", ".join(f"{name}={value!r}" for name, value in self._items()) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Timeouts):
            return NotImplemented
        return tuple(self._items()) == tuple(other._items())

    def __hash__(self) -> int:
        return hash(tuple(self._items()))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self._items()),))

    # ------------------------------------------------------------------ deriving values

    def replace(self, **changes: float | None) -> Timeouts:
        """A copy with ``changes`` given (checked like the constructor's arguments)."""
        unknown = sorted(set(changes) - set(_FIELDS))
        if unknown:
            raise TypeError(f"Timeouts has no field {unknown[0]!r}; the fields: {_field_list()}")
        return Timeouts(**{**dict(self._items()), **changes})

    def merge(self, override: Timeouts | None) -> Timeouts:
        """These timeouts with ``override``'s given fields over them (a request's own
        ``timeouts=`` over the client's); ``override`` ``None``: these."""
        if override is None:
            return self
        if not isinstance(override, Timeouts):
            raise TypeError(f"timeouts must be a Timeouts, not {type(override).__name__}")
        if not override.given:
            return self
        return Timeouts(**{**dict(self._items()), **dict(override._items())})

    def complete(self) -> Timeouts:
        """A copy with every field given (the defaults where not): the value a client
        threads to its streams, so that nothing merged over it changes meaning."""
        return Timeouts(**{name: getattr(self, name) for name in _FIELDS})

    @property
    def read_gap(self) -> float | None:
        """Seconds a read may wait for any byte: ``idle``, else ``read``, else ``stall`` (a
        silent socket must not outlive a stalled stream)."""
        if self.idle is not None:
            return self.idle
        return self.read if self.read is not None else self.stall

    def limit(self, deadline: Deadline) -> float | None:
        """The seconds configured for ``deadline`` (for an error message or a log line)."""
        if deadline is Deadline.HEAD or deadline is Deadline.IDLE:
            return self.read_gap
        value: float | None = getattr(self, deadline.value)
        return value


def _rebuild(values: dict[str, float | None]) -> Timeouts:
    return Timeouts(**values)


def _field_list() -> str:
    return ", ".join(_FIELDS)


def _seconds(name: str, value: object) -> float | None:
    """``value`` as seconds, or a ``TypeError``/``ValueError`` that names the field."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"Timeouts.{name} must be seconds (an int or a float) or None for no limit, "
            f"not {type(value).__name__}"
        )
    try:
        seconds = float(value)
    except OverflowError:  # an int past a float's range
        seconds = math.inf
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        raise ValueError(
            f"Timeouts.{name} must be a finite number of seconds >= 0 (None for no limit), "
            f"not {value!r}"
        )
    return seconds


#: Every field at its default: what a stream uses when nothing is configured.
DEFAULT_TIMEOUTS = Timeouts().complete()
