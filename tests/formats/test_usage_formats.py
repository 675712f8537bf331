"""One ``Reply.usage`` across formats: ``prompt_tokens`` / ``completion_tokens`` /
``total_tokens`` (and the cached / reasoning token details) are filled for Responses and
Anthropic Messages streams too, while the provider's own fields stay where they were
(``usage.input_tokens``; ``usage.model_dump(exclude_unset=True)`` is exactly what was sent).

Anthropic: ``input_tokens`` counts only the tokens after the last cache breakpoint, so the
normalized ``prompt_tokens`` is ``input_tokens + cache_creation_input_tokens +
cache_read_input_tokens`` (what OpenAI's ``prompt_tokens`` counts: every input token, the
cached ones listed in ``prompt_tokens_details.cached_tokens``). Usage starts from
``message_start`` and is merged (not replaced) with every ``message_delta.usage``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sse_frames import frames

import fluxstream
from fluxstream import replay
from fluxstream.server import Server, script_for, serve


def sse(*events: dict[str, Any]) -> list[bytes]:
    """One read per named event."""
    return [frames(e, named=True) for e in events]


def responses_usage(raw: Any) -> fluxstream.Reply:
    created = {"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "model": "m", "status": "in_progress"}}
    delta = {"type": "response.output_text.delta", "sequence_number": 1, "output_index": 0,
             "content_index": 0, "delta": "hi"}
    done = {"type": "response.completed", "sequence_number": 2,
            "response": {"id": "resp_1", "status": "completed", "usage": raw}}
    return replay(sse(created, delta, done), format="responses")


def anthropic_usage(start: Any, *deltas: Any) -> fluxstream.Reply:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": start}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
    ]
    for i, usage in enumerate(deltas):
        reason = "end_turn" if i == len(deltas) - 1 else None
        events.append({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": usage})
    events.append({"type": "message_stop"})
    return replay(sse(*events), format="anthropic_messages")


# ---------------------------------------------------------------------------- Responses

def test_responses_usage_fills_the_chat_names() -> None:
    raw = {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 30},
           "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 64},
           "total_tokens": 123}
    usage = responses_usage(raw).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (36, 87, 123)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 30
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 64
    # the provider's own fields: as sent, and exactly what was sent
    assert usage.input_tokens == 36  # type: ignore[attr-defined]
    assert usage.model_dump(exclude_unset=True) == raw


def test_responses_usage_without_a_total_gets_the_sum() -> None:
    usage = responses_usage({"input_tokens": 3, "output_tokens": 4}).usage
    assert usage is not None and usage.total_tokens == 7
    assert usage.model_dump(exclude_unset=True) == {"input_tokens": 3, "output_tokens": 4}


# ---------------------------------------------------------------------------- Anthropic

def test_anthropic_usage_fills_the_chat_names_with_the_cache_counted() -> None:
    start = {"input_tokens": 10, "cache_creation_input_tokens": 3,
             "cache_read_input_tokens": 20, "output_tokens": 1}
    usage = anthropic_usage(start, {"output_tokens": 15}).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (33, 15, 48)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 20
    assert usage.output_tokens == 15  # type: ignore[attr-defined]
    assert usage.model_dump(exclude_unset=True) == {**start, "output_tokens": 15}


def test_anthropic_usage_is_merged_with_every_message_delta_not_replaced() -> None:
    """``message_delta.usage`` is cumulative and may carry only ``output_tokens``: the input
    counts of ``message_start`` stay; a later delta may revise them (server tools)."""
    reply = anthropic_usage(
        {"input_tokens": 43, "output_tokens": 1, "cache_read_input_tokens": 5},
        {"output_tokens": 9},
        {"input_tokens": 61, "output_tokens": 12},
    )
    assert [(u.prompt_tokens, u.completion_tokens, u.total_tokens)
            for u in reply.usage_updates] == [(48, 1, 49), (48, 9, 57), (66, 12, 78)]
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_unset=True) == {
        "input_tokens": 61, "output_tokens": 12, "cache_read_input_tokens": 5}


def test_anthropic_usage_without_cache_fields() -> None:
    usage = anthropic_usage({"input_tokens": 5, "output_tokens": 1}, {"output_tokens": 9}).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 9, 14)
    assert usage.prompt_tokens_details is None  # nothing cached was reported


# ---------------------------------------------------------------------------- edges

def test_a_gateways_own_chat_names_are_kept() -> None:
    """Some gateways send both vocabularies: what the provider sent wins."""
    raw = {"input_tokens": 3, "output_tokens": 4, "prompt_tokens": 30,
           "completion_tokens": 40, "total_tokens": 70}
    usage = responses_usage(raw).usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (30, 40, 70)


@pytest.mark.parametrize(
    "raw",
    [
        {"input_tokens": "12", "output_tokens": None},
        {"input_tokens": True, "output_tokens": -3},
        {"input_tokens": 1.5, "output_tokens": [1]},
        {"input_tokens_details": "x", "output_tokens_details": {"reasoning_tokens": "y"}},
        {"input_tokens": 10**30, "output_tokens": 2},
    ],
)
def test_odd_counts_are_not_normalized_and_never_raise(raw: dict[str, Any]) -> None:
    reply = responses_usage(raw)
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "hi"
    usage = reply.usage
    assert usage is not None
    for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = getattr(usage, name)
        assert value is None or (type(value) is int and value >= 0)
    assert usage.prompt_tokens is None  # no count that is a plain non-negative int
    reply_again = anthropic_usage(raw, raw)
    assert reply_again.usage is not None and reply_again.usage.prompt_tokens is None


def test_chat_completions_usage_is_unchanged() -> None:
    raw = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    chunk = {"id": "c", "choices": [{"index": 0, "delta": {"content": "hi"},
                                     "finish_reason": "stop"}], "usage": raw}
    reply = replay([frames(chunk, done=True)])
    assert reply.usage is not None and reply.usage.model_dump(exclude_unset=True) == raw


def test_normalized_usage_survives_a_resume_token() -> None:
    reply = responses_usage({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7})
    again = fluxstream.Reply.model_validate(json.loads(reply.model_dump_json()))
    assert again.usage is not None and again.usage.prompt_tokens == 3
    assert again.usage.input_tokens == 3  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- wrong types

#: Declared ``Usage`` fields of a type they cannot have (``total_tokens: 1.5`` ...).
WRONG_TYPES = [
    {"total_tokens": 1.5},
    {"total_tokens": "twelve"},
    {"total_tokens": [1]},
    {"prompt_tokens": {"a": 1}},
    {"completion_tokens_details": "x"},
    {"prompt_tokens_details": [1, 2]},
]


def round_trips(reply: fluxstream.Reply) -> None:
    """What a relay follower and a resume token do with the reply: JSON and back."""
    again = fluxstream.Reply.model_validate(json.loads(reply.model_dump_json()))
    assert again.usage == reply.usage


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=[str(b) for b in WRONG_TYPES])
def test_responses_usage_of_the_wrong_type_is_dropped_and_counted(bad: dict[str, Any]) -> None:
    raw = {"input_tokens": 3, "output_tokens": 4, **bad}
    reply = responses_usage(raw)
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "hi"
    usage = reply.usage
    assert usage is not None and usage.input_tokens == 3  # type: ignore[attr-defined]
    assert not set(bad) & usage.model_fields_set  # the bad field is not kept
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (3, 4, 7)
    assert reply.skipped_frames == 1
    round_trips(reply)


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=[str(b) for b in WRONG_TYPES])
def test_anthropic_usage_of_the_wrong_type_is_dropped_and_counted(bad: dict[str, Any]) -> None:
    reply = anthropic_usage({"input_tokens": 3, **bad}, {"output_tokens": 4, **bad})
    assert reply.outcome is fluxstream.Outcome.DONE and reply.text == "hi"
    usage = reply.usage
    assert usage is not None and not set(bad) & usage.model_fields_set
    assert (usage.prompt_tokens, usage.completion_tokens) == (3, 4)
    assert reply.skipped_frames == 2  # message_start's and message_delta's
    round_trips(reply)


def test_a_resume_token_of_a_stream_with_wrong_usage_is_accepted() -> None:
    from fluxstream._parser import StreamParser

    parser = StreamParser(content_key="k", format="anthropic_messages")
    for piece in sse({"type": "message_start", "message": {
            "id": "m", "usage": {"input_tokens": 2, "total_tokens": 1.5}}}):
        parser.feed(piece)
    token = json.loads(json.dumps({"key": "k", "reply": parser.reply.model_dump(mode="json"),
                                   "offsets": parser.offsets(), "wire": parser.wire_state()}))
    again = StreamParser.from_token(token, format="anthropic_messages")
    assert again.reply.usage == parser.reply.usage


@pytest.mark.parametrize("fmt", ["chat_completions", "responses", "anthropic_messages"])
def test_usage_that_is_not_an_object_is_counted(fmt: str) -> None:
    if fmt == "chat_completions":
        reads = [b'data: {"choices":[{"index":0,"delta":{"content":"hi"},'
                 b'"finish_reason":"stop"}],"usage":[1,2]}\n\ndata: [DONE]\n\n']
        reply = replay(reads)
    elif fmt == "responses":
        reply = responses_usage("lots")
    else:
        reply = anthropic_usage([3], [4])
    assert reply.text == "hi" and reply.usage is None
    assert reply.skipped_frames >= 1


# ---------------------------------------------------------------------------- end to end

@pytest.mark.anyio
async def test_every_format_answers_usage_prompt_tokens(anyio_backend: str) -> None:
    """The same question through the three APIs of the embedded server: one way to read the
    token counts, ``reply.usage.prompt_tokens`` and friends, for every format."""
    async with serve(port=0, profile="openai", api_key="sk-usage") as server:
        await _ask_every_format(server)


async def _ask_every_format(server: Server) -> None:
    messages = [{"role": "user", "content": "Weather in Zürich?"}]
    async with fluxstream.AsyncClient(base_url=server.base_url, api_key="sk-usage") as client:
        chat = await client.chat.complete(model="m", messages=messages)
        responses = await client.responses.complete(model="m", input=messages)
        anthropic = await client.messages.complete(model="m", messages=messages, max_tokens=500)
    expected = script_for("chat", {"model": "m", "messages": messages}).usage
    for reply in (chat, responses, anthropic):
        usage = reply.usage
        assert usage is not None
        assert usage.prompt_tokens == expected["prompt_tokens"]
        assert usage.completion_tokens == expected["completion_tokens"]
        assert usage.total_tokens == expected["total_tokens"]
    assert responses.usage is not None and anthropic.usage is not None
    assert responses.usage.input_tokens == expected["prompt_tokens"]  # type: ignore[attr-defined]
    assert anthropic.usage.output_tokens == expected["completion_tokens"]  # type: ignore[attr-defined]


def _hostile_usage_shapes() -> list[dict[str, Any]]:
    """Usage objects with every kind of value a field can hold, fitting or not: counts at
    and past the limits, bools, floats, strings, details objects and lists two levels down
    and past them, subclasses of dict and list, and a seeded random mix of them."""
    import random

    from fluxstream.formats._usage_fields import MAX_TOKEN_COUNT

    class Sub(dict):  # type: ignore[type-arg]
        pass

    class Items(list):  # type: ignore[type-arg]
        pass

    values: list[Any] = [
        0, 7, -1, MAX_TOKEN_COUNT - 1, MAX_TOKEN_COUNT, True, False, 1.5, "3", None,
        {"cached_tokens": 0}, {"cached_tokens": -4}, {"a": {"b": -1}}, {"a": {"b": {"c": -1}}},
        {"a": [1, -1]}, [1, 2], [1, -2], [[-1]], [{"x": -1}], [[[-1]]], {}, [],
        Sub(cached_tokens=-1), Sub(cached_tokens=1), Items([-1]), Items([3]),
        {"audio": 1.5, "text": "x"}, {"n": MAX_TOKEN_COUNT}, {"n": True},
    ]
    shapes = [{"prompt_tokens": v} for v in values]
    shapes += [{"prompt_tokens_details": v, "completion_tokens": 2} for v in values]
    rng = random.Random(40)
    names = ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
             "completion_tokens_details", "x_gateway_cost", "input_tokens"]
    for _ in range(400):
        shapes.append({name: rng.choice(values) for name in rng.sample(names, rng.randint(1, 5))})
    return shapes


def test_the_one_pass_check_equals_the_per_field_one() -> None:
    """A usage frame is checked in one pass, copied whole when everything fits: the same
    kept fields, drop flag and ``Usage`` as keeping each field that fits, for every shape."""
    from pydantic import ValidationError

    from fluxstream._wire import Usage
    from fluxstream.formats._usage_fields import _counts_fit, _usage_fits, checked_usage_model

    for raw in _hostile_usage_shapes():
        per_field = {k: v for k, v in raw.items() if _counts_fit(v)}
        assert _usage_fits(raw) is (len(per_field) == len(raw)), raw
        clean, dropped, model = checked_usage_model(raw)
        try:
            want = Usage.model_validate(per_field)
        except ValidationError:
            assert dropped, raw  # a field of the wrong type: dropped, and the rest kept
            assert set(clean) < set(per_field)
        else:
            assert (clean, dropped) == (per_field, len(per_field) != len(raw)), raw
            assert model == want and clean is not raw


def test_gemini_usage_validated_once_is_the_usage_validated_again() -> None:
    """Gemini's usage is checked and validated once per delivery (the checked ``Usage`` is
    filled in): the same ``Usage``, fields set included, as checking what was kept again
    and validating it anew, for every shape of ``usageMetadata``."""
    import random

    from fluxstream._wire import Usage
    from fluxstream.formats._gemini_candidates import count as _count
    from fluxstream.formats._gemini_usage import filled_usage as _filled_usage
    from fluxstream.formats._usage_fields import checked_usage, checked_usage_model, fill_usage
    from fluxstream.formats.gemini import gemini_usage

    def validated_again(raw: dict[str, Any]) -> Usage:  # the way it was done before
        clean, _ = checked_usage(raw)
        result = Usage.model_validate(clean)
        get = raw.get
        output, thoughts = _count(get("candidatesTokenCount")), _count(get("thoughtsTokenCount"))
        completion = None
        if output is not None or thoughts is not None:
            completion = (output or 0) + (thoughts or 0)
        return fill_usage(result, prompt=_count(get("promptTokenCount")), completion=completion,
                          total=_count(get("totalTokenCount")),
                          cached=_count(get("cachedContentTokenCount")), reasoning=thoughts)

    rng = random.Random(41)
    names = ["promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount",
             "cachedContentTokenCount", "totalTokenCount", "promptTokensDetails",
             "toolUsePromptTokenCount"]
    values: list[Any] = [0, 3, -2, 2**53, True, 1.5, "7", None,
                         [{"modality": "TEXT", "tokenCount": 4}],
                         [{"modality": "TEXT", "tokenCount": -4}], {"n": 1}]
    shapes = [{name: rng.choice(values) for name in rng.sample(names, rng.randint(1, 6))}
              for _ in range(500)]
    shapes += _hostile_usage_shapes()
    for raw in shapes:
        again = validated_again(raw)
        once = gemini_usage(raw)
        assert once == again and once.model_fields_set == again.model_fields_set, raw
        clean, _ = checked_usage(raw)  # what a delivery filled: the kept fields
        delivered = _filled_usage(clean, checked_usage_model(raw)[2])
        before = validated_again(clean)
        assert delivered == before, raw
        assert delivered.model_fields_set == before.model_fields_set, raw


@pytest.mark.parametrize("vocabulary", ["anthropic", "responses"])
def test_usage_normalized_from_its_checked_model_is_the_usage_checked_again(
    vocabulary: str,
) -> None:
    """A frame's usage is validated once: normalizing what was kept from the ``Usage`` made
    when it was checked gives the same ``Usage`` (fields set included) as checking it again."""
    import random

    from fluxstream.formats._usage_fields import checked_usage_model, normalized_usage

    rng = random.Random(42)
    names = ["input_tokens", "output_tokens", "cache_read_input_tokens",
             "cache_creation_input_tokens", "total_tokens", "input_tokens_details",
             "output_tokens_details", "server_tool_use"]
    values: list[Any] = [0, 5, -1, 2**53, True, 2.5, "9", None, {"cached_tokens": 3},
                         {"reasoning_tokens": -3}, {"web_search_requests": 1}]
    shapes = [{name: rng.choice(values) for name in rng.sample(names, rng.randint(1, 7))}
              for _ in range(500)]
    for raw in shapes + _hostile_usage_shapes():
        kept, _, model = checked_usage_model(raw)
        once = normalized_usage(kept, vocabulary=vocabulary, checked=model)
        again = normalized_usage(kept, vocabulary=vocabulary)
        assert once == again and once.model_fields_set == again.model_fields_set, raw
