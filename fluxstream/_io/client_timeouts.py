"""A client's deadlines as one :class:`~fluxstream._timeouts.Timeouts`; its deprecated shorthands.

``timeouts=`` is the one vocabulary for deadlines. The constructor's five older keywords
(``timeout``, ``idle_timeout``, ``stall_timeout``, ``first_token_timeout``,
``finish_grace``) and the client's properties of those names stand for fields of it: they
keep working, and each use warns (:func:`warn_deprecated`) with the ``Timeouts`` equivalent,
so two spellings of one deadline do not live on in users' code.
"""

from __future__ import annotations

from typing import Any

import httpx

from .._core.deprecation import warn_deprecated
from .._timeouts import DEFAULT_TIMEOUTS, HTTP_FIELDS, Timeouts

__all__ = [
    "CREATED_WITH", "DEFAULT_TIMEOUT", "NOT_GIVEN", "SHORTHANDS", "TimeoutShorthands",
    "configured_timeouts",
    "shorthand_fields", "warn_deprecated", "warn_keyword", "warn_property",
]

#: Connect fast, but allow long gaps between bytes: reasoning models think silently for minutes
#: (the HTTP fields of :data:`~fluxstream._timeouts.DEFAULT_TIMEOUTS`: 10, 600, 60 and 60 s).
DEFAULT_TIMEOUT = httpx.Timeout(
    connect=DEFAULT_TIMEOUTS.connect, read=DEFAULT_TIMEOUTS.read,
    write=DEFAULT_TIMEOUTS.write, pool=DEFAULT_TIMEOUTS.pool,
)
#: The HTTP timeouts of the client fluxstream creates (a request under them passes none).
CREATED_WITH = (
    DEFAULT_TIMEOUT.connect, DEFAULT_TIMEOUT.read, DEFAULT_TIMEOUT.write, DEFAULT_TIMEOUT.pool
)


class _NotGiven:
    """The type of "argument not given" (``None`` means "no timeout" here). Its repr is
    what ``help()`` shows as the default, as openai-python's ``NOT_GIVEN``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()

#: Each shorthand: the ``Timeouts`` fields it stands for, and the value that said nothing
#: when it was the keyword's default (it still says nothing, beside a ``timeouts=``).
SHORTHANDS: dict[str, tuple[tuple[str, ...], object]] = {
    "timeout": (HTTP_FIELDS, NOT_GIVEN),
    "idle_timeout": (("idle",), None),
    "stall_timeout": (("stall",), None),
    "first_token_timeout": (("first_token",), None),
    "finish_grace": (("finish_grace",), DEFAULT_TIMEOUTS.finish_grace),
}


def _fields(keyword: str) -> str:
    return ", ".join(f"{name}=..." for name in SHORTHANDS[keyword][0])


def warn_keyword(keyword: str) -> None:
    """``AsyncClient(<keyword>=...)`` was given: say what to write instead."""
    warn_deprecated(
        f"AsyncClient({keyword}=...) is deprecated: pass timeouts=Timeouts({_fields(keyword)})"
        " (fluxstream.Timeouts, the same seconds)"
    )


def warn_property(keyword: str, *, assigned: bool) -> None:
    """``client.<keyword>`` was read or assigned: say what to write instead."""
    if assigned:
        warn_deprecated(
            f"assigning client.{keyword} is deprecated: client.timeouts = "
            f"client.timeouts.replace({_fields(keyword)})"
        )
    else:
        fields = SHORTHANDS[keyword][0]
        shown = fields[0] if len(fields) == 1 else "connect, .read, .write, .pool"
        warn_deprecated(f"client.{keyword} is deprecated: read client.timeouts.{shown}")


def configured_timeouts(
    timeouts: Timeouts | None, http_client: Any, shorthands: dict[str, Any] | None = None
) -> Timeouts:
    """The client's :class:`Timeouts`, every field given: ``timeouts``, the deprecated
    ``shorthands`` given (``timeout`` for the four HTTP fields), and for the HTTP fields
    given by neither the injected ``http_client``'s own timeouts ("used as it is"), else
    ours. A shorthand that sets a field ``timeouts`` gives too is a ``TypeError``."""
    if timeouts is not None and not isinstance(timeouts, Timeouts):
        raise TypeError(f"timeouts must be a Timeouts, not {type(timeouts).__name__}")
    requested = timeouts if timeouts is not None else Timeouts()
    shorthand: dict[str, tuple[str, float | None]] = {}  # field: (keyword, value)
    for keyword, value in (shorthands or {}).items():
        warn_keyword(keyword)
        if keyword != "timeout" and value == SHORTHANDS[keyword][1]:
            continue  # its former default: it says nothing (a timeout= always says something)
        fields = shorthand_fields(keyword, value)
        shorthand.update((name, (keyword, seconds)) for name, seconds in fields.items())
    for name, (keyword, _) in shorthand.items():
        if name in requested.given:
            raise TypeError(
                f"{keyword}= and timeouts={requested!r} both set the {name} deadline: "
                "pass one of them"
            )
    requested = requested.replace(**{name: value for name, (_, value) in shorthand.items()})
    own = getattr(http_client, "timeout", None) if http_client is not None else None
    http = _as_timeout(DEFAULT_TIMEOUT if own is None else own)
    base = Timeouts(**{name: getattr(http, name) for name in HTTP_FIELDS})
    return base.complete().merge(requested)


def shorthand_fields(keyword: str, value: Any) -> dict[str, float | None]:
    """The :class:`Timeouts` fields a timeout keyword of the client stands for (given to the
    constructor or assigned): ``timeout`` the four HTTP ones, the others one each."""
    if keyword == "timeout":
        http = _as_timeout(value)
        return {name: getattr(http, name) for name in HTTP_FIELDS}
    return {SHORTHANDS[keyword][0][0]: value}


def _as_timeout(value: Any) -> httpx.Timeout:
    if isinstance(value, httpx.Timeout):
        return value
    if value is None or isinstance(value, (int, float)):
        return httpx.Timeout(value)
    # Another library's Timeout (httpx2): same four attributes.
    return httpx.Timeout(
        connect=getattr(value, "connect", None),
        read=getattr(value, "read", None),
        write=getattr(value, "write", None),
        pool=getattr(value, "pool", None),
    )


class TimeoutShorthands:
    """The client's deprecated properties of the constructor's timeout shorthands
    (``timeout``, ``idle_timeout``, ``stall_timeout``, ``first_token_timeout``,
    ``finish_grace``), apart from the client so that its class holds what is current: each
    warns with its equivalent, and assigning one replaces the client's ``timeouts`` with that
    field changed, checked as the keyword is."""

    __slots__ = ()

    def _current_timeouts(self) -> Timeouts:
        raise NotImplementedError

    def _replace_timeouts(self, value: Timeouts) -> None:
        raise NotImplementedError

    def _shorthand(self, keyword: str, value: Any) -> None:
        warn_property(keyword, assigned=True)
        changed = self._current_timeouts().replace(**shorthand_fields(keyword, value))
        self._replace_timeouts(changed)

    @property
    def timeout(self) -> httpx.Timeout:
        """Deprecated: ``timeouts``' connect, read, write and pool (assignable)."""
        warn_property("timeout", assigned=False)
        t = self._current_timeouts()
        return httpx.Timeout(connect=t.connect, read=t.read, write=t.write, pool=t.pool)

    @timeout.setter
    def timeout(self, value: httpx.Timeout | float | None) -> None:
        self._shorthand("timeout", value)

    @property
    def idle_timeout(self) -> float | None:
        """Deprecated: ``timeouts.idle``; without it nor a read timeout, the stall timeout
        (assignable)."""
        warn_property("idle_timeout", assigned=False)
        t = self._current_timeouts()
        return t.idle if t.idle is not None or t.read is not None else t.stall

    @idle_timeout.setter
    def idle_timeout(self, value: float | None) -> None:
        self._shorthand("idle_timeout", value)

    @property
    def stall_timeout(self) -> float | None:
        """Deprecated: ``timeouts.stall`` (assignable)."""
        warn_property("stall_timeout", assigned=False)
        return self._current_timeouts().stall

    @stall_timeout.setter
    def stall_timeout(self, value: float | None) -> None:
        self._shorthand("stall_timeout", value)

    @property
    def first_token_timeout(self) -> float | None:
        """Deprecated: ``timeouts.first_token`` (assignable)."""
        warn_property("first_token_timeout", assigned=False)
        return self._current_timeouts().first_token

    @first_token_timeout.setter
    def first_token_timeout(self, value: float | None) -> None:
        self._shorthand("first_token_timeout", value)

    @property
    def finish_grace(self) -> float | None:
        """Deprecated: ``timeouts.finish_grace`` (assignable)."""
        warn_property("finish_grace", assigned=False)
        return self._current_timeouts().finish_grace

    @finish_grace.setter
    def finish_grace(self, value: float | None) -> None:
        self._shorthand("finish_grace", value)
