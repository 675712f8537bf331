"""A resume token whose parts disagree is refused before anything is sent.

A token lives outside the process (a database, Redis, a browser), so any part of it may come
back damaged or altered. Its parts say the same things twice: the offsets are the lengths of
the stored reply's text, reasoning, refusal and tool-call arguments; the choice indices of
the offsets are the reply's; the wire state names open blocks, calls and candidates the
reply holds. They used to be trusted one by one: offsets of 1,000,000 on a reply of 15
characters resumed and delivered the next delta at offset 1,000,000, and ``"reply": []``
resumed as an empty reply, so the characters delivered before were missing from
``reply.text`` -- both ended ``done``. Now every part is checked against the others and its
type (``fluxstream._core.resume_token``), and a token that fails is a ``ResumeTokenError``
before any request.

The property tests mutate genuine tokens (real streams of the embedded server, cut after some
events) at random: every mutated token either resumes to a reply whose text is the token's
plus exactly the new deltas (offsets contiguous: no gap, no repeat), or is refused with the
server seeing no request. What a token says about the server's own stream (its event id, a
Responses sequence number, the request body) cannot be checked against the reply; signed
tokens (``AsyncClient(token_secret=...)``, ``test_signed_resume_tokens.py``) cover those.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from resume_tokens import frames, token

import fluxstream
from fluxstream._parser import StreamParser
from fluxstream._retry import ResumePolicy, RetryPolicy
from fluxstream.errors import ResumeTokenError
from fluxstream.server import ServerThread

USER = [{"role": "user", "content": "What is the weather in Zürich?"}]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"},
                                           "days": {"type": "integer"}},
          "required": ["city", "days"]}
IDS = {"X-Fluxstream-Profile": "sse-ids"}

#: (endpoint, the stream's keywords, the API's path for a raw request, its format).
CASES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "chat-text": ("chat", {"messages": USER}, "chat/completions", "chat_completions"),
    "chat-tool": ("chat", {"messages": USER, "tool_choice": "required", "tools": [
        {"type": "function", "function": {"name": "forecast", "parameters": PARAMS}}]},
        "chat/completions", "chat_completions"),
    "responses-reasoning": ("responses", {"input": USER, "reasoning": {"summary": "auto"}},
                            "responses", "responses"),
    "responses-tool": ("responses", {"input": USER, "tool_choice": "required", "tools": [
        {"type": "function", "name": "forecast", "parameters": PARAMS}]},
        "responses", "responses"),
    "messages-thinking": ("messages", {"messages": USER, "max_tokens": 1024, "thinking": {
        "type": "enabled", "budget_tokens": 1024}}, "messages", "anthropic_messages"),
    "messages-tool": ("messages", {"messages": USER, "max_tokens": 1024, "tools": [
        {"name": "forecast", "input_schema": PARAMS}],
        "tool_choice": {"type": "tool", "name": "forecast"}}, "messages", "anthropic_messages"),
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


def raw(upstream: ServerThread, case: str) -> list[bytes]:
    """The frames of the whole stream of ``case`` (event ids on, for ``Last-Event-ID``)."""
    _, params, path, _ = CASES[case]
    body = {"model": "m", **params, "stream": True}
    response = httpx.post(f"{upstream.base_url}/{path}", json=body, headers=IDS)
    assert response.status_code == 200
    return frames(response.content)


def sans_io_token(upstream: ServerThread, case: str, cut: float = 0.5) -> dict[str, Any]:
    """A token of ``case`` after ``cut`` of its frames, built as a stream builds one."""
    pieces = raw(upstream, case)
    parser = StreamParser(content_key="k", format=CASES[case][3])
    for piece in pieces[: max(1, int(len(pieces) * cut))]:
        parser.feed(piece)
    assert parser.saw_content and not parser.finished
    return token(parser)


def refused(value: dict[str, Any], fmt: str) -> bool:
    try:
        StreamParser.from_token(value, format=fmt)
    except ResumeTokenError:
        return True
    return False


# ------------------------------------------------------------------ the two tokens


async def cut_token(base_url: str, key: str) -> dict[str, Any]:
    """The token of a chat stream cut after some text, as it travels (through JSON)."""
    async with fluxstream.AsyncClient(base_url, resume=ResumePolicy.off(),
                                      retry=RetryPolicy.off()) as client:
        stream = client.chat.stream(
            model="m", messages=USER, content_key=key,
            extra_headers={"X-Fluxstream-Fault": "drop-after=900,fail-first=1",
                           "X-Fluxstream-Attempt-Key": key},
        )
        async with stream:
            async for _ in stream:
                pass
    assert stream.reply.outcome is fluxstream.Outcome.TRUNCATED and stream.reply.text
    value: dict[str, Any] = json.loads(json.dumps(stream.resume_token()))
    return value


@pytest.mark.anyio
@pytest.mark.parametrize("damage", ["offset-past-the-reply", "reply-a-list"])
async def test_a_token_whose_parts_disagree_is_refused_before_any_request(
    server: ServerThread, damage: str
) -> None:
    value = await cut_token(server.base_url, f"issue-{damage}")
    if damage == "offset-past-the-reply":
        value["offsets"]["0"]["text"] = 1_000_000
    else:
        value["reply"] = []
    sent = len(server.records.requests)
    async with fluxstream.AsyncClient(server.base_url) as client:
        for resume in (client.chat.resume, client.responses.resume, client.messages.resume):
            with pytest.raises(ResumeTokenError):
                resume(value, extra_headers={"X-Fluxstream-Attempt-Key": f"issue-{damage}"})
    assert len(server.records.requests) == sent


# ------------------------------------------------------------------ each rule


def _set(value: dict[str, Any], path: tuple[Any, ...], new: Any) -> None:
    target: Any = value
    for step in path[:-1]:
        target = target[step]
    if new is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = new


_DELETE = object()

#: Damage to a chat token of text and a tool call: (path, new value).
CHAT_DAMAGE: dict[str, tuple[tuple[Any, ...], Any]] = {
    "text-offset-short": (("offsets", "0", "text"), 1),
    "text-offset-long": (("offsets", "0", "text"), 10**6),
    "reasoning-offset": (("offsets", "0", "reasoning"), 3),
    "refusal-offset": (("offsets", "0", "refusal"), 1),
    "call-offset": (("offsets", "0", "tool_calls", "0"), 0),
    "call-offset-missing": (("offsets", "0", "tool_calls"), {}),
    "call-offset-extra": (("offsets", "0", "tool_calls", "1"), 0),
    "choice-offset-missing": (("offsets",), {}),
    "choice-offset-extra": (("offsets", "1"), {"text": 0, "reasoning": 0, "refusal": 0,
                                              "tool_calls": {}}),
    "offsets-a-list": (("offsets",), []),
    "reply-missing": (("reply",), _DELETE),
    "reply-none": (("reply",), None),
    "reply-a-list": (("reply",), []),
    "reply-a-string": (("reply",), "reply"),
    "reply-empty": (("reply",), {}),
    "reply-text-shorter": (("reply", "choices", 0, "text"), "Hel"),
    "reply-call-arguments-longer": (("reply", "choices", 0, "tool_calls", 0, "arguments"),
                                    '{"city": "Zürich", "days": 1}'),
    "reply-choice-index": (("reply", "choices", 0, "index"), 1),
    "last-event-id-a-number": (("last_event_id",), 41),
    "last-event-id-a-list": (("last_event_id",), ["41"]),
    "last-event-id-a-line-break": (("last_event_id",), "41\r\nX-Injected: 1"),
    "reconnection-time-a-string": (("reconnection_time",), "900"),
    "reconnection-time-negative": (("reconnection_time",), -1),
    "reconnection-time-past-the-sse-bound": (("reconnection_time",), 2**31),
    "sequence-on-chat": (("sequence",), 4),
    "sequence-a-string": (("sequence",), "4"),
    "response-id-a-number": (("response_id",), 7),
    "wire-on-chat": (("wire",), {"blocks": {}}),
    "wire-a-list": (("wire",), [1]),
}


def chat_token() -> dict[str, Any]:
    parser = StreamParser(content_key="k", format="chat_completions")
    parser.feed(b"id: 41\nretry: 900\n"
                b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hello wor"}}]}\n\n')
    parser.feed(b'data: {"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm",'
                b'"tool_calls":[{"index":0,"id":"t","function":{"name":"f",'
                b'"arguments":"{\\"a\\":"}}]}}]}\n\n')
    value = token(parser)
    assert value["offsets"] == {"0": {"text": 9, "reasoning": 2, "refusal": 0,
                                      "tool_calls": {"0": 5}}}
    return value


def test_the_chat_token_the_table_damages_resumes() -> None:
    parser = StreamParser.from_token(chat_token(), format="chat_completions")
    events = parser.feed(b'data: {"choices":[{"index":0,"delta":{"content":"ld"}}]}\n\n')
    assert [(e.offset, e.text) for e in events if isinstance(e, fluxstream.TextDelta)] \
        == [(9, "ld")]
    assert parser.last_event_id == "41" and parser.reconnection_time == 900


@pytest.mark.parametrize("fmt", ["chat_completions", "auto"])
@pytest.mark.parametrize("damage", list(CHAT_DAMAGE))
def test_each_disagreeing_part_is_a_resume_token_error(damage: str, fmt: str) -> None:
    value = chat_token()
    path, new = CHAT_DAMAGE[damage]
    if damage in ("sequence-on-chat", "wire-on-chat") and fmt == "auto":
        return  # ``auto`` then reads the stream as Responses or Anthropic: nothing disagrees
    _set(value, path, new)
    assert refused(value, fmt), damage


def test_a_reply_with_a_choice_twice_is_refused() -> None:
    """Restored twice, the choice's text would be delivered twice."""
    value = chat_token()
    value["reply"]["choices"].append(copy.deepcopy(value["reply"]["choices"][0]))
    assert refused(value, "chat_completions")
    value = chat_token()
    calls = value["reply"]["choices"][0]["tool_calls"]
    calls.append(copy.deepcopy(calls[0]))
    assert refused(value, "chat_completions")


def test_a_sequence_number_of_the_wrong_type_is_refused_not_ignored() -> None:
    """It used to be dropped silently: the resume then re-read the whole response."""
    value = {"key": "k", "reply": {}, "response_id": "resp_1"}
    for sequence in ("3", -1, 2**53, 3.5, True, [3]):
        assert refused({**value, "sequence": sequence}, "responses"), sequence
    parser = StreamParser.from_token({**value, "sequence": 3}, format="responses")
    assert parser.sequence == 3 and parser.response_id == "resp_1"


def test_a_response_id_of_the_wrong_shape_is_refused() -> None:
    value = {"key": "k", "reply": {}, "sequence": 3}
    for response_id in (7, "", "r" * 2000, ["resp_1"]):
        assert refused({**value, "response_id": response_id}, "responses"), response_id


# ------------------------------------------------------------------ wire state per format


def test_anthropic_wire_state_must_agree_with_the_reply(upstream: ServerThread) -> None:
    value = sans_io_token(upstream, "messages-tool", cut=0.6)
    blocks = value["wire"]["blocks"]
    tool = next(i for i, b in blocks.items() if b["kind"] == "tool")
    assert not refused(value, "anthropic_messages")
    for damage in (
        {"blocks": {**blocks, "7": {"kind": "tool"}}},      # a tool block the reply lacks
        {"blocks": {**blocks, tool: {"kind": "opened"}}},   # no such kind
        {"blocks": {**blocks, "x": {"kind": "text"}}},      # no index
        {"blocks": [blocks]},
        {"blocks": {**blocks, tool: {"kind": "tool", "input": 5}}},
        {"message_started": "yes"},
        {"usage": 3},
        {"stop": 4},
        {"held": [["text", None, 0x41]]},                 # no UTF-16 high half
        {"held": [["tool", 9, 0xD83D]]},                   # a call the reply lacks
        {"held": "junk"},
    ):
        assert refused({**value, "wire": {**value["wire"], **damage}}, "anthropic_messages"), \
            damage


def test_anthropic_thinking_of_an_open_block_must_end_the_reasoning(
    upstream: ServerThread,
) -> None:
    value = sans_io_token(upstream, "messages-thinking", cut=0.2)
    blocks = value["wire"]["blocks"]
    thinking = next(i for i, b in blocks.items() if b["kind"] == "thinking")
    assert value["reply"]["choices"][0]["reasoning"].endswith(blocks[thinking]["thinking"])
    assert not refused(value, "anthropic_messages")
    for damage in ({"kind": "thinking", "thinking": "not what was said", "signature": ""},
                   {"kind": "thinking", "thinking": 5, "signature": ""},
                   {"kind": "thinking", "thinking": "", "signature": 5}):
        wire = {**value["wire"], "blocks": {**blocks, thinking: damage}}
        assert refused({**value, "wire": wire}, "anthropic_messages"), damage


def test_responses_wire_state_must_agree_with_the_reply(upstream: ServerThread) -> None:
    value = sans_io_token(upstream, "responses-tool", cut=0.6)
    wire = value["wire"]
    assert value["sequence"] is not None and value["response_id"]
    assert not refused(value, "responses")
    for damage in (
        {"last_call": 9},               # a call the reply lacks
        {"last_call": "0"},
        {"parts": "junk"},
        {"parts": [["output_text", "0", None]]},
        {"shown": [["x"]]},
        {"items": [["fc_1", -1]]},
        {"items": {"fc_1": 0}},
        {"positions": -1},
        {"errored": "no"},
        {"held": [["reasoning", 0, 0xD83D]]},
    ):
        assert refused({**value, "wire": {**wire, **damage}}, "responses"), damage


def test_gemini_wire_state_must_agree_with_the_reply() -> None:
    from fixture_files import require
    from gemini_corpus import gemini_streams

    path = require(next(p for p in gemini_streams()
                        if p.stem == "gem-vercel-vertex-partial-args"))
    pieces = frames(path.read_bytes())
    parser = StreamParser(content_key="k", format="gemini")
    for piece in pieces[:4]:
        parser.feed(piece)
    value = token(parser)
    entry = value["wire"]["candidates"]["0"]
    assert "open" in entry and entry["pieces"]["written"]
    assert not refused(value, "gemini")
    calls = value["reply"]["choices"][0]["tool_calls"]
    assert entry["pieces"]["written"] == calls[entry["open"]]["arguments"]
    for damage in (
        {"candidates": {"1": {"signatures": 0}}},           # a candidate the reply lacks
        {"candidates": {"0": {**entry, "open": 9}}},         # a call the reply lacks
        {"candidates": {"0": {**entry, "open": "0"}}},
        {"candidates": {"0": {**entry, "signatures": -1}}},
        {"candidates": {"0": {**entry, "pieces": {**entry["pieces"], "written": "{}"}}}},
        {"candidates": []},
        {"usage": 3},
        {"usage_sent": "yes"},
        {"blocked": 1},
        {"held": [[0, "refusal", 0xD83D]]},
        {"held": [[5, "text", 0xD83D]]},
    ):
        assert refused({**value, "wire": {**value["wire"], **damage}}, "gemini"), damage


# ------------------------------------------------------------------ properties

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 40) | st.integers() | st.floats(
        allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6,
)

#: Parts a mutation may touch: everything but the request and what names the API (checked
#: elsewhere), and what a token says of the server's own stream (see the module docstring).
_UNCHECKABLE = {("body",), ("version",), ("api",), ("path",)}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix in _UNCHECKABLE:
        return
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for name, inner in value.items():
            yield from paths(inner, (*prefix, name))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from paths(inner, (*prefix, index))


def _position_claim(path: tuple[Any, ...], new: Any) -> bool:
    """A change no reply can contradict: another event id, response id or sequence number
    of the right type (what signing is for)."""
    if path == ("last_event_id",) or path == ("response_id",):
        return isinstance(new, str) or new is None
    if path == ("sequence",):
        return new is None or type(new) is int
    return False


@st.composite
def mutations(draw: st.DrawFn, value: dict[str, Any]) -> dict[str, Any]:
    mutated = copy.deepcopy(value)
    path = draw(st.sampled_from(sorted(paths(value), key=repr)), label="path")
    kind = draw(st.sampled_from(["replace", "delete", "repeat", "shift"]), label="kind")
    target: Any = mutated
    for step in path[:-1]:
        target = target[step]
    old = target[path[-1]]
    if kind == "delete" and isinstance(target, dict):
        del target[path[-1]]
        assume(path not in {("last_event_id",), ("response_id",), ("sequence",),
                            ("reconnection_time",)})
    elif kind == "repeat" and isinstance(old, list) and old:
        old.append(copy.deepcopy(old[draw(st.integers(0, len(old) - 1))]))
    elif kind == "shift" and type(old) is int:
        target[path[-1]] = old + draw(st.sampled_from([-1, 1, 7, 10**6]))
        assume(not _position_claim(path, target[path[-1]]))
    else:
        new = draw(JSON, label="new value")
        assume(not _position_claim(path, new))
        target[path[-1]] = new
    assume(mutated != value)
    return mutated


def _texts(reply: fluxstream.Reply) -> dict[tuple[int, str], str]:
    out: dict[tuple[int, str], str] = {}
    for choice in reply.choices:
        out[(choice.index, "text")] = choice.text
        out[(choice.index, "reasoning")] = choice.reasoning or ""
        out[(choice.index, "refusal")] = choice.refusal or ""
    return out


class Shown:
    """What a renderer shows, from the token's stated reply on: every delta must start
    where its channel's text ends (no gap, no repeat), and the reply must end as shown."""

    def __init__(self, token_reply: Any) -> None:
        self.stated = _texts(fluxstream.Reply.model_validate(token_reply))
        self.shown = dict(self.stated)

    def see(self, event: fluxstream.Event) -> None:
        if isinstance(event, (fluxstream.TextDelta, fluxstream.ReasoningDelta,
                              fluxstream.RefusalDelta)):
            where = (event.choice, event.type)
            before = self.shown.get(where, "")
            assert event.offset == len(before), ("gap or repeat", where)
            self.shown[where] = before + event.text

    def check(self, reply: fluxstream.Reply) -> None:
        final = _texts(reply)
        for where, text in self.shown.items():
            assert final.get(where, "") == text, where
        for where, text in self.stated.items():
            assert final.get(where, "").startswith(text), where


async def _resume(upstream: ServerThread, endpoint: str, value: dict[str, Any]) -> None:
    """Resume ``value``: refused with no request, or no gap and no repeat after it."""
    sent = len(upstream.records.requests)
    async with fluxstream.AsyncClient(upstream.base_url, retry=RetryPolicy.off()) as client:
        try:
            stream = getattr(client, endpoint).resume(value, extra_headers=IDS)
        except ResumeTokenError:
            assert len(upstream.records.requests) == sent
            return
        shown = Shown(value["reply"])
        with anyio.fail_after(10):
            async with stream:
                async for event in stream:
                    shown.see(event)
    shown.check(stream.reply)


@pytest.mark.parametrize("case", list(CASES))
def test_a_mutated_token_resumes_exactly_or_is_refused_before_any_request(
    upstream: ServerThread, case: str
) -> None:
    endpoint = CASES[case][0]
    # One genuine token: the stream read through the client, left after half of its events.
    pieces = raw(upstream, case)

    async def genuine() -> dict[str, Any]:
        async with fluxstream.AsyncClient(upstream.base_url) as client:
            stream = getattr(client, endpoint).stream(model="m", **CASES[case][1],
                                                      extra_headers=IDS)
            async with stream:
                seen = 0
                async for _ in stream:
                    seen += 1
                    if seen >= len(pieces) // 2:
                        break
                value: dict[str, Any] = json.loads(json.dumps(stream.resume_token()))
        return value

    value = anyio.run(genuine)
    anyio.run(_resume, upstream, endpoint, value)  # the unchanged token resumes

    @settings(max_examples=60, deadline=None)
    @given(mutations(value))
    def check(mutated: dict[str, Any]) -> None:
        anyio.run(_resume, upstream, endpoint, mutated)

    check()


@pytest.mark.parametrize("case", list(CASES))
def test_a_mutated_token_read_sans_io_goes_on_exactly_or_is_refused(
    upstream: ServerThread, case: str
) -> None:
    """The same, sans-IO at every cut: the rest of the stream read by the restored parser
    (a ``Last-Event-ID`` resume) never shows a code point twice or leaves one out."""
    fmt = CASES[case][3]
    pieces = raw(upstream, case)
    cuts = range(1, len(pieces) - 1)

    @settings(max_examples=150, deadline=None)
    @given(st.sampled_from(list(cuts)), st.data())
    def check(cut: int, data: st.DataObject) -> None:
        first = StreamParser(content_key="k", format=fmt)
        for piece in pieces[:cut]:
            first.feed(piece)
        assume(not (first.finished or first.done))
        value = token(first)
        mutated = data.draw(mutations(value))
        try:
            second = StreamParser.from_token(mutated, format=fmt)
        except ResumeTokenError:
            return
        shown = Shown(mutated["reply"])
        for piece in pieces[cut:]:
            try:
                events = second.feed(piece)
            except fluxstream.FluxstreamError:
                break  # a typed refusal of what follows (a re-read check), nothing spliced
            for event in events:
                shown.see(event)
        shown.check(second.reply)

    check()
