"""``fluxstream.Timeouts``: every deadline of a stream as one checked, frozen value.

The client's timeout keywords (deprecated) are shorthands for its fields; a request's own
``timeouts=`` is merged over the client's, field by field (only the fields it was given). No
network here: the deadlines firing on real sockets are ``test_deadline_kinds.py``'s.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import httpx
import pytest

import fluxstream
from fluxstream import Deadline, Timeouts
from fluxstream._client import DEFAULT_TIMEOUT
from fluxstream._timeouts import DEFAULT_TIMEOUTS
from fluxstream.errors import (
    APITimeoutError,
    FirstTokenTimeoutError,
    IdleTimeoutError,
    StallTimeoutError,
)

BASE = "http://127.0.0.1:9/v1"
MSG = [{"role": "user", "content": "hi"}]


# ------------------------------------------------------------------ the value


def test_defaults_and_nothing_given() -> None:
    t = Timeouts()
    assert t.given == frozenset()
    assert (t.connect, t.read, t.write, t.pool) == (10.0, 600.0, 60.0, 60.0)
    assert (t.idle, t.stall, t.first_token, t.finish_grace) == (None, None, None, 2.0)
    assert DEFAULT_TIMEOUTS.given == {
        "connect", "read", "write", "pool", "idle", "stall", "first_token", "finish_grace",
    }
    # the client's published HTTP default is the same numbers, from one place
    default = DEFAULT_TIMEOUT
    assert (default.connect, default.read, default.write, default.pool) == (10, 600, 60, 60)


def test_repr_shows_the_given_fields_and_round_trips() -> None:
    assert repr(Timeouts()) == "Timeouts()"
    t = Timeouts(stall=5, first_token=30.5, idle=None)
    assert repr(t) == "Timeouts(idle=None, stall=5.0, first_token=30.5)"
    assert eval(repr(t), {"Timeouts": Timeouts}) == t


@pytest.mark.parametrize("value", [-1, -0.001, math.nan, math.inf, -math.inf, 10**400])
def test_a_value_that_is_no_duration_is_a_value_error_naming_the_field(value: float) -> None:
    with pytest.raises(ValueError, match=r"Timeouts\.stall must be a finite number"):
        Timeouts(stall=value)


@pytest.mark.parametrize("value", ["5", True, b"1", [1], object()])
def test_a_value_of_the_wrong_type_is_a_type_error(value: Any) -> None:
    with pytest.raises(TypeError, match=r"Timeouts\.first_token must be seconds"):
        Timeouts(first_token=value)


def test_zero_and_none_are_valid() -> None:
    t = Timeouts(finish_grace=0, read=None)
    assert t.finish_grace == 0.0 and t.read is None and t.given == {"finish_grace", "read"}


def test_positional_arguments_and_unknown_fields_are_refused() -> None:
    with pytest.raises(TypeError):
        Timeouts(5)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Timeouts(total=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="no field 'stal'"):
        Timeouts().replace(stal=5)


def test_frozen_hashable_and_picklable() -> None:
    t = Timeouts(stall=5)
    with pytest.raises(AttributeError, match="frozen"):
        t.stall = 6
    with pytest.raises(AttributeError):
        del t.stall
    assert {t: 1}[Timeouts(stall=5.0)] == 1
    assert pickle.loads(pickle.dumps(t)) == t
    assert pickle.loads(pickle.dumps(t)).given == {"stall"}


def test_equality_counts_what_was_given() -> None:
    # equal values, but only one overrides stall when merged: not the same value
    assert Timeouts(stall=None) != Timeouts()
    assert Timeouts(stall=None).stall == Timeouts().stall
    assert Timeouts(stall=1) != "Timeouts(stall=1.0)"


def test_replace_gives_the_changed_fields_and_checks_them() -> None:
    t = Timeouts(stall=5).replace(first_token=30)
    assert t == Timeouts(stall=5, first_token=30)
    with pytest.raises(ValueError, match="first_token"):
        t.replace(first_token=-1)


def test_merge_takes_only_the_overrides_given_fields() -> None:
    client = Timeouts(stall=5, first_token=30, finish_grace=1)
    request = Timeouts(stall=None, read=20)
    merged = client.merge(request)
    assert merged == Timeouts(read=20, stall=None, first_token=30, finish_grace=1)
    assert client.merge(None) is client
    assert client.merge(Timeouts()) is client
    with pytest.raises(TypeError, match="must be a Timeouts"):
        client.merge({"stall": 1})  # type: ignore[arg-type]


def test_the_read_gap_is_idle_else_read_else_stall() -> None:
    assert Timeouts(idle=3, read=9, stall=1).read_gap == 3
    assert Timeouts(read=9, stall=1).read_gap == 9
    assert Timeouts(read=None, stall=1).read_gap == 1
    assert Timeouts(read=None).read_gap is None


def test_each_deadline_names_its_limit() -> None:
    t = Timeouts(connect=1, write=2, pool=3, read=4, stall=5, first_token=6, finish_grace=7)
    assert [t.limit(d) for d in Deadline] == [1, 2, 3, 4, 6, 4, 5, 7]
    assert Timeouts(idle=8, read=4).limit(Deadline.IDLE) == 8


def test_deadline_is_a_string_enum() -> None:
    stall: str = Deadline.STALL
    assert stall == "stall" and str(Deadline.FIRST_TOKEN) == "first_token"
    assert Deadline("finish_grace") is Deadline.FINISH_GRACE


# ------------------------------------------------------------------ the errors carry a kind


def test_each_timeout_error_carries_its_deadline() -> None:
    assert FirstTokenTimeoutError("x").deadline is Deadline.FIRST_TOKEN
    assert StallTimeoutError("x").deadline is Deadline.STALL
    assert IdleTimeoutError("x").deadline is Deadline.IDLE
    assert APITimeoutError("x").deadline is Deadline.CONNECT  # constructed by hand
    error = APITimeoutError("no head", deadline=Deadline.HEAD)
    assert error.deadline is Deadline.HEAD and str(error) == "no head"
    assert isinstance(error, fluxstream.APIConnectionError)


# ------------------------------------------------------------------ the client's shorthands


def test_the_keywords_are_shorthands_for_the_fields() -> None:
    with pytest.warns(DeprecationWarning):  # each keyword is deprecated, and still works
        by_keywords = fluxstream.AsyncClient(
            BASE, timeout=httpx.Timeout(5.0, connect=1.0), idle_timeout=7, stall_timeout=3,
            first_token_timeout=30, finish_grace=None,
        )
    by_value = fluxstream.AsyncClient(BASE, timeouts=Timeouts(
        connect=1, read=5, write=5, pool=5, idle=7, stall=3, first_token=30, finish_grace=None,
    ))
    assert by_keywords.timeouts == by_value.timeouts
    for c in (by_keywords, by_value):
        with pytest.warns(DeprecationWarning):  # so is each property
            assert c.timeout == httpx.Timeout(5.0, connect=1.0)
            assert (c.idle_timeout, c.stall_timeout, c.first_token_timeout) == (7, 3, 30)
            assert c.finish_grace is None and c.read_timeout == 7


def test_the_clients_properties_read_as_before() -> None:
    c = fluxstream.AsyncClient(BASE)
    assert c.timeouts == DEFAULT_TIMEOUTS
    with pytest.warns(DeprecationWarning):
        assert c.timeout == DEFAULT_TIMEOUT
        assert (c.idle_timeout, c.stall_timeout, c.first_token_timeout) == (None, None, None)
        assert c.finish_grace == 2.0 and c.read_timeout == 600.0
        # without a read timeout, the stall timeout bounds a silent socket too
        c = fluxstream.AsyncClient(BASE, timeout=None, stall_timeout=4)
        assert c.idle_timeout == 4 and c.read_timeout == 4 and c.timeouts.idle is None


@pytest.mark.parametrize(
    ("keyword", "value", "field"),
    [
        ("stall_timeout", 1.0, "stall"),
        ("first_token_timeout", 1.0, "first_token"),
        ("idle_timeout", 1.0, "idle"),
        ("finish_grace", None, "finish_grace"),  # None is not finish_grace's default
        ("timeout", 5.0, "connect"),
    ],
)
def test_a_keyword_and_timeouts_setting_the_same_deadline_is_a_type_error(
    keyword: str, value: Any, field: str
) -> None:
    with pytest.warns(DeprecationWarning), pytest.raises(
        TypeError, match=rf"{keyword}= and timeouts=.* both set the {field}"
    ):
        fluxstream.AsyncClient(BASE, timeouts=Timeouts(**{field: 9.0}), **{keyword: value})


def test_a_keyword_and_timeouts_setting_different_deadlines_combine() -> None:
    with pytest.warns(DeprecationWarning):
        c = fluxstream.AsyncClient(
            BASE, stall_timeout=1, timeout=5.0, timeouts=Timeouts(first_token=30, idle=3)
        )
    assert (c.timeouts.stall, c.timeouts.first_token, c.timeouts.idle) == (1, 30, 3)
    assert c.timeouts.connect == 5.0
    # a keyword left at its default says nothing, whatever timeouts= gives
    with pytest.warns(DeprecationWarning):
        c = fluxstream.AsyncClient(BASE, finish_grace=2.0, timeouts=Timeouts(finish_grace=0.5))
        assert c.finish_grace == 0.5


def test_timeouts_must_be_a_timeouts() -> None:
    with pytest.raises(TypeError, match="timeouts must be a Timeouts"):
        fluxstream.AsyncClient(BASE, timeouts={"stall": 1})  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="stall"):
        fluxstream.AsyncClient(BASE, stall_timeout=-1)


@pytest.mark.anyio
async def test_an_injected_clients_own_timeouts_fill_the_http_fields_not_given() -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(3.0, connect=1.0)) as http:
        c = fluxstream.AsyncClient(BASE, http_client=http, timeouts=Timeouts(write=9))
        t = c.timeouts
        assert (t.connect, t.read, t.write, t.pool) == (1.0, 3.0, 9.0, 3.0)


# ------------------------------------------------------------------ a request's own timeouts


def spec_timeouts(stream: fluxstream.ReplyStream) -> Timeouts:
    return stream._reader.channel.spec.timeouts


def test_a_requests_timeouts_are_merged_over_the_clients() -> None:
    c = fluxstream.AsyncClient(BASE, timeouts=Timeouts(stall=5, first_token=30))
    plain = c.chat.stream(model="m", messages=MSG)
    assert spec_timeouts(plain) == c.timeouts
    own = c.chat.stream(model="m", messages=MSG, timeouts=Timeouts(stall=None, read=20))
    t = spec_timeouts(own)
    assert (t.stall, t.read, t.first_token, t.connect) == (None, 20, 30, 10)
    assert "timeouts" not in own._reader.channel.spec.body  # not sent to the server
    assert c.timeouts.stall == 5  # the client's own are unchanged
    assert spec_timeouts(c.responses.stream(
        model="m", input="hi", timeouts=Timeouts(first_token=1)
    )).first_token == 1
    assert spec_timeouts(c.messages.stream(
        model="m", messages=MSG, max_tokens=5, timeouts=Timeouts(finish_grace=0)
    )).finish_grace == 0


def test_a_requests_timeouts_are_checked() -> None:
    c = fluxstream.AsyncClient(BASE)
    with pytest.raises(TypeError, match="timeouts must be a Timeouts"):
        c.chat.stream(model="m", messages=MSG, timeouts=5)  # type: ignore[arg-type]


def test_a_resumed_stream_takes_its_own_timeouts() -> None:
    c = fluxstream.AsyncClient(BASE, timeouts=Timeouts(stall=5))
    token = c.chat.stream(model="m", messages=MSG).resume_token()
    assert spec_timeouts(c.chat.resume(token, timeouts=Timeouts(stall=1))).stall == 1
    assert spec_timeouts(c.chat.resume(token)).stall == 5
