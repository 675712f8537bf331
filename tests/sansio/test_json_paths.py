"""Path events of a JSON document read in fragments (:mod:`fluxstream._json_paths`).

Held to an oracle worked out from the decoded document (``tests/json_path_oracle.py``) at
every fragmentation, to pydantic's partial mode re-parsing each prefix (every completed path
holds the value pydantic finds there), and to bounds: linear growth at 1x/4x/16x, a bounded
path depth, nothing announced from a malformed fragment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pydantic_core
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from json_path_oracle import at, expected, is_prefix, normalized

from fluxstream import PathDelta, PathDone, PathStart, Reset, TextDelta, ToolCallDelta
from fluxstream._json_paths import MAX_DEPTH, PathParser, PathTracker

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=6), children, max_size=5),
    max_leaves=25,
)


def feed(text: str, cuts: list[int]) -> tuple[PathParser, list[Any], list[int]]:
    """Feed ``text`` cut at ``cuts``; the parser, its events, and after each fragment how
    many events there were."""
    parser = PathParser("k", 0, 3)
    events: list[Any] = []
    counts: list[int] = []
    start = 0
    for end in [*sorted(set(cuts)), len(text)]:
        parser.feed(text[start:end])
        events += parser.out
        parser.out.clear()
        counts.append(len(events))
        start = end
    parser.end()  # a number or literal that is the whole document ends with it
    events += parser.out
    parser.out.clear()
    return parser, events, counts


def dumps(value: Any, indent: int | None, ascii_only: bool) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ascii_only)


@settings(max_examples=300, deadline=None)
@given(JSON, st.lists(st.integers(0, 400), max_size=40), st.sampled_from([None, 1]),
       st.booleans())
def test_every_fragmentation_gives_the_documents_own_events(
    value: Any, cuts: list[int], indent: int | None, ascii_only: bool
) -> None:
    text = dumps(value, indent, ascii_only)
    cuts = [c for c in cuts if c < len(text)]
    _, events, counts = feed(text, cuts)
    assert normalized(events) == expected(value)
    assert all(e.key == "k" and e.choice == 0 and e.call == 3 for e in events)
    # After every fragment, what was announced is how the whole document's events begin.
    full = expected(value)
    for count in counts:
        assert is_prefix(normalized(events[:count]), full)


@settings(max_examples=150, deadline=None)
@given(JSON, st.lists(st.integers(0, 400), max_size=20))
@example(None, [1])  # "n": a prefix that partial mode cannot read at all
def test_every_completed_path_holds_what_pydantic_partial_mode_finds(
    value: Any, cuts: list[int]
) -> None:
    """At every cut, the prefix re-parsed by ``from_json(allow_partial=True)`` has, at each
    path announced complete so far, the very value the event carries."""
    text = dumps(value, None, False)
    cuts = sorted({c for c in cuts if 0 < c < len(text)})
    parser = PathParser("k", 0, None)
    start = 0
    done: list[PathDone] = []
    for end in [*cuts, len(text)]:
        parser.feed(text[start:end])
        done += [e for e in parser.out if isinstance(e, PathDone)]
        parser.out.clear()
        start = end
        try:
            again = pydantic_core.from_json(text[:end], allow_partial=True)
        except ValueError:  # a top-level scalar cut short ("n", "-"): no value to compare,
            assert not done, (text[:end], done)  # and none may have been announced
            continue
        for event in done:
            assert at(again, event.path) == event.value, (text[:end], event)


def test_a_tool_call_announces_its_path_before_its_content_ends() -> None:
    text = '{"path": "src/app.py", "content": "line 1\\nline \\u00e9 2"}'
    _, events, _ = feed(text, list(range(1, len(text))))
    kinds = [(type(e).__name__, e.path) for e in events]
    path_done = kinds.index(("PathDone", ("path",)))
    assert kinds.index(("PathStart", ("content",))) > path_done
    assert events[path_done].value == "src/app.py"
    pieces = [e.text for e in events if isinstance(e, PathDelta) and e.path == ("content",)]
    assert len(pieces) > 5 and "".join(pieces) == "line 1\nline é 2"
    assert isinstance(events[-1], PathDone) and events[-1].path == ()
    assert events[-1].value == json.loads(text)


@pytest.mark.parametrize(("text", "done"), [
    ('{"a" 1, "b": 2}', []),  # no colon: the key is no path
    ("{'a': 1}", []),  # a single-quoted key
    ('{a: 1}', []),  # an unquoted key
    ('{"a": tru, "b": 1}', []),  # not a literal: nothing at "a"
    ('{"a": 1.2.3}', []),  # not a number
    ('{"a": 1 "b": 2}', [(("a",), 1)]),  # no comma: "b" never becomes a path
    ('[1, 2}', [((0,), 1), ((1,), 2)]),  # a mismatched bracket
    ('{"a": 1} {"b": 2}', [(("a",), 1), ((), {"a": 1})]),  # text after the document
    ('{"a": "x\\q", "b": 1}', []),  # a bad escape
    ('{"a": "x\\uZZ", "b": 1}', []),
])
def test_a_malformed_fragment_never_invents_a_path(
    text: str, done: list[tuple[Any, Any]]
) -> None:
    """Only what was read as JSON is announced: the same completed values at every cut,
    nothing after the error, and every path started is one of the document's as far as it
    was valid (the root, or a key followed by its colon)."""
    for size in (1, 2, 3, len(text)):
        parser, events, _ = feed(text, list(range(size, len(text), size)))
        assert parser.failed, size
        assert [(e.path, e.value) for e in events if isinstance(e, PathDone)] == done, size
        started = {e.path for e in events if isinstance(e, PathStart)}
        assert started <= {(), ("a",), (0,), (1,)}, size
        assert ("b",) not in started


def test_a_deep_document_announces_paths_to_the_depth_limit_only() -> None:
    depth = 5_000
    text = "[" * depth + '"x"' + "]" * depth
    for size in (1, 7, 1000):
        _, events, _ = feed(text, list(range(size, len(text), size)))
        assert max(len(e.path) for e in events) == MAX_DEPTH
        assert len(events) == 2 * (MAX_DEPTH + 1)
        assert isinstance(events[-1], PathDone) and events[-1].path == ()
        inner = events[-1].value  # the whole document, every level of it
        for _ in range(depth):
            assert isinstance(inner, list) and len(inner) == 1
            inner = inner[0]
        assert inner == "x"


def test_the_depth_limit_holds_in_a_container_read_in_one_piece() -> None:
    value: Any = "x"
    for _ in range(MAX_DEPTH + 10):
        value = [value]
    parser = PathParser("k", 0, None, max_depth=20)
    parser.feed(json.dumps(value))  # closes within the fragment: read in one piece
    assert normalized(parser.out) == expected(value, max_depth=20)
    assert max(len(e.path) for e in parser.out) == 20


def _seconds(text: str, size: int) -> float:
    best = float("inf")
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    for _ in range(5):
        parser = PathParser("k", 0, 0)
        begin = time.process_time()
        for piece in pieces:
            parser.feed(piece)
            parser.out.clear()
        best = min(best, time.process_time() - begin)
    return best


GROWING: dict[str, Callable[[int], str]] = {
    "long string": lambda n: json.dumps({"path": "a", "content": "abcdé\n" * n}),
    "wide object": lambda n: json.dumps({f"k{i}": i for i in range(n)}),
    "wide array of objects": lambda n: json.dumps([{"a": [i, "s"]} for i in range(n // 4)]),
    "deep document": lambda n: "[" * n + "]" * n,
    "deep objects": lambda n: '{"a":' * (n // 2) + "1" + "}" * (n // 2),
}


@pytest.mark.parametrize("name", sorted(GROWING))
def test_cost_grows_linearly_with_the_bytes(name: str) -> None:
    """1x, 4x and 16x the bytes in 5-character fragments: linear is ~4x and ~16x the CPU
    time (10x and 40x allowed on a loaded machine, best of 5; CPU time, since a wall clock
    counts the waits for a core other jobs hold); quadratic would be 16x and 256x."""
    make = GROWING[name]
    times = [_seconds(make(n), 5) for n in (2_000, 8_000, 32_000)]
    assert times[1] < 10 * times[0] + 0.002 and times[2] < 40 * times[0] + 0.004, times


def test_a_replaced_argument_is_read_again_from_where_it_changed() -> None:
    tracker = PathTracker()
    first = '{"a": "x", "b": [1, 2'
    out = tracker.feed([ToolCallDelta("k", 0, 0, "id", "f", first, 0)])
    assert ("done", ("a",), "x") in normalized(out)
    # The provider's final arguments differ from offset 6 on: "a" is "y", "b" is [3].
    out = tracker.feed([ToolCallDelta("k", 0, 0, None, None, '"y", "b": [3]}', 6,
                                      replace=True)])
    items = normalized(out)
    assert items[0] == ("start", ("a",), "string")
    assert ("done", ("a",), "y") in items and ("done", ("b",), [3]) in items
    assert items[-1] == ("done", (), {"a": "y", "b": [3]})


def test_content_paths_follow_text_deltas_and_a_reset_starts_over() -> None:
    plain = PathTracker()
    delta = TextDelta("k", 1, 0, '{"title": "Zü')
    assert plain.feed([delta]) == [delta]  # content is read only when asked
    tracker = PathTracker(content=True)
    out = tracker.feed([delta, TextDelta("k", 1, 13, 'rich"}')])
    items = [e for e in out if isinstance(e, (PathStart, PathDelta, PathDone))]
    assert all(e.call is None and e.choice == 1 for e in items)
    assert normalized(items) == expected({"title": "Zürich"})
    assert out[0] is delta  # each event right after the delta that made it
    out = tracker.feed([Reset("k", 2, "restart"), TextDelta("k", 1, 0, "[1]")])
    assert normalized(out) == expected([1])


def test_calls_and_choices_have_documents_of_their_own() -> None:
    tracker = PathTracker()
    out = tracker.feed([
        ToolCallDelta("k", 0, 0, "a", "f", '{"x": ', 0),
        ToolCallDelta("k", 0, 1, "b", "g", '{"x": 2}', 0),
        ToolCallDelta("k", 1, 0, "c", "f", "[true]", 0),
        ToolCallDelta("k", 0, 0, None, None, "1}", 6),
    ])
    done = {(e.choice, e.call, e.path): e.value for e in out if isinstance(e, PathDone)}
    assert done == {(0, 1, ("x",)): 2, (0, 1, ()): {"x": 2}, (1, 0, (0,)): True,
                    (1, 0, ()): [True], (0, 0, ("x",)): 1, (0, 0, ()): {"x": 1}}


@pytest.mark.parametrize("size", [1, 2, 5, 1000])
def test_a_structured_reply_in_a_markdown_fence_has_the_json_s_paths(size: int) -> None:
    """As ``objects()`` reads a reply a chatty model wrapped in a ```` ```json ```` fence."""
    value = {"title": "Zürich", "days": [1, 2]}
    text = "\n```json\n" + json.dumps(value, indent=1) + "\n```\n"
    tracker = PathTracker(content=True)
    out: list[Any] = []
    for start in range(0, len(text), size):
        out += tracker.feed([TextDelta("k", 0, start, text[start : start + size])])
    assert normalized(out) == expected(value)
