"""``ObjectBuilder.snapshot()``: a partial object later text never changes, at a cost that does
not grow with what is already complete (so a snapshot per delta stays linear in the reply)."""

from __future__ import annotations

import copy
import gc
import json
import sys
from types import FrameType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from test_structured import _splits

from fluxstream.structured import ObjectBuilder, partial_object

# --------------------------------------------------------------------------- growth


class Row(BaseModel):
    id: int
    name: str
    tags: list[str]


class Table(BaseModel):
    title: str
    rows: list[Row]


def table_text(rows: int) -> str:
    """Rows of one fixed width, so 4x the rows is 4x the text."""
    return json.dumps({"title": "t", "rows": [
        {"id": 1000 + i, "name": f"row {1000 + i}", "tags": ["a", "b"]} for i in range(rows)
    ]})


def snapshot_calls(rows: int, delta: int = 8) -> tuple[int, int]:
    """Function calls (Python and C) made inside ``snapshot()`` when one is taken after every
    delta of ``delta`` characters: in all, and the most for one snapshot. A count of work,
    not a time, so it says the same on a loaded machine."""
    text = table_text(rows)
    builder: ObjectBuilder[Table] = ObjectBuilder(Table)
    total = most = 0
    calls = 0

    def count(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    gc.disable()  # a collection inside a snapshot would count other objects' finalizers
    try:
        for start in range(0, len(text), delta):
            builder.feed(text[start : start + delta])
            calls = 0
            sys.setprofile(count)
            try:
                builder.snapshot()
            finally:
                sys.setprofile(None)
            total += calls
            most = max(most, calls)
    finally:
        gc.enable()
    assert builder.complete
    return total, most


def test_a_snapshot_per_delta_grows_linearly_with_the_reply() -> None:
    """4x the rows (4x the deltas) costs about 4x the snapshot work, not 16x: a snapshot copies
    only the containers still being filled, never the rows already complete."""
    small_total, small_most = snapshot_calls(50)
    large_total, large_most = snapshot_calls(200)
    assert small_total > 0
    assert large_total < 5 * small_total, (small_total, large_total)
    # One snapshot's work does not depend on how many rows are complete before it.
    assert large_most <= small_most + 5, (small_most, large_most)


# --------------------------------------------------------------------------- the contract


class Leaf(BaseModel):
    word: str
    n: int
    tags: list[str] = []


class Group(BaseModel):
    name: str
    leaves: list[Leaf]
    best: Leaf | None = None
    grid: list[list[str]] = []
    meta: dict[str, int] = {}


class Doc(BaseModel):
    title: str
    groups: list[Group]
    words: list[str] = []


words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)
leaves = st.builds(Leaf, word=words, n=st.integers(-10**6, 10**6),
                   tags=st.lists(words, max_size=3))
groups = st.builds(
    Group, name=words, leaves=st.lists(leaves, max_size=3), best=st.none() | leaves,
    grid=st.lists(st.lists(words, max_size=2), max_size=2),
    meta=st.dictionaries(words, st.integers(0, 9), max_size=2),
)
docs = st.builds(Doc, title=words, groups=st.lists(groups, max_size=3),
                 words=st.lists(words, max_size=3))


def dump(value: Any) -> Any:
    return None if value is None else value.model_dump(exclude_unset=True)


@settings(max_examples=120)
@given(doc=docs, sizes=st.lists(st.integers(1, 9), min_size=1, max_size=6),
       indent=st.sampled_from([None, 1]))
def test_every_snapshot_is_the_prefix_parsed_afresh_and_never_moves(
    doc: Doc, sizes: list[int], indent: int | None
) -> None:
    """At every feed boundary the snapshot equals a from-scratch parse of the text so far
    (fields set included); after all the rest of the text, each still equals it."""
    text = doc.model_dump_json(indent=indent)
    builder: ObjectBuilder[Doc] = ObjectBuilder(Doc)
    taken: list[tuple[Any, Any, str]] = []
    at = 0
    for piece in _splits(sizes, text):
        builder.feed(piece)
        at += len(piece)
        shot = builder.snapshot()
        fresh = partial_object(text[:at], Doc)
        assert shot == fresh and dump(shot) == dump(fresh)
        taken.append((shot, dump(shot), text[:at]))
    assert builder.complete and taken[-1][0] == doc
    for shot, dumped, prefix in taken:
        assert dump(shot) == dumped
        assert shot == partial_object(prefix, Doc)


def test_a_snapshot_shares_complete_values_and_owns_its_open_containers() -> None:
    builder: ObjectBuilder[Doc] = ObjectBuilder(Doc)
    builder.feed('{"title": "t", "groups": [{"name": "a", "leaves": []}, '
                 '{"name": "b", "leaves": [{"word": "w", "n": 1}, {"word": "x')
    live = builder.value
    shot = builder.snapshot()
    assert live is not None and shot is not None and shot == live
    # Complete values are the live object's own (nothing copied) ...
    assert shot.groups[0] is live.groups[0]
    assert shot.groups[1].leaves[0] is live.groups[1].leaves[0]
    # ... the containers still being filled are the snapshot's own.
    assert shot.groups is not live.groups
    assert shot.groups[1] is not live.groups[1]
    assert shot.groups[1].leaves is not live.groups[1].leaves
    assert shot.groups[1].leaves[1] is not live.groups[1].leaves[1]
    assert shot.groups[1].leaves[1].model_fields_set == {"word"}


def test_changing_a_snapshot_changes_neither_the_builder_nor_later_snapshots() -> None:
    """The documented contract: what a snapshot copied (the containers still open: here the
    document, its groups, the open group, its grid and the grid's open row) is its own to
    change; the builder never reads its objects back, so its later objects and the final
    value are what the text says."""
    text = ('{"title": "t", "groups": [{"name": "a", "leaves": [{"word": "w", "n": 1}], '
            '"grid": [["p", "q"]]}], "words": ["u", "v"]}')
    cut = text.index('"grid"') + 12
    builder: ObjectBuilder[Doc] = ObjectBuilder(Doc)
    builder.feed(text[:cut])
    shot = builder.snapshot()
    assert shot is not None and builder.value is not None
    before = dump(builder.value)
    shot.title = "changed"
    shot.groups.append(Group(name="extra", leaves=[]))
    shot.groups[0].grid[0].append("r")
    shot.groups[0].name = "renamed"
    assert dump(builder.value) == before
    later = builder.snapshot()
    assert dump(later) == before
    builder.feed(text[cut:])
    assert builder.complete and builder.value == Doc.model_validate_json(text)
    assert builder.finish().value == Doc.model_validate_json(text)


def test_a_snapshot_before_any_object_after_the_end_and_after_bad_text() -> None:
    builder: ObjectBuilder[Doc] = ObjectBuilder(Doc)
    assert builder.snapshot() is None
    builder.feed("  ")
    assert builder.snapshot() is None
    builder.feed('{"title": "t", "groups": []}')
    assert builder.complete and builder.snapshot() is builder.value  # nothing moves any more

    bad: ObjectBuilder[Doc] = ObjectBuilder(Doc)
    bad.feed('{"title": "t", "groups": [{"name": "a", "leaves": [}')
    assert bad.problem is not None
    frozen = bad.snapshot()
    assert frozen is not None and dump(frozen) == {"title": "t", "groups": [
        {"name": "a", "leaves": []}]}
    bad.feed('], "more": 1}')
    assert dump(frozen) == {"title": "t", "groups": [{"name": "a", "leaves": []}]}


def test_a_snapshot_of_a_list_document_with_a_string_still_arriving() -> None:
    builder: ObjectBuilder[list[list[str]]] = ObjectBuilder(list[list[str]])
    builder.feed('[["a", "b"], ["c", "de')
    shot = builder.snapshot()
    assert shot == [["a", "b"], ["c", "de"]]
    kept = copy.deepcopy(shot)
    builder.feed('f", "g"], ["h"]]')
    assert shot == kept and builder.value == [["a", "b"], ["c", "def", "g"], ["h"]]


class Circle(BaseModel):
    r: int


class Square(BaseModel):
    side: int


class Shapes(BaseModel):
    meta: dict[str, int]
    items: list[Circle | Square]
    last: str


def test_a_value_shown_only_once_complete_is_shown_the_moment_it_closes() -> None:
    """A dict field or a union list item is in the parser's container from its first
    character: the object shows it as soon as its closing bracket arrives, not only when
    something after it does (the same object as a parse of the same text at once)."""
    text = '{"meta": {"a": 1}, "items": [{"r": 1}, {"side": 2}], "last": "x"}'
    builder: ObjectBuilder[Shapes] = ObjectBuilder(Shapes)
    for at in range(1, len(text) + 1):
        builder.feed(text[at - 1 : at])
        fresh = partial_object(text[:at], Shapes)
        assert dump(builder.value) == dump(fresh), text[:at]
    meta_closed = text.index("}") + 1
    assert dump(partial_object(text[:meta_closed], Shapes)) == {"meta": {"a": 1}}
