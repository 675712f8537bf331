"""Every fast path between bytes and events equals the general path, for every registered format.

The fast paths, each with the general path it is held to (switched by ``tests/fast_paths.py``):

* the SSE decoder's shortcuts (``SSEDecoder.feed``'s one-event shortcuts and the run decoders
  of ``fluxstream/_core/sse_runs.py``) against :class:`~fluxstream.sse.LineDecoder`, every
  read through the WHATWG line loop;
* each format's own ``feed_many`` (Chat Completions' inline content path and its msgspec
  decode, the typed quick path of ``JsonEventFormat`` for Responses and Anthropic Messages,
  Gemini's typed quick path and its msgspec dict path, ``auto`` handing its frames on)
  against ``feed`` one event at a time, the format contract's definition of ``feed_many``;
* a format's typed quick decoder against the same format without it (``quick_decoder =
  None``): what its ``feed_many`` does with a frame the typed decoder refuses.

Over every recorded stream of every format in ``fluxstream.formats.FORMATS`` (found by the
``format`` its expectation names; ``auto`` reads them all), cut at random read boundaries,
strict or not, through :class:`~fluxstream._parser.StreamParser`: the events, the error
raised, the wire state after every read, the reply, the offsets and the final wire state are
the same on every path; and the events equal those of the whole body in one read (the fast
paths take other turns on other cuts). A format registered tomorrow is in these tests at
once: it must have recorded streams, and whatever its ``feed_many`` and decoders do must
equal its ``feed``.

The format-specific edges of each fast path (frames built to just miss it) are property-tested
beside each format: ``test_chat_feed_many.py``, ``test_json_event_feed_many.py``,
``test_gemini_quick.py``; the SSE shortcuts on every shape, in ``tests/sansio/test_sse_*.py``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pydantic_core
import pytest
from fast_paths import (
    feed_one_by_one,
    patched,
    quick_decoder_formats,
    shown,
    sse_line_loop,
    without_quick_decoders,
)
from fixture_files import api_streams, require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fluxstream._events import Event
from fluxstream._parser import StreamParser
from fluxstream.formats import FORMATS
from fluxstream.formats._base import FormatBase
from fluxstream.sse import iter_events

SETTINGS = settings(deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: The formats whose streams are recorded under their own name (``auto`` has none of its own).
NAMED = [name for name in FORMATS if name != "auto"]
STREAMS = [(name, path) for name in NAMED for path in api_streams(name)]
#: ``auto`` decides the format from the frames: it reads every recorded stream.
AUTO = [("auto", path) for _, path in STREAMS]


def general_paths(name: str) -> dict[str, Callable[[], contextlib.AbstractContextManager[None]]]:
    """Each general path to compare with the fast one (a quick decoder's only where the
    format, or for ``auto`` any format, has one)."""
    paths: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
        "sse line loop": sse_line_loop,
        "feed one by one": feed_one_by_one,
    }
    if name == "auto" or getattr(FORMATS[name], "quick_decoder", None) is not None:
        paths["no quick decoder"] = without_quick_decoders
    return paths


def parse(name: str, reads: list[bytes], strict: bool) -> tuple[Any, ...]:
    """Everything the parser shows: events, the error raised, the wire state after every
    read, and at the end the reply, the offsets and the wire state."""
    return shown(StreamParser(format=name, content_key="k", strict=strict), reads)


def cut(body: bytes, data: st.DataObject) -> list[bytes]:
    """``body`` cut anywhere (an empty first or last read included)."""
    cuts = sorted(data.draw(st.sets(st.integers(0, len(body)), max_size=40), "cuts"))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]


def check_paths(name: str, path: Path, data: st.DataObject, strict: bool) -> None:
    body = require(path).read_bytes()
    reads = cut(body, data)
    fast = parse(name, reads, strict)
    if fast[1] is None:  # (the events of a read that raises are not returned)
        assert fast[0] == parse(name, [body], strict)[0], "the read boundaries"
    for label, general in general_paths(name).items():
        with general():
            assert parse(name, reads, strict) == fast, label


@pytest.mark.parametrize(("name", "path"), STREAMS, ids=[f"{n}-{p.stem}" for n, p in STREAMS])
@settings(SETTINGS, max_examples=25)
@given(data=st.data(), strict=st.booleans())
def test_fast_paths_equal_the_general_path(
    name: str, path: Path, data: st.DataObject, strict: bool
) -> None:
    check_paths(name, path, data, strict)


@pytest.mark.parametrize(("name", "path"), AUTO, ids=[p.stem for _, p in AUTO])
@settings(SETTINGS, max_examples=5)
@given(data=st.data(), strict=st.booleans())
def test_auto_takes_the_same_paths(
    name: str, path: Path, data: st.DataObject, strict: bool
) -> None:
    check_paths(name, path, data, strict)


def test_every_registered_format_is_compared() -> None:
    """Every format but ``auto`` has recorded streams (a missing one fails in the test above
    through ``require``), and every format with a typed decoder is compared without it."""
    assert {name for name, _ in STREAMS} == set(NAMED)
    assert all(api_streams(name)[0].exists() for name in NAMED)
    with without_quick_decoders():
        assert all(cls.quick_decoder is None for cls in FORMATS.values()
                   if hasattr(cls, "quick_decoder"))
    assert all(cls.quick_decoder is not None for cls in quick_decoder_formats())


# --------------------------------------------------------------------------- taken


@contextlib.contextmanager
def counting_feeds() -> Iterator[list[int]]:
    """Count the calls of every registered format's ``feed``: the frames the fast paths
    left to the general path (``auto`` hands a frame on to its format's ``feed``: both
    count)."""
    calls = [0]

    def counted(feed: Callable[..., list[Event]]) -> Callable[..., list[Event]]:
        def feed_counted(self: Any, *args: Any, **kwargs: Any) -> list[Event]:
            calls[0] += 1
            return feed(self, *args, **kwargs)

        return feed_counted

    with patched(*((cls, "feed", counted(cls.feed)) for cls in FORMATS.values())):
        yield calls


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("read", [0, 1024])
def test_the_fast_paths_are_taken(name: str, read: int) -> None:
    """Not a vacuous comparison: a format with a ``feed_many`` of its own maps more than 20
    of the recorded frames without ``feed``, whole or in 1024-byte reads (a format without
    one sends every frame through ``feed``)."""
    own = FORMATS[name].feed_many is not FormatBase.feed_many
    frames = 0
    with counting_feeds() as calls:
        for _, path in AUTO if name == "auto" else [s for s in STREAMS if s[0] == name]:
            body = require(path).read_bytes()
            frames += sum(1 for _ in iter_events([body]))
            reads = [body[i : i + read] for i in range(0, len(body), read)] if read else [body]
            parse(name, reads, False)
    assert frames - calls[0] > 20 if own else calls[0] >= frames, (frames, calls[0])


# --------------------------------------------------------------------------- decoders
#
# A format that decodes frames with msgspec on its fast path (Chat Completions and Gemini:
# an untyped ``msgspec.json.Decoder``) and with ``pydantic_core.from_json`` on its general
# path relies on the two giving the same values for whatever msgspec takes.


def untyped_decoders() -> list[tuple[str, Callable[[str], Any]]]:
    """Every untyped msgspec decoder a registered format's module holds, by module."""
    found: dict[str, Callable[[str], Any]] = {}
    for cls in FORMATS.values():
        module = sys.modules[cls.__module__]
        for value in vars(module).values():
            decoder = getattr(value, "__self__", None)
            if isinstance(decoder, msgspec.json.Decoder) and decoder.type is Any:
                found[module.__name__] = value
    return sorted(found.items())


DECODERS = untyped_decoders()

_NUMBERS = st.one_of(
    st.integers().map(str),
    st.integers(-(2**200), 2**200).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.from_regex(r"\A-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?([eE][-+]?[0-9]{1,4})?\Z"),
)
_LEAVES = st.one_of(
    _NUMBERS,
    st.sampled_from(["true", "false", "null"]),
    st.text().map(lambda s: json.dumps(s, ensure_ascii=True)),
    st.text().map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from([
        '"\\ud83d"', '"\\ude00x"', '"\\u0000"', '"\\/"', '"\\x"', '"\x01"', "NaN", "Infinity",
        "-Infinity", "1e400", "-1e400", "01", "1.", ".5", "+1", '"\\uD83D\\uDE00"',
        "1.7976931348623159e308", "2.4703282292062328e-324", "1" * 400,
    ]),
)


def _containers(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    keys = st.sampled_from(['"a"', '"b"', '"a"', '"\\u0061"', '"\\ud83d"', '""'])
    return st.one_of(
        st.lists(children, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.lists(st.tuples(keys, children), max_size=4).map(
            lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"
        ),
    )


def _same(a: Any, b: Any) -> bool:
    """Equal values of equal types, floats bit for bit (``-0.0``), dict keys in order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_the_formats_that_decode_with_msgspec_are_found() -> None:
    assert [module for module, _ in DECODERS] == [
        "fluxstream.formats.chat_completions", "fluxstream.formats.gemini"]


@pytest.mark.parametrize(("module", "fast_loads"), DECODERS, ids=[m for m, _ in DECODERS])
@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    doc=st.recursive(_LEAVES, _containers, max_leaves=20),
    before=st.sampled_from(["", " ", "\n", "\t", "\r", "\x0c", "\ufeff", "\xa0"]),
    after=st.sampled_from(["", " ", "\n", "\x0c", "\u2028", ",", "}", "x", "//c", " 1"]),
)
def test_the_fast_decoder_gives_from_json_values_or_refuses(
    module: str, fast_loads: Callable[[str], Any], doc: str, before: str, after: str
) -> None:
    """Whatever msgspec decodes, ``from_json`` decodes to the same value (so ``feed_many``
    never sees another object than ``feed`` would); what it refuses goes to ``feed``."""
    text = before + '{"k":' + doc + "}" + after
    try:
        fast = fast_loads(text)
    except ValueError:
        return
    assert _same(fast, pydantic_core.from_json(text))
