"""Structured output: strict schemas, typed partial objects while the JSON streams, the end."""

from __future__ import annotations

import copy
import itertools
import json
import time
from datetime import datetime
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from fluxstream._reply import Choice, Outcome, Reply, ToolCall
from fluxstream.errors import FluxstreamError, ParseError
from fluxstream.structured import (
    ObjectBuilder,
    anthropic_tool,
    parse_reply,
    parse_structured,
    response_format,
    shapes,
    strict_json_schema,
    text_format,
)

# --------------------------------------------------------------------------- models


class Item(BaseModel):
    sku: str
    name: str
    qty: int
    tags: list[str] = []


class Order(BaseModel):
    """An order."""

    id: str
    items: list[Item]
    note: str | None = None
    status: Literal["open", "closed"] = "open"


class Node(BaseModel):
    name: str
    children: list[Node] = []


ORDER = Order(
    id="A-1",
    items=[
        Item(sku="s1", name='apple "pie" \\ \u00e9 \U0001f600', qty=2, tags=["x", "yy"]),
        Item(sku="s2", name="b", qty=30),
    ],
    note="deliver\nlater",
    status="closed",
)


def feed_all(builder: ObjectBuilder[Any], text: str, size: int) -> list[Any]:
    """Feed ``text`` in pieces of ``size``; the unset-excluded dump after each piece."""
    dumps = []
    for i in range(0, len(text), size):
        value = builder.feed(text[i : i + size])
        dumps.append(_dump(value))
    return dumps


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(exclude_unset=True)
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return copy.deepcopy(value)


# --------------------------------------------------------------------------- schemas


class Color(BaseModel):
    hue: Literal["red", "green"]
    weight: float = Field(default=1.0, description="how much")


class Palette(BaseModel):
    main: Color = Field(description="the main colour")  # a $ref with a sibling key
    others: list[Color] = []
    parent: Palette | None = None
    label: str | None = None
    tags: dict[str, int] = {}


@pytest.mark.parametrize("tp", [Order, Palette, Node, Item, TypeAdapter(list[Item])])
def test_strict_schema_follows_openai_rules(tp: Any) -> None:
    openai_pydantic = pytest.importorskip("openai.lib._pydantic")
    ours = strict_json_schema(tp)
    theirs = openai_pydantic.to_strict_json_schema(tp)
    assert ours == theirs


def test_strict_schema_rules_explicitly() -> None:
    schema = strict_json_schema(Palette)
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["main", "others", "parent", "label", "tags"]
    main = schema["properties"]["main"]
    assert "$ref" not in main and main["description"] == "the main colour"
    assert main["additionalProperties"] is False and main["required"] == ["hue", "weight"]
    assert "default" not in schema["properties"]["label"]  # a None default is dropped
    assert schema["$defs"]["Color"]["additionalProperties"] is False


def test_request_parameters_and_dict_passthrough() -> None:
    chat = response_format(Order)
    assert chat["type"] == "json_schema"
    assert chat["json_schema"]["name"] == "Order" and chat["json_schema"]["strict"] is True
    assert chat["json_schema"]["schema"] == strict_json_schema(Order)
    responses = text_format(Order, name="order")
    assert responses == {"type": "json_schema", "name": "order",
                         "schema": strict_json_schema(Order), "strict": True}
    tool = anthropic_tool(Order)
    assert tool["name"] == "Order" and tool["description"] == "An order."
    assert tool["input_schema"] == Order.model_json_schema()
    strict_tool = anthropic_tool(Order, name="emit", strict=True)
    assert strict_tool["input_schema"] == strict_json_schema(Order)
    assert strict_tool["strict"] is True and strict_tool["name"] == "emit"
    given_dict = {"type": "json_object"}
    assert response_format(given_dict) is given_dict
    assert text_format(given_dict) is given_dict
    assert anthropic_tool(given_dict) is given_dict
    assert response_format(TypeAdapter(list[Item]))["json_schema"]["name"] == "list_Item"


def test_strict_schema_does_not_mutate_the_model_schema() -> None:
    before = copy.deepcopy(Palette.model_json_schema())
    strict_json_schema(Palette)
    assert Palette.model_json_schema() == before


# --------------------------------------------------------------------------- partial objects


def test_partial_objects_fill_in_field_by_field() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    text = ORDER.model_dump_json()
    assert builder.feed(text[:1]) is not None
    obj = builder.value
    assert isinstance(obj, Order)
    assert obj.model_fields_set == set()
    assert not hasattr(obj, "id")  # required and not started: absent
    assert obj.note is None  # a default, but not reported
    builder.feed(text[1:12])  # '"id":"A-1",'... up to the next key
    assert obj.id == "A-1" and obj.model_fields_set == {"id"}
    cut = text.index('"qty":2')  # inside the first item, before its qty
    builder.feed(text[12:cut])
    assert obj.items[0].model_fields_set == {"sku", "name"}
    assert obj.items[0].name == ORDER.items[0].name
    builder.feed(text[cut : cut + 7])  # '"qty":' and the digit: a number is not final yet
    assert "qty" not in obj.items[0].model_fields_set
    builder.feed(text[cut + 7 : cut + 8])  # the comma ends the number
    assert obj.items[0].qty == 2
    assert builder.open_path() == ("items", 0, "qty")
    builder.feed(text[cut + 8 :])
    assert builder.complete and builder.value == ORDER
    result = builder.finish()
    assert result.complete and result.value == ORDER and result.reason == "complete"


def test_strings_grow_and_lists_grow() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    dumps = feed_all(builder, ORDER.model_dump_json(), 1)
    names = [d["items"][0].get("name") for d in dumps if d and d.get("items")]
    grown = [n for n in names if n is not None]
    assert grown[0] == "" and grown[-1] == ORDER.items[0].name
    assert all(b.startswith(a) for a, b in itertools.pairwise(grown))
    lengths = [len(d.get("items", [])) for d in dumps if d]
    assert lengths == sorted(lengths) and lengths[-1] == 2


def test_literal_and_numbers_appear_only_complete() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    seen = set()
    for dump in feed_all(builder, ORDER.model_dump_json(), 1):
        if dump and "status" in dump:
            seen.add(dump["status"])
        for item in (dump or {}).get("items", []):
            if "qty" in item:
                seen.add(item["qty"])
    assert seen == {"closed", 2, 30}


def test_the_final_object_is_the_non_streamed_parse() -> None:
    text = ORDER.model_dump_json(indent=2)
    for size in (1, 3, 7, 64, len(text)):
        builder: ObjectBuilder[Order] = ObjectBuilder(Order)
        feed_all(builder, text, size)
        assert builder.finish().value == Order.model_validate_json(text) == ORDER


def test_recursive_models_and_type_adapters() -> None:
    tree = Node(name="root", children=[Node(name="a", children=[Node(name="b")]), Node(name="c")])
    builder: ObjectBuilder[Node] = ObjectBuilder(Node)
    dumps = feed_all(builder, tree.model_dump_json(), 2)
    assert {"name": "root", "children": [{"name": "a", "children": [{"name": "b"}]}]} in dumps
    assert builder.finish().value == tree
    items = [ORDER.items[0], ORDER.items[1]]
    list_builder: ObjectBuilder[list[Item]] = ObjectBuilder(list[Item])
    text = TypeAdapter(list[Item]).dump_json(items).decode()
    dumps = feed_all(list_builder, text, 5)
    assert [len(d) for d in dumps] == sorted(len(d) for d in dumps)
    assert list_builder.finish().value == items


def test_complete_fields_are_validated_by_their_own_validators() -> None:
    class Shout(BaseModel):
        model_config = ConfigDict(strict=True)
        word: str = Field(alias="Word")
        when: datetime
        count: int = Field(ge=0)

        @field_validator("word")
        @classmethod
        def upper(cls, value: str) -> str:
            return value.upper()

    text = '{"Word": "hey", "when": "2026-01-02T03:04:05Z", "count": 3}'
    builder: ObjectBuilder[Shout] = ObjectBuilder(Shout)
    builder.feed(text[:12])  # the word is still arriving: shown as received
    assert builder.value is not None and builder.value.word == "he"
    builder.feed(text[12:-12])
    obj = builder.value
    assert obj.word == "HEY"  # complete: validated exactly as the whole model would be
    assert obj.when == datetime.fromisoformat("2026-01-02T03:04:05+00:00")  # JSON-mode strict
    builder.feed(text[-12:])
    assert builder.finish().value == Shout.model_validate_json(text)


def test_model_after_validators_run_only_on_the_whole_object() -> None:
    class Pair(BaseModel):
        low: int
        high: int

        @model_validator(mode="after")
        def ordered(self) -> Pair:
            if self.low > self.high:
                raise ValueError("low > high")
            return self

    builder: ObjectBuilder[Pair] = ObjectBuilder(Pair)
    builder.feed('{"low": 5, ')
    assert builder.value is not None and builder.value.low == 5 and builder.problem is None
    builder.feed('"high": 1}')
    assert builder.problem == "schema violation"
    with pytest.raises(ParseError) as info:
        builder.finish()
    assert info.value.reason == "schema" and "low > high" in str(info.value.errors)


# --------------------------------------------------------------------------- the end


def test_truncated_reply_gives_the_last_partial_object_and_says_so() -> None:
    text = ORDER.model_dump_json()
    cut = text.index('"qty":30')
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    builder.feed(text[:cut])
    result = builder.finish(truncated=True, reason="length")
    assert not result.complete and result.reason == "length"
    assert result.value is not None and result.value.items[0] == ORDER.items[0]
    assert result.value.items[1].model_fields_set == {"sku", "name"}
    assert result.text == text[:cut]


def test_incomplete_json_without_truncation_is_a_parse_error() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    builder.feed('{"id": "x", "items": [')
    with pytest.raises(ParseError) as info:
        builder.finish()
    err = info.value
    assert isinstance(err, FluxstreamError) and isinstance(err, ValueError)
    assert err.reason == "incomplete" and err.text == '{"id": "x", "items": ['
    assert err.partial is not None and err.partial.id == "x"
    assert err.errors and err.errors[0]["type"] == "json_invalid"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Sure! Here is the order: {}", "invalid_json"),
        ("[1, 2, 3]", "not_an_object"),
        ('"just a string"', "not_an_object"),
        ('{"id": "x", "items": [}', "invalid_json"),
        ("", "incomplete"),
    ],
)
def test_bad_text_never_raises_while_feeding(text: str, reason: str) -> None:
    for truncated in (False, True):
        builder: ObjectBuilder[Order] = ObjectBuilder(Order)
        for ch in text:
            builder.feed(ch)  # never raises
        if truncated and reason == "incomplete":
            assert not builder.finish(truncated=True).complete
            continue
        with pytest.raises(ParseError) as info:
            builder.finish(truncated=truncated)
        assert info.value.reason == reason, info.value


def test_a_schema_violation_stops_the_partial_objects_at_the_last_valid_state() -> None:
    text = '{"id": "x", "items": [{"sku": "a", "name": "n", "qty": 1}, {"sku": "b", "qty": "many"'
    text += ', "name": "m"}], "note": "later"}'
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    dumps = feed_all(builder, text, 4)
    assert builder.problem == "schema violation"
    assert builder.errors[0]["loc"] == ("items", 1, "qty")
    assert dumps[-1] == {"id": "x", "items": [{"sku": "a", "name": "n", "qty": 1}, {"sku": "b"}]}
    with pytest.raises(ParseError) as info:
        builder.finish()
    assert info.value.errors[0]["loc"] == ("items", 1, "qty")
    assert info.value.partial is builder.value


def test_extra_keys_are_a_violation_only_when_forbidden() -> None:
    class Closed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        a: int

    builder: ObjectBuilder[Closed] = ObjectBuilder(Closed)
    builder.feed('{"a": 1, "b": 2, "c"')
    assert builder.problem == "schema violation" and builder.errors[0]["loc"] == ("b",)
    lax: ObjectBuilder[Item] = ObjectBuilder(Item)
    lax.feed('{"sku": "s", "extra": [1, 2], "name": "n", "qty": 1}')
    assert lax.problem is None and lax.finish().value == Item(sku="s", name="n", qty=1)


@pytest.mark.parametrize("fence", ["```json\n", "```\n", "  ```JSON \r\n"])
def test_markdown_fences_are_stripped(fence: str) -> None:
    body = ORDER.model_dump_json(indent=1)
    text = f"{fence}{body}\n```\n"
    for size in (1, 5, len(text)):
        builder: ObjectBuilder[Order] = ObjectBuilder(Order)
        dumps = feed_all(builder, text, size)
        assert builder.problem is None
        assert dumps[-1] == ORDER.model_dump()
        assert builder.finish().value == ORDER
    assert parse_structured(text, Order) == ORDER


def test_text_after_the_object_is_an_error_at_the_end() -> None:
    builder: ObjectBuilder[Item] = ObjectBuilder(Item)
    builder.feed('{"sku": "s", "name": "n", "qty": 1} and more')
    assert builder.complete  # the object itself was complete and valid when it closed
    with pytest.raises(ParseError) as info:
        builder.finish()
    assert info.value.reason == "invalid_json"


def test_refusal_is_surfaced() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    result = builder.finish(refusal="I can't help with that.")
    assert result.refusal == "I can't help with that." and result.value is None
    assert not result.complete and result.reason == "refusal"


def _reply(text: str, *, finish: str | None, outcome: Outcome, refusal: str | None = None,
           calls: list[ToolCall] | None = None) -> Reply:
    choice = Choice(index=0, text=text, refusal=refusal, finish_reason=finish,
                    tool_calls=calls or [])
    return Reply(choices=[choice], outcome=outcome)


def test_parse_reply_reads_outcome_finish_reason_and_refusal() -> None:
    text = ORDER.model_dump_json()
    done = parse_reply(_reply(text, finish="stop", outcome=Outcome.DONE), Order)
    assert done.complete and done.value == ORDER
    cut = parse_reply(_reply(text[:40], finish="length", outcome=Outcome.DONE), Order)
    assert not cut.complete and cut.reason == "length" and cut.value is not None
    lost = parse_reply(_reply(text[:40], finish=None, outcome=Outcome.TRUNCATED), Order)
    assert not lost.complete and lost.reason == "truncated"
    refused = parse_reply(_reply("", finish="stop", outcome=Outcome.DONE, refusal="no"), Order)
    assert refused.refusal == "no" and refused.value is None
    with pytest.raises(ParseError):
        parse_reply(_reply(text[:40], finish="stop", outcome=Outcome.DONE), Order)
    anthropic_cut = parse_reply(_reply(text[:40], finish="max_tokens", outcome=Outcome.DONE),
                                Order)
    assert not anthropic_cut.complete and anthropic_cut.reason == "max_tokens"
    said_no = _reply("I won't.", finish="refusal", outcome=Outcome.DONE)
    said_no.choices[0].stop = "refusal"
    assert parse_reply(said_no, Order).refusal == "I won't."


def test_tool_call_arguments_as_structured_output() -> None:
    from fluxstream.structured import parse_tool_call

    call = ToolCall(index=0, id="t", name="Order", arguments=ORDER.model_dump_json()[:50])
    partial = parse_tool_call(call, Order, finish_reason="max_tokens")
    assert not partial.complete and partial.value is not None and partial.value.id == "A-1"
    whole = ToolCall(index=0, id="t", name="Order", arguments=ORDER.model_dump_json())
    assert parse_tool_call(whole, Order).value == whole.parse_arguments(Order)
    reply = _reply("", finish="length", outcome=Outcome.DONE, calls=[call])
    cut = parse_tool_call(reply.choices[0].tool_calls[0], Order, reply=reply)
    assert not cut.complete and cut.reason == "length"


# --------------------------------------------------------------------------- properties

orders = st.builds(
    Order,
    id=st.text(max_size=8),
    items=st.lists(
        st.builds(Item, sku=st.text(max_size=5), name=st.text(max_size=12),
                  qty=st.integers(-(10**12), 10**12), tags=st.lists(st.text(max_size=4),
                                                                      max_size=3)),
        max_size=4,
    ),
    note=st.none() | st.text(max_size=10),
    status=st.sampled_from(["open", "closed"]),
)


def _splits(draw_sizes: list[int], text: str) -> list[str]:
    pieces, pos, k = [], 0, 0
    while pos < len(text):
        step = draw_sizes[k % len(draw_sizes)]
        pieces.append(text[pos : pos + step])
        pos += step
        k += 1
    return pieces


def _grows(before: Any, after: Any, path: tuple[Any, ...] | None) -> None:
    """``after`` extends ``before``: values off the open ``path`` are unchanged; on it, a
    string may grow, a list may gain items, an object may gain fields."""
    if path is None:
        assert before == after
    elif isinstance(before, dict):
        assert isinstance(after, dict)
        for key, value in before.items():
            assert key in after
            _grows(value, after[key], path[1:] if path and path[0] == key else None)
    elif isinstance(before, list):
        assert isinstance(after, list) and len(before) <= len(after)
        for index, value in enumerate(before):
            _grows(value, after[index], path[1:] if path and path[0] == index else None)
    elif isinstance(before, str) and path == ():
        assert isinstance(after, str) and after.startswith(before)
    else:
        assert before == after


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=orders, sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
       indent=st.sampled_from([None, 2]), ascii=st.booleans())
def test_partial_objects_depend_only_on_the_text_so_far(
    order: Order, sizes: list[int], indent: int | None, ascii: bool
) -> None:
    text = json.dumps(order.model_dump(), indent=indent, ensure_ascii=ascii)
    streamed: ObjectBuilder[Order] = ObjectBuilder(Order)
    pos = 0
    for piece in _splits(sizes, text):
        pos += len(piece)
        got = _dump(streamed.feed(piece))
        once: ObjectBuilder[Order] = ObjectBuilder(Order)
        assert got == _dump(once.feed(text[:pos]))  # the same as reading the prefix at once
    assert streamed.finish().value == order == Order.model_validate_json(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=orders, sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
       fenced=st.booleans())
def test_partial_objects_only_move_forward(order: Order, sizes: list[int], fenced: bool) -> None:
    text = order.model_dump_json()
    if fenced:
        text = f"```json\n{text}\n```"
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    before: Any = None
    path: tuple[Any, ...] | None = ()
    for piece in _splits(sizes, text):
        after = _dump(builder.feed(piece))
        if before is not None:
            _grows(before, after, path)
        before, path = after, builder.open_path()
    assert builder.problem is None and builder.finish().value == order


@settings(max_examples=100, deadline=None)
@given(order=orders, cut=st.integers(0, 10_000), size=st.integers(1, 9))
def test_any_cut_is_a_stated_partial_or_the_whole(order: Order, cut: int, size: int) -> None:
    text = order.model_dump_json()
    cut = min(cut, len(text))
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    feed_all(builder, text[:cut], size)
    result = builder.finish(truncated=True)
    if cut == len(text):
        assert result.complete and result.value == order
    else:
        assert not result.complete and result.reason == "truncated"
        if result.value is not None:
            assert isinstance(result.value, Order)


# --------------------------------------------------------------------------- cost


class Row(BaseModel):
    key: str
    label: str
    value: int
    flags: list[str]


class Table(BaseModel):
    title: str
    rows: list[Row]


def _table_text(rows: int) -> str:
    table = Table(title="t", rows=[Row(key=f"k{i}", label=f"row number {i}", value=i,
                                       flags=["a", "bb"]) for i in range(rows)])
    return table.model_dump_json()


def test_validation_work_is_linear_in_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Operation count: every complete value is validated once where it completes, plus once
    more inside each mirrored enclosing object when that completes (bounded by the type's
    depth), so the bytes validated stay a small constant times the text, at any delta size."""
    validated = [0]
    real = shapes.Shape.validate

    def counting(self: shapes.Shape, value: Any) -> Any:
        validated[0] += len(json.dumps(value))
        return real(self, value)

    monkeypatch.setattr(shapes.Shape, "validate", counting)
    for rows in (200, 2000):
        text = _table_text(rows)
        validated[0] = 0
        builder: ObjectBuilder[Table] = ObjectBuilder(Table)
        for i in range(0, len(text), 10):
            builder.feed(text[i : i + 10])
        assert builder.complete
        assert validated[0] < 4 * len(text), (rows, validated[0], len(text))


def _time_per_delta(text: str) -> float:
    """CPU time (not wall time: the machine is shared), best of 5, with the cyclic GC paused:
    in a long test run the GC's cost follows the whole process's heap (every earlier test's
    objects), which says nothing about this algorithm."""
    import gc

    best = float("inf")
    for _ in range(5):
        gc.collect()
        gc.disable()
        try:
            builder: ObjectBuilder[Table] = ObjectBuilder(Table)
            start = time.process_time()
            for i in range(0, len(text), 10):
                builder.feed(text[i : i + 10])
            builder.finish()
            best = min(best, time.process_time() - start)
        finally:
            gc.enable()
    return best


def test_a_partial_object_after_every_delta_costs_linear_time() -> None:
    """Ten times the text (and ten times the deltas, each followed by reading the partial
    object) costs about ten times as much; re-parsing per delta would cost a hundred."""
    small, large = _table_text(300), _table_text(3000)
    ratio = _time_per_delta(large) / _time_per_delta(small)
    assert ratio < 20, ratio


def test_validation_errors_are_pydantic_errors() -> None:
    with pytest.raises(ParseError) as info:
        parse_structured('{"sku": 1}', Item)
    locs = {tuple(e["loc"]) for e in info.value.errors}
    assert locs == {("sku",), ("name",), ("qty",)}
    with pytest.raises(ValidationError):
        Item.model_validate_json('{"sku": 1}')


# --------------------------------------------------------------------------- more shapes


def test_optional_nested_models_and_opaque_values() -> None:
    palette = Palette(main=Color(hue="red"), parent=Palette(main=Color(hue="green", weight=2)),
                      label="warm", tags={"a": 1, "b": 2})
    text = palette.model_dump_json()
    builder: ObjectBuilder[Palette] = ObjectBuilder(Palette)
    dumps = feed_all(builder, text, 1)
    # the nested optional model fills in like the top one
    assert any(d and d.get("parent") == {"main": {"hue": "green"}} for d in dumps)
    # a dict[str, int] is opaque: absent until complete, then whole
    tags_seen = [d["tags"] for d in dumps if d and "tags" in d]
    assert tags_seen and all(t == {"a": 1, "b": 2} for t in tags_seen)
    assert builder.finish().value == palette


def test_aliases_and_names() -> None:
    class Aliased(BaseModel):
        model_config = ConfigDict(populate_by_name=True)
        full_name: str = Field(alias="fullName")
        age: int

    for key in ("fullName", "full_name"):
        builder: ObjectBuilder[Aliased] = ObjectBuilder(Aliased)
        builder.feed(f'{{"{key}": "Ada Lovel')
        assert builder.value is not None and builder.value.full_name == "Ada Lovel"
        assert builder.open_path() == (key,)
        builder.feed('ace", "age": 36}')
        assert builder.finish().value == Aliased(full_name="Ada Lovelace", age=36)


def test_live_object_snapshot_and_version() -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    builder.feed('{"id": "x", "items": [{"sku": "a", "name": "n", "qty": 1}')
    live, frozen = builder.value, builder.snapshot()
    version = builder.version
    builder.feed("   \n ")
    assert builder.version == version  # whitespace changed nothing
    builder.feed(', {"sku": "b"')
    assert builder.version > version
    assert live is builder.value and live is not None and len(live.items) == 2
    assert frozen is not None and len(frozen.items) == 1  # the snapshot did not move
    builder.feed(', "name": "m", "qty": 2}]}')
    assert builder.open_path() is None and builder.complete
    assert builder.text.endswith('"qty": 2}]}')


def test_validators_that_need_other_fields_stop_the_parts_not_the_result() -> None:
    from pydantic import ValidationInfo

    class Range(BaseModel):
        low: int
        high: int

        @field_validator("high")
        @classmethod
        def above(cls, value: int, info: ValidationInfo) -> int:
            if value < info.data["low"]:
                raise ValueError("high < low")
            return value

    builder: ObjectBuilder[Range] = ObjectBuilder(Range)
    builder.feed('{"low": 1, "high": 5')
    builder.feed(', ')  # alone, "high"'s validator cannot run: parts stop, no error
    assert builder.problem is None and builder.value is not None
    assert builder.value.model_fields_set == {"low"}
    builder.feed('"note": null}')
    assert builder.finish().value == Range(low=1, high=5)


def test_parse_error_message_is_bounded() -> None:
    text = '{"sku": "' + "x" * 100_000
    with pytest.raises(ParseError) as info:
        parse_structured(text, Item)
    assert len(str(info.value)) < 1000 and info.value.text == text


def test_deep_recursive_documents_stay_cheap_per_delta() -> None:
    """The open path is compared from its top (only changed levels cost), and unchanged
    levels are not revisited: a 90-deep tree (180 JSON levels; pydantic's JSON parser stops
    at about 200) fed one character at a time stays fast."""
    depth = 90
    text = '{"name": "leaf", "children": []}'
    for level in range(depth):
        text = f'{{"name": "n{level}", "children": [{text}]}}'
    builder: ObjectBuilder[Node] = ObjectBuilder(Node)
    start = time.process_time()  # CPU time: a loaded machine's other processes do not count
    for ch in text:
        builder.feed(ch)
    elapsed = time.process_time() - start
    assert builder.finish().value == Node.model_validate_json(text)
    assert elapsed < 2.0, elapsed


_JSON_CHARS = list('{}[]:,"\\ \n0123456789.-+eEtruefalsn`ab\u00e9\U0001f600')
json_ish = st.text(alphabet=st.sampled_from(_JSON_CHARS), max_size=80)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=st.sampled_from(["", "```json\n", '{"id": "x", "items": [', '{"items": [{"sku": ']),
       noise=json_ish, sizes=st.lists(st.integers(1, 7), min_size=1, max_size=5),
       truncated=st.booleans())
def test_arbitrary_text_never_raises_anything_undocumented(
    prefix: str, noise: str, sizes: list[int], truncated: bool
) -> None:
    builder: ObjectBuilder[Order] = ObjectBuilder(Order)
    before: Any = None
    path: tuple[Any, ...] | None = ()
    frozen: Any = None
    for piece in _splits(sizes, prefix + noise):
        stopped = builder.problem is not None
        after = _dump(builder.feed(piece))  # never raises
        if stopped:
            assert after == frozen  # a stopped object never changes again
        elif before is not None and not builder.complete:
            _grows(before, after, path)  # the last valid state may be the one it stopped at
        if builder.problem is not None and frozen is None:
            frozen = after
        before, path = after, builder.open_path()
    try:
        result = builder.finish(truncated=truncated)
    except ParseError:
        return
    assert result.complete or truncated
    if result.complete:
        assert result.value == Order.model_validate_json(
            (prefix + noise).strip().removeprefix("```json").strip().removesuffix("```"))


def test_nested_lists_unions_and_one_pass_partials() -> None:
    from fluxstream.structured import partial_object

    class Cat(BaseModel):
        kind: Literal["cat"] = "cat"
        lives: int

    class Dog(BaseModel):
        kind: Literal["dog"] = "dog"
        good: bool

    class Mixed(BaseModel):
        grid: list[list[str]]
        pets: list[Cat | Dog]
        maybe: list[int] | None = None

    value = Mixed(grid=[["a", "bc"], [], ["d"]], pets=[Cat(lives=9), Dog(good=True)], maybe=[1])
    text = value.model_dump_json()
    builder: ObjectBuilder[Mixed] = ObjectBuilder(Mixed)
    dumps = feed_all(builder, text, 2)
    assert {"grid": [["a", "b"]]} in dumps  # inner lists and their strings grow
    pets = [d["pets"] for d in dumps if d and "pets" in d]
    whole = ([], [{"kind": "cat", "lives": 9}], value.model_dump()["pets"])
    assert pets[0] == [] and all(p in whole for p in pets)  # union items appear only whole
    assert builder.finish().value == value
    half = partial_object(text[: text.index('"pets"')], Mixed)
    assert isinstance(half, Mixed) and half.grid == value.grid
    assert "pets" not in half.model_fields_set


def test_structured_is_sans_io() -> None:
    """``fluxstream.structured`` sits beside the assembler: importing it loads no HTTP stack."""
    import subprocess
    import sys

    code = ("import sys, fluxstream.structured; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('httpx', 'anyio', 'aiohttp', 'fluxstream._stream', 'fluxstream._client')"
            " or m in ('fluxstream._stream', 'fluxstream._client')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
