"""The incremental JSON parser on input its C-level fast path refuses: never a raw exception,
and the same value however the text was cut into fragments.

``PartialJSON`` parses a container that arrives whole in one fragment with
``pydantic_core.from_json`` and steps through everything else. Where the two disagree, the
value depended on the fragment boundaries (a lone UTF-16 surrogate escape, which ``json.loads``
and so ``ToolCall.parse_arguments`` accept), and a number past Python's 4,300-digit ``int``
limit, or a raw lone surrogate character, escaped as a bare ``ValueError``/``TypeError``
(from ``ObjectBuilder.feed``, documented never to raise, and from
``ToolCall.partial_arguments``).
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from fluxstream._partial_json import PartialJSON, parse_partial
from fluxstream.structured import ObjectBuilder

BIG = "1" * 5000  # past sys.get_int_max_str_digits() (4300): int() raises ValueError


def fed(fragments: list[str]) -> PartialJSON:
    parser = PartialJSON()
    for fragment in fragments:
        parser.feed(fragment)
        parser.value()  # a snapshot after every fragment must not raise either
    return parser


def cuts(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


@pytest.mark.parametrize("size", [1, 3, 7, 10**6])
@pytest.mark.parametrize(
    "text",
    [
        BIG,
        f'{{"n": {BIG}, "s": "a"}}',
        f"[1, {BIG}]",
        f"[1, -{BIG}.5]",
        '["\ud800"]',  # a raw lone surrogate character
        '{"a": ["x\udc00y", 2]}',
    ],
)
def test_hostile_numbers_and_raw_surrogates_never_raise(text: str, size: int) -> None:
    parser = fed(cuts(text, size))
    parser.value()
    parse_partial(text)


class Model(BaseModel):
    n: int = 0
    s: str = ""
    xs: list[int] = []


@pytest.mark.parametrize("size", [1, 7, 10**6])
@pytest.mark.parametrize("text", [f'{{"n": {BIG}}}', f'{{"s": "a", "xs": [1, {BIG}]}}'])
def test_object_builder_feed_never_raises_on_a_huge_number(text: str, size: int) -> None:
    builder = ObjectBuilder(Model)
    for fragment in cuts(text, size):
        builder.feed(fragment)  # documented: bad input never raises from feed
    assert builder.problem


@pytest.mark.parametrize(
    "text",
    [
        '["\\ud800"]',
        '{"a": "\\udc00", "b": [1, {"c": "x\\ud83d"}]}',
        '[[["\\ud800"]], 2]',
    ],
)
def test_lone_surrogate_escapes_equal_json_loads_in_any_cut(text: str) -> None:
    """``json.loads`` (and so ``ToolCall.parse_arguments``) accepts lone surrogate escapes;
    the complete document's partial value equals it whether it came in one piece or many."""
    expected = json.loads(text)
    for size in (1, 2, 5, len(text)):
        assert fed(cuts(text, size)).value() == expected, size


def test_one_fragment_equals_char_by_char_on_invalid_json() -> None:
    """Best effort after a syntax error is the value just before it, however it was cut."""
    for text in ["[1,]", '{"a": 1,}', "[1, 2 3]", '[{"a": [1, 2]}, x]']:
        assert fed([text]).value() == fed(list(text)).value(), text


@pytest.mark.parametrize("text", ['{"a": "x\\q", "b": 1}', '["ok\\x", 2]', '["\\uZZZZ", 3]'])
def test_a_bad_escape_stops_the_parser_however_it_was_cut(text: str) -> None:
    """An invalid escape split from its backslash is a syntax error as it is in one piece:
    the parser stopped there, and nothing after it (``"b": 1``) is read as if it were valid."""
    for size in (1, 2, 3, len(text)):
        parser = fed(cuts(text, size))
        assert parser.failed, size
        assert parser.value() == fed([text]).value(), size


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    # Lone surrogates included (hypothesis leaves them out by default): dumped as escapes.
    | st.text(st.characters(exclude_categories=()), max_size=8)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_complete_document_equals_json_loads_for_any_cut(data: st.DataObject) -> None:
    value = data.draw(VALUES)
    text = json.dumps(value, indent=data.draw(st.sampled_from([None, 1])))
    n = len(text)
    bounds = [0, *sorted(data.draw(st.lists(st.integers(0, n), max_size=12))), n]
    fragments = [text[a:b] for a, b in itertools.pairwise(bounds)]
    assert json.dumps(fed(fragments).value()) == json.dumps(json.loads(text))


@pytest.mark.parametrize(
    "text", ["[NaN]", '{"a": [1, Infinity, -Infinity], "b": NaN}', "NaN", "-Infinity"]
)
def test_nan_and_infinity_as_json_loads_and_from_json_read_them(text: str) -> None:
    """``json.loads``, ``pydantic_core.from_json`` and pydantic's ``model_validate_json``
    read ``NaN``/``Infinity``/``-Infinity``; the one-fragment fast path did, stepping through
    did not (the value depended on the cut)."""
    expected = json.dumps(json.loads(text))
    for size in (1, 2, 3, len(text)):
        assert json.dumps(fed(cuts(text, size)).value()) == expected, size


def test_nan_prefixes_are_left_out_like_from_json() -> None:
    parser = PartialJSON()
    seen = []
    for char in "[1, -Infinity, NaN]":
        parser.feed(char)
        seen.append(json.dumps(parser.value()))
    assert seen[-1] == "[1, -Infinity, NaN]"
    assert '[1, "-Inf"]' not in seen
    assert seen[seen.index("[1, -Infinity]") - 1] == "[1]"  # "-Infinit": not a value yet


class Floats(BaseModel):
    x: float
    ys: list[float] = []


def test_object_builder_reads_nan_in_any_cut() -> None:
    text = '{"ys": [1.5, NaN, Infinity], "x": -Infinity}'
    for size in (1, 4, len(text)):
        builder = ObjectBuilder(Floats)
        for fragment in cuts(text, size):
            builder.feed(fragment)
        assert builder.problem is None, size
        result = builder.finish()
        assert result.complete
        assert str(result.value) == str(Floats.model_validate_json(text))
