"""The structured-output API end to end: ``response_format=Model`` on the three endpoints,
``stream.objects()``, ``stream.parsed`` / ``reply.parse(Model)`` and
``stream.partial_tool_call()``, with the real client against the embedded server over
127.0.0.1, on asyncio and trio.

The server streams schema-shaped JSON for a Chat ``response_format``, a Responses
``text.format`` and an Anthropic tool forced by ``tool_choice``
(``fluxstream/server/schema_value.py``), so every assertion here is about what the client
makes of real bytes.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import time
from typing import Any, Literal

import httpx
import pytest
from pydantic import BaseModel, TypeAdapter

import fluxstream
from fluxstream._reply import Reply
from fluxstream.errors import ParseError
from fluxstream.server import Server
from fluxstream.structured import ObjectBuilder, partial_object, strict_json_schema

pytestmark = pytest.mark.anyio

USER = [{"role": "user", "content": "Plan a day in Zürich"}]
FORMATS = ("chat", "responses", "messages")


class Stop(BaseModel):
    place: str
    minutes: int
    note: str | None


class Plan(BaseModel):
    """A day out."""

    title: str
    city: str
    mood: Literal["calm", "busy"]
    budget: float
    stops: list[Stop]
    tags: list[str]
    backup: Stop | None


def client_for(server: Server) -> fluxstream.AsyncClient:
    return fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-s")


def open_stream(client: fluxstream.AsyncClient, api: str, fmt: Any = Plan,
                **extra: Any) -> fluxstream.ReplyStream:
    if api == "chat":
        return client.chat.stream(model="m", messages=USER, response_format=fmt, **extra)
    if api == "responses":
        return client.responses.stream(model="m", input=USER, response_format=fmt, **extra)
    return client.messages.stream(model="m", max_tokens=1024, messages=USER,
                                  response_format=fmt, **extra)


async def unstreamed(server: Server, api: str, body: dict[str, Any]) -> Plan:
    """The object of the non-streamed answer to the request the client sent (``stream``
    false), parsed in one go."""
    path = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as http:
        answer = (await http.post(path[api], json={**body, "stream": False})).json()
    if api == "chat":
        return Plan.model_validate_json(answer["choices"][0]["message"]["content"])
    if api == "responses":
        return Plan.model_validate_json(answer["output"][0]["content"][0]["text"])
    return Plan.model_validate(answer["content"][0]["input"])


def grows(before: Any, after: Any) -> bool:
    """``after`` extends ``before``: keys kept, strings and lists only longer, values kept."""
    if isinstance(before, dict):
        return isinstance(after, dict) and all(
            k in after and grows(v, after[k]) for k, v in before.items())
    if isinstance(before, list):
        return isinstance(after, list) and len(before) <= len(after) and all(
            grows(b, a) for b, a in zip(before, after, strict=False))
    if isinstance(before, str):
        return isinstance(after, str) and after.startswith(before)
    return bool(before == after)


# ---------------------------------------------------------------------- the request


@pytest.mark.parametrize("api", FORMATS)
async def test_a_model_is_sent_as_the_providers_schema(aserver: Server, api: str) -> None:
    async with client_for(aserver) as client:
        await open_stream(client, api).until_done()
    body = aserver.records.requests[-1].json
    if api == "chat":
        assert body["response_format"] == {"type": "json_schema", "json_schema": {
            "name": "Plan", "schema": strict_json_schema(Plan), "strict": True}}
    elif api == "responses":
        assert body["text"]["format"] == {"type": "json_schema", "name": "Plan",
                                          "schema": strict_json_schema(Plan), "strict": True}
        assert "response_format" not in body
    else:
        assert body["tools"] == [{"name": "Plan", "input_schema": Plan.model_json_schema(),
                                  "description": "A day out."}]
        assert body["tool_choice"] == {"type": "tool", "name": "Plan"}


@pytest.mark.parametrize("api", FORMATS)
async def test_a_dict_passes_through_untouched(aserver: Server, api: str) -> None:
    fmt: dict[str, Any]
    if api == "chat":
        fmt = {"type": "json_object"}
    elif api == "responses":
        fmt = {"type": "json_schema", "name": "x", "schema": {"type": "object"}}
    else:
        fmt = {"name": "x", "input_schema": {"type": "object"}}
    async with client_for(aserver) as client:
        stream = open_stream(client, api, fmt)
        await stream.until_done()
        with pytest.raises(LookupError):
            stream.parsed  # noqa: B018 - a dict carries no type to read the reply as
        with pytest.raises(ValueError):
            stream.objects()
    body = aserver.records.requests[-1].json
    sent = {"chat": lambda: body["response_format"], "responses": lambda: body["text"]["format"],
            "messages": lambda: body["tools"][0]}[api]()
    assert sent == fmt


async def test_an_anthropic_dict_without_a_name_is_a_typed_error(aserver: Server) -> None:
    async with client_for(aserver) as client:
        with pytest.raises(ValueError, match="needs a name"):
            client.messages.stream(model="m", max_tokens=9, messages=USER,
                                   response_format={"input_schema": {"type": "object"}})
    assert aserver.records.requests == []


async def test_a_type_adapter_type_is_accepted(aserver: Server) -> None:
    """A non-model type (``list[Stop]`` here) goes through ``TypeAdapter``: the request
    carries its schema, the partial lists grow, the last one is the validated list."""
    async with client_for(aserver) as client:
        stream = client.chat.stream(model="m", messages=USER, response_format=list[Stop])
        async with stream:
            objects = [o async for o in stream.objects()]
    body = aserver.records.requests[-1].json
    assert body["response_format"]["json_schema"]["schema"] == strict_json_schema(
        TypeAdapter(list[Stop]))
    final = TypeAdapter(list[Stop]).validate_json(stream.reply.text)
    assert len(objects) > 5 and objects[-1] == final == stream.parsed.value
    for before, after in itertools.pairwise(objects):
        assert grows([s.model_dump(exclude_unset=True) for s in before],
                     [s.model_dump(exclude_unset=True) for s in after])


# ---------------------------------------------------------------------- objects()


@pytest.mark.parametrize("api", FORMATS)
async def test_objects_grow_and_the_last_is_the_unstreamed_parse(
    aserver: Server, api: str
) -> None:
    async with client_for(aserver) as client:
        async with open_stream(client, api) as stream:
            objects = [o async for o in stream.objects()]
    assert stream.outcome is fluxstream.Outcome.DONE
    body = aserver.records.requests[-1].json
    full = await unstreamed(aserver, api, body)
    assert len(objects) > 20 and all(type(o) is Plan for o in objects)
    dumps = [o.model_dump(exclude_unset=True) for o in objects]
    for before, after in itertools.pairwise(dumps):
        assert grows(before, after), (before, after)
    # Snapshots: each object is its own (an earlier one did not move on with the stream).
    assert len({id(o) for o in objects}) == len(objects)
    assert objects[0].model_fields_set < set(Plan.model_fields)
    assert objects[-1] == full
    result = stream.parsed
    assert result.complete and result.value == full
    assert stream.reply.parse(Plan).value == full


@pytest.mark.parametrize("api", FORMATS)
async def test_live_objects_are_one_object_updated_in_place(aserver: Server, api: str) -> None:
    async with client_for(aserver) as client:
        async with open_stream(client, api) as stream:
            seen = [o async for o in stream.objects(live=True)]
    assert len(seen) > 20
    partials = [o for o in seen if o is seen[0]]
    assert len(partials) >= len(seen) - 1  # the final validated object may be a new one
    assert seen[-1] == stream.parsed.value


async def test_objects_coalesced_at_most_one_per_frame(aserver: Server) -> None:
    """The server writes the JSON in many small pieces with a pause between them; with
    ``coalesce`` the objects come at most one per interval (the first at once), and the last
    is still the whole object."""
    frame = 0.05
    async with client_for(aserver) as client:
        stream = client.chat.stream(
            model="m", messages=USER, response_format=Plan,
            extra_headers={"X-Fluxstream-Fault": "drip=0.004"})
        times: list[float] = []
        objects: list[Plan] = []
        async with stream:
            async for plan in stream.objects(coalesce=frame):
                times.append(time.monotonic())
                objects.append(plan)
        plain = client.chat.stream(model="m", messages=USER, response_format=Plan,
                                   extra_headers={"X-Fluxstream-Fault": "drip=0.004"})
        async with plain:
            every = [o async for o in plain.objects()]
    assert 2 <= len(objects) < len(every) / 3
    # At most one per frame: gaps shorter than a frame only for the first and the last
    # (the end flushes at once); a loaded machine only stretches gaps.
    short = [b - a for a, b in itertools.pairwise(times[:-1]) if b - a < frame * 0.9]
    assert short == []
    assert objects[-1] == every[-1] == stream.parsed.value
    for before, after in itertools.pairwise(objects):
        assert grows(before.model_dump(exclude_unset=True), after.model_dump(exclude_unset=True))


async def test_objects_and_events_together(aserver: Server) -> None:
    """Iterating the events and then reading ``parsed`` works without ``objects()`` (the
    stream tracks the type it was opened with)."""
    async with client_for(aserver) as client:
        async with client.chat.stream(model="m", messages=USER, response_format=Plan) as s:
            kinds = {e.type async for e in s}
    assert "text" in kinds and s.parsed.complete


# ---------------------------------------------------------------------- parsed / parse()


@pytest.mark.parametrize("api", FORMATS)
async def test_max_tokens_gives_the_last_partial_and_says_so(aserver: Server, api: str) -> None:
    limit = {"max_output_tokens": 25} if api == "responses" else {"max_tokens": 25}
    async with client_for(aserver) as client:
        if api == "messages":
            stream = client.messages.stream(model="m", messages=USER, response_format=Plan,
                                            **limit)
        else:
            stream = open_stream(client, api, **limit)
        async with stream:
            objects = [o async for o in stream.objects()]
    result = stream.parsed
    assert stream.reply.choices[0].stop == "length"
    assert not result.complete and result.reason == stream.reply.choices[0].finish_reason
    assert result.value is not None and result.value == objects[-1]
    assert "title" in result.value.model_fields_set
    assert "tags" not in result.value.model_fields_set


@pytest.mark.parametrize("api", FORMATS)
async def test_complete_returns_a_reply_that_parses(aserver: Server, api: str) -> None:
    async with client_for(aserver) as client:
        if api == "chat":
            reply = await client.chat.complete(model="m", messages=USER, response_format=Plan)
        elif api == "responses":
            reply = await client.responses.complete(model="m", input=USER,
                                                    response_format=Plan)
        else:
            reply = await client.messages.complete(model="m", max_tokens=1024, messages=USER,
                                                   response_format=Plan)
    body = aserver.records.requests[-1].json
    result = reply.parse(Plan)
    assert result.complete and result.value == await unstreamed(aserver, api, body)
    # The reply stays a plain pydantic model: dumped, sent as JSON and validated back, it
    # is equal and parses the same (the type is an argument, never stored on it).
    again = Reply.model_validate_json(reply.model_dump_json())
    assert again == reply and again.parse(Plan) == result
    assert Reply.model_validate(json.loads(json.dumps(reply.model_dump(mode="json")))) == reply


async def test_a_network_cut_is_a_stated_partial_and_the_token_resumes_it(
    aserver: Server,
) -> None:
    """Cut mid-object without resume: ``parsed`` is the stated partial. The resume token
    round-trips through JSON; ``client.chat.resume(token)`` + ``objects(Plan)`` continues
    the same object exactly (no piece twice, none missing) to the unstreamed parse."""
    async with client_for(aserver) as client:
        stream = client.chat.stream(
            model="m", messages=USER, response_format=Plan,
            resume=fluxstream.ResumePolicy.off(),
            extra_headers={"X-Fluxstream-Fault": "drop-after-events=30",
                           "X-Fluxstream-Profile": "sse-ids"})
        async with stream:
            before = [o async for o in stream.objects()]
        assert stream.outcome is fluxstream.Outcome.TRUNCATED
        cut = stream.parsed
        assert not cut.complete and cut.reason == "truncated" and cut.value == before[-1]
        body = aserver.records.requests[-1].json
        token = json.loads(json.dumps(stream.resume_token()))
        assert Reply.model_validate(token["reply"]) == stream.reply
        resumed = client.chat.resume(token, extra_headers={"X-Fluxstream-Profile": "sse-ids"})
        async with resumed:
            after = [o async for o in resumed.objects(Plan)]
    full = await unstreamed(aserver, "chat", body)
    assert after and after[-1] == full and resumed.parsed.value == full
    assert grows(before[-1].model_dump(exclude_unset=True),
                 after[0].model_dump(exclude_unset=True))
    for a, b in itertools.pairwise(after):
        assert grows(a.model_dump(exclude_unset=True), b.model_dump(exclude_unset=True))


async def test_a_model_ignoring_the_schema_is_a_parse_error_not_a_broken_loop(
    aserver: Server,
) -> None:
    async with client_for(aserver) as client:
        stream = client.chat.stream(model="m", messages=USER, response_format=Plan,
                                    extra_headers={"X-Fluxstream-Profile": "ignore-schema"})
        async with stream:
            objects = [o async for o in stream.objects()]
    assert objects == [] and stream.outcome is fluxstream.Outcome.DONE
    with pytest.raises(ParseError) as info:
        stream.parsed  # noqa: B018
    assert info.value.reason == "invalid_json" and info.value.text == stream.reply.text


async def test_fenced_json_still_parses(aserver: Server) -> None:
    async with client_for(aserver) as client:
        stream = client.responses.stream(model="m", input=USER, response_format=Plan,
                                         extra_headers={"X-Fluxstream-Profile": "fenced-json"})
        async with stream:
            objects = [o async for o in stream.objects()]
    assert stream.reply.text.startswith("```json")
    assert objects and objects[-1] == stream.parsed.value and stream.parsed.complete


async def test_objects_with_a_type_after_delivery_started_is_refused(aserver: Server) -> None:
    async with client_for(aserver) as client:
        async with client.chat.stream(model="m", messages=USER) as stream:
            await stream.__anext__()
            with pytest.raises(ValueError, match="before the stream delivers"):
                stream.objects(Plan)


# ---------------------------------------------------------------------- tool calls


class Weather(BaseModel):
    city: str
    days: int
    notes: list[str]


WEATHER_TOOL = {"type": "function", "function": {
    "name": "weather", "parameters": strict_json_schema(Weather), "strict": True}}


async def test_partial_tool_call_follows_each_delta(aserver: Server) -> None:
    """Asked with each ``ToolCallDelta`` (from the middle of the call on), the typed partial
    arguments grow and end at ``ToolCall.parse_arguments(Model)``; snapshots by default."""
    async with client_for(aserver) as client:
        stream = client.chat.stream(
            model="m", messages=USER, tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "weather"}},
            extra_headers={"X-Fluxstream-Fault": "write-size=7"})
        partials: list[Weather] = []
        deltas = 0
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.ToolCallDelta):
                    deltas += 1
                    if deltas >= 4:  # the first ask comes late: it catches up
                        partials.append(stream.partial_tool_call(event, Weather))
    final = stream.reply.choices[0].tool_calls[0].parse_arguments(Weather)
    assert deltas > 5 and len(partials) == deltas - 3
    assert all(type(p) is Weather for p in partials)
    assert len({id(p) for p in partials}) == len(partials)
    for a, b in itertools.pairwise(partials):
        assert grows(a.model_dump(exclude_unset=True), b.model_dump(exclude_unset=True))
    assert partials[-1] == final
    assert "city" in partials[0].model_fields_set


async def test_partial_tool_call_first_asked_with_an_earlier_delta(aserver: Server) -> None:
    """The first ask may come with an older delta of the call: the partial object is still
    everything delivered so far, and it keeps up afterwards."""
    async with client_for(aserver) as client:
        stream = client.chat.stream(
            model="m", messages=USER, tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "weather"}})
        first: fluxstream.ToolCallDelta | None = None
        delivered = ""
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.ToolCallDelta):
                    delivered += event.arguments
                    first = first or event
                    if '"days"' in delivered and '"notes"' in delivered:
                        break
            assert first is not None
            early = stream.partial_tool_call(first, Weather)
            assert early.model_dump(exclude_unset=True) == partial_object(delivered, Weather
                                                                          ).model_dump(
                exclude_unset=True)
            assert early.days == json.loads(delivered.split('"days":')[1].split(",")[0])
            last = early
            async for event in stream:
                if isinstance(event, fluxstream.ToolCallDelta):
                    last = stream.partial_tool_call(event, Weather)
    assert last == stream.reply.choices[0].tool_calls[0].parse_arguments(Weather)


async def test_partial_tool_call_on_the_anthropic_forced_tool(aserver: Server) -> None:
    async with client_for(aserver) as client:
        stream = client.messages.stream(model="m", max_tokens=1024, messages=USER,
                                        response_format=Plan)
        live: Plan | None = None
        async with stream:
            async for event in stream:
                if isinstance(event, fluxstream.ToolCallDelta):
                    live = stream.partial_tool_call(event, Plan, live=True)
    assert live is not None and live == stream.parsed.value
    with pytest.raises(ValueError):
        stream.partial_tool_call(event_of(stream), Weather)


def event_of(stream: fluxstream.ReplyStream) -> fluxstream.ToolCallDelta:
    call = stream.reply.choices[0].tool_calls[0]
    return fluxstream.ToolCallDelta(stream.content_key, 0, call.index, call.id, call.name,
                                    "", len(call.arguments))



# ---------------------------------------------------------------------- snapshots


class Leaf(BaseModel):
    words: list[str]
    n: int


class Branch(BaseModel):
    name: str
    leaves: list[Leaf]
    best: Leaf | None
    grid: list[list[str]]


class Tree(BaseModel):
    title: str
    branches: list[Branch]
    root: Branch


def tree_json(seed: int) -> str:
    rng = random.Random(seed)

    def leaf() -> dict[str, Any]:
        return {"words": [f"w{rng.randrange(99)} ü" for _ in range(rng.randrange(4))],
                "n": rng.randrange(1000)}

    def branch() -> dict[str, Any]:
        return {"name": f"b{rng.randrange(99)} \\\"q\\\"",
                "leaves": [leaf() for _ in range(rng.randrange(4))],
                "best": leaf() if rng.random() < 0.5 else None,
                "grid": [[f"{i}{j}" for j in range(rng.randrange(3))]
                         for i in range(rng.randrange(3))]}

    return json.dumps({"title": "t", "branches": [branch() for _ in range(rng.randrange(1, 5))],
                       "root": branch()})


@pytest.mark.parametrize("seed", range(25))
def test_snapshots_never_move_and_share_only_complete_values(seed: int) -> None:
    """A snapshot after every delta (random splits): each one still dumps exactly as it did
    when it was taken after all later text, and each equals a deep copy taken then."""
    text = tree_json(seed)
    rng = random.Random(seed)
    builder: ObjectBuilder[Tree] = ObjectBuilder(Tree)
    taken: list[tuple[Tree, dict[str, Any]]] = []
    i = 0
    while i < len(text):
        step = rng.randrange(1, 6)
        builder.feed(text[i : i + step])
        i += step
        shot = builder.snapshot()
        if shot is not None:
            assert shot == copy.deepcopy(builder.value)
            taken.append((shot, shot.model_dump(exclude_unset=True)))
    assert builder.complete and taken[-1][0] == Tree.model_validate_json(text)
    for shot, dumped in taken:
        assert shot.model_dump(exclude_unset=True) == dumped
    for (a, _), (b, _) in itertools.pairwise(taken):
        assert grows(a.model_dump(exclude_unset=True), b.model_dump(exclude_unset=True))


@pytest.mark.parametrize("api", FORMATS)
async def test_parsed_while_streaming_is_the_partial_so_far(aserver: Server, api: str) -> None:
    """Before the end, ``parsed`` (and ``reply.parse``) is the object so far, stated partial
    (reason ``streaming``), never a parse error for a document that is merely unfinished."""
    async with client_for(aserver) as client:
        # One event per read (a pause between events): the reply is not ahead of the objects.
        async with open_stream(client, api,
                               extra_headers={"X-Fluxstream-Fault": "drip=0.002"}) as stream:
            checked = 0
            async for plan in stream.objects():
                if stream.outcome is None and "stops" in plan.model_fields_set:
                    result = stream.parsed
                    if result.complete:  # the whole document arrived: it validates
                        assert result.value == Plan.model_validate(plan.model_dump())
                        continue
                    assert result.reason == "streaming"
                    assert result.value is not None and result.value.title == plan.title
                    assert stream.reply.parse(Plan).reason == "streaming"
                    checked += 1
    assert checked > 3 and stream.parsed.complete
