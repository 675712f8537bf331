"""One vocabulary for deadlines: ``timeouts=Timeouts(...)``; the five shorthands are deprecated.

``AsyncClient(timeout=, idle_timeout=, stall_timeout=, first_token_timeout=, finish_grace=)``
and the client's properties of the same names keep working, and each use warns with a
``DeprecationWarning`` that says the :class:`~fluxstream.Timeouts` equivalent, attributed to
the user's own line (not to fluxstream's), once per line as Python's default filter shows it.
``client.timeouts`` is assignable instead, taken as the constructor takes ``timeouts=``.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import httpx
import pytest

import fluxstream
from fluxstream import Timeouts
from fluxstream._endpoints import anthropic_client

URL = "http://127.0.0.1:9/v1"

#: keyword, a value, the field(s) of ``Timeouts`` it stands for.
SHORTHANDS = [
    ("timeout", 30.0, "connect=..., read=..., write=..., pool=..."),
    ("idle_timeout", 7.5, "idle="),
    ("stall_timeout", 5.0, "stall="),
    ("first_token_timeout", 30.0, "first_token="),
    ("finish_grace", 0.5, "finish_grace="),
]


def _line() -> int:
    """The line number of the caller's next line (where the warned call is)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno + 1


@pytest.mark.parametrize(("keyword", "value", "equivalent"), SHORTHANDS)
def test_each_constructor_shorthand_warns_at_the_users_line_naming_timeouts(
    keyword: str, value: float, equivalent: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        line = _line()
        client = fluxstream.AsyncClient(URL, **{keyword: value})
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    text = str(warning.message)
    assert f"{keyword}=" in text and f"timeouts=Timeouts({equivalent}" in text, text
    assert warning.filename == __file__ and warning.lineno == line
    # ...and it still works as before.
    fields = {"timeout": ("connect", "read", "write", "pool"), "idle_timeout": ("idle",),
              "stall_timeout": ("stall",), "first_token_timeout": ("first_token",),
              "finish_grace": ("finish_grace",)}[keyword]
    assert all(getattr(client.timeouts, name) == value for name in fields)


def test_a_shorthand_given_through_anthropic_client_is_attributed_to_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        line = _line()
        client = anthropic_client("http://127.0.0.1:9", "k", stall_timeout=5)
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    assert warning.filename == __file__ and warning.lineno == line
    assert client.timeouts.stall == 5.0


def test_a_shorthand_warns_once_per_call_site() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            fluxstream.AsyncClient(URL, stall_timeout=5)
        for _ in range(2):
            fluxstream.AsyncClient(URL, stall_timeout=6)  # another line: warned once more
    assert len([w for w in caught if w.category is DeprecationWarning]) == 2


@pytest.mark.parametrize(
    ("attribute", "value", "field"),
    [("timeout", 3.0, "connect"), ("idle_timeout", 7.5, "idle"), ("stall_timeout", 5.0, "stall"),
     ("first_token_timeout", 4.0, "first_token"), ("finish_grace", 0.3, "finish_grace")],
)
def test_each_shorthand_property_warns_when_read_or_assigned(
    attribute: str, value: float, field: str
) -> None:
    client = fluxstream.AsyncClient(URL)
    with pytest.warns(DeprecationWarning, match=rf"client\.timeouts\.replace\({field}=") as set_:
        setattr(client, attribute, value)
    assert set_[0].filename == __file__
    assert getattr(client.timeouts, field) == value
    with pytest.warns(DeprecationWarning, match=r"client\.timeouts") as read:
        shown = getattr(client, attribute)
    assert read[0].filename == __file__
    assert shown == (httpx.Timeout(3.0) if attribute == "timeout" else value)


def test_timeouts_alone_warns_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        client = fluxstream.AsyncClient(URL, timeouts=Timeouts(stall=5, first_token=30))
        client.timeouts = client.timeouts.replace(idle=7)
        assert client.read_timeout == 7.0  # not one of the shorthands


def test_client_timeouts_is_assignable_as_the_constructor_takes_it() -> None:
    """Fields given over fluxstream's defaults (not over the client's former value), and
    checked: a refused value changes nothing."""
    client = fluxstream.AsyncClient(URL, timeouts=Timeouts(stall=5, first_token=30))
    client.timeouts = Timeouts(first_token=10)
    fresh = fluxstream.AsyncClient(URL, timeouts=Timeouts(first_token=10)).timeouts
    assert client.timeouts == fresh
    assert client.timeouts.stall is None and client.timeouts.read == 600.0
    before = client.timeouts
    with pytest.raises(TypeError, match="timeouts must be a Timeouts"):
        client.timeouts = {"stall": 5}  # type: ignore[assignment]
    assert client.timeouts is before


def test_an_injected_http_clients_own_timeouts_fill_an_assigned_value() -> None:
    http = httpx.AsyncClient(timeout=httpx.Timeout(4.0, read=44.0))  # never opened
    client = fluxstream.AsyncClient(URL, http_client=http)
    client.timeouts = Timeouts(stall=5)
    t = client.timeouts
    assert (t.connect, t.read, t.write, t.pool, t.stall) == (4.0, 44.0, 4.0, 4.0, 5.0)


def _keywords(**kwargs: Any) -> dict[str, Any]:
    return kwargs


def test_a_shorthand_and_timeouts_for_one_deadline_still_refused() -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="both set the stall"):
        fluxstream.AsyncClient(URL, **_keywords(stall_timeout=5, timeouts=Timeouts(stall=6)))
