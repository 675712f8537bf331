"""The typed fast path of the Gemini format (``GeminiFormat.feed_many`` with its
``quick_decoder``: one candidate whose parts are text, or the next ``partialArgs`` piece, with
the usage snapshot read as a typed struct) against the general path.

The general path is the same format with no quick decoder (``quick_decoder = None``: every
frame decoded to dicts and mapped by ``_response``, or through ``feed``). Both must give the
same events, the same reply (skipped frames counted alike), the same offsets, the same wire
state (after every read: the usage the fast path keeps undecoded is built when it is read) and
the same errors over streams Hypothesis builds around the edges of the fast path, chunks that
look common but are not: two candidates, a new candidate, a whole ``functionCall`` part,
streamed pieces of every kind, thought parts and signatures, several parts, a missing field, a
value of the wrong type, a finish reason (new or repeated), usage that is empty, ``null``,
unchanged, reordered, of another number type, going back, with an unknown field or too many
fields, top-level ``error`` / ``promptFeedback`` / unknown keys, duplicate keys, escaped
surrogate halves, ``NaN``, frames nested deeper than ``from_json`` allows, invalid JSON, strict
mode, a resume token's state restored. There one ``feed_many`` per read is also checked against
``feed`` one event at a time.

Every recorded Gemini stream cut at random read boundaries is in ``test_fast_paths.py`` (for
every registered format); here, that the typed path itself is taken on them.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from fast_paths import shown, without_quick_decoders
from gemini_corpus import gemini_streams
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sse_frames import frames

from fluxstream._events import Event, ReasoningBlock, TextDelta, ToolCallDelta
from fluxstream._limits import StreamLimits
from fluxstream._parser import StreamParser
from fluxstream.errors import FluxstreamError
from fluxstream.formats.gemini import GeminiFormat
from fluxstream.sse import ServerSentEvent

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FILES = gemini_streams()


def parse(reads: list[bytes], strict: bool = False, limits: StreamLimits | None = None,
          resume: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """Everything the parser shows: events, the error raised, the wire state after every
    read, and at the end the reply, offsets and wire state. ``resume``: a token to go on
    from."""
    kwargs: dict[str, Any] = {"format": "gemini", "strict": strict}
    if limits is not None:
        kwargs["limits"] = limits
    parser = (StreamParser(content_key="k", **kwargs) if resume is None
              else StreamParser.from_token(resume, **kwargs))
    return shown(parser, reads)


def cut(body: bytes, data: st.DataObject) -> list[bytes]:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=40),
                            "cuts"))
    return [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]


# --------------------------------------------------------------------------- the corpus


def test_the_fast_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a vacuous comparison: the recorded deltas and the bench's shape (text with a
    growing usage snapshot, streamed argument pieces) are mapped by ``_quick``."""
    taken: list[bool] = []
    quick = GeminiFormat._quick

    def counting(self: GeminiFormat, obj: Any, data: str, out: list[Event]) -> bool:
        taken.append(quick(self, obj, data, out))
        return taken[-1]

    monkeypatch.setattr(GeminiFormat, "_quick", counting)
    for path in FILES:
        parse([path.read_bytes()])
    recorded = taken.count(True)
    assert recorded > 15
    text = [common(i) for i in range(30)]
    parse([body([json.dumps(c) for c in text])])
    assert taken.count(True) - recorded >= 28  # all but the first (usage first seen) and STOP
    taken.clear()
    opened = [common(0), with_part(common(1), {"functionCall": {"name": "f",
                                                                "willContinue": True}})]
    pieces = [with_part(common(i), piece("$.a", f"p{i}")) for i in range(2, 12)]
    parse([body([json.dumps(c) for c in opened + pieces])])
    assert taken.count(True) == 9  # every piece but the first (it opens the string)


# --------------------------------------------------------------------------- built streams


def common(i: int, index: int = 0, text: str | None = None) -> dict[str, Any]:
    """The usual chunk: one candidate, one text part, the growing usage, model and id."""
    return {"candidates": [{"content": {"parts": [{"text": f"w{i} " if text is None else text}],
                                        "role": "model"}, "index": index}],
            "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3 + i,
                              "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 3}]},
            "modelVersion": "gemini-x", "responseId": "r-1"}


def with_part(chunk: dict[str, Any], *parts: dict[str, Any]) -> dict[str, Any]:
    chunk["candidates"][0]["content"]["parts"] = list(parts)
    return chunk


def piece(path: str, value: Any, more: bool = True, kind: str = "stringValue",
          call_more: bool = True) -> dict[str, Any]:
    p: dict[str, Any] = {"jsonPath": path, kind: value}
    if more:
        p["willContinue"] = True
    fc: dict[str, Any] = {"partialArgs": [p]}
    if call_more:
        fc["willContinue"] = True
    return {"functionCall": fc}


def body(texts: list[str], eol: str = "\r\n") -> bytes:
    return frames(*texts, eol=eol)


#: The ways a chunk may differ from the usual one (most chunks are usual).
TWISTS = ["none"] * 24 + [
    "two_candidates", "new_candidate", "index", "whole_call", "open_call", "piece",
    "piece_odd", "thought", "thought_odd", "signature", "parts", "empty_part", "missing",
    "wrong_type", "finish", "finish_again", "usage", "top", "no_candidates", "foreign_part",
]
TEXTS = st.sampled_from(["Hello", " wo", "é😀", "", "\ud83d", "\ude00", "x\ud83d", "a\"b\\"])


def twisted(chunk: dict[str, Any], twist: str, draw: st.DrawFn,
            previous: list[dict[str, Any]]) -> dict[str, Any]:
    cand = chunk["candidates"][0]
    parts = cand["content"]["parts"]
    if twist == "two_candidates":
        other = json.loads(json.dumps(cand))
        other["index"] = draw(st.sampled_from([1, 0]))
        chunk["candidates"].append(other)
    elif twist == "new_candidate":
        cand["index"] = draw(st.sampled_from([1, 2]))
    elif twist == "index":
        value = draw(st.sampled_from(["0", -1, 2**60, 2**53, 1.0, True, None]))
        cand["index"] = value
    elif twist == "whole_call":
        parts[:] = [{"functionCall": draw(st.sampled_from([
            {"name": "f", "args": {"a": 1}}, {"name": "g", "id": "c1"}, {"args": {}}, {},
            {"name": "h", "args": {"a": 1}, "willContinue": True}]))}]
    elif twist == "open_call":
        parts[:] = [{"functionCall": {"name": draw(st.sampled_from(["f", "g"])),
                                      "willContinue": True}}]
    elif twist == "piece":
        parts[:] = [piece(draw(st.sampled_from(["$.a", "$.a", "$.b", "$.c[0]"])), draw(TEXTS),
                          more=draw(st.sampled_from([True] * 5 + [False])))]
    elif twist == "piece_odd":
        p = piece("$.a", "v")
        variant = draw(st.sampled_from(["number", "bool", "null", "call_ends", "two", "path",
                                        "name", "id", "args", "text", "extra", "value_type"]))
        fc = p["functionCall"]
        first = fc["partialArgs"][0]
        if variant == "number":
            p = piece("$.n", 3.5, kind="numberValue")
        elif variant == "bool":
            p = piece("$.n", True, kind="boolValue")
        elif variant == "null":
            p = piece("$.n", None, kind="nullValue")
        elif variant == "call_ends":
            p = piece("$.a", "end", call_more=False)
        elif variant == "two":
            fc["partialArgs"].append({"jsonPath": "$.a", "stringValue": "w",
                                      "willContinue": True})
        elif variant == "path":
            first["jsonPath"] = draw(st.sampled_from(["a", "$", "$[x]", 5]))
        elif variant in ("name", "id"):
            fc[variant] = draw(st.sampled_from(["f", "", None]))
        elif variant == "args":
            fc["args"] = draw(st.sampled_from([{}, {"z": 1}, None]))
        elif variant == "text":
            p["text"] = "t"
        elif variant == "extra":
            first["other"] = 1
        else:
            first["stringValue"] = draw(st.sampled_from([5, None, ["x"]]))
        parts[:] = [p]
    elif twist == "thought":
        parts[:] = [{"text": draw(TEXTS), "thought": draw(st.sampled_from([True, True, False]))}]
    elif twist == "thought_odd":
        parts[:] = [draw(st.sampled_from([{"text": "t", "thought": "yes"},
                                          {"thought": True}, {"text": "t", "thought": None}]))]
    elif twist == "signature":
        part = draw(st.sampled_from([{"text": "t"}, {"text": "t", "thought": True}, {},
                                     {"functionCall": {"name": "f", "args": {}}}]))
        part["thoughtSignature"] = draw(st.sampled_from(["c2ln", "", 5]))
        parts[:] = [part]
    elif twist == "parts":
        parts[:] = [{"text": draw(TEXTS)}, {"text": draw(TEXTS), "thought": True},
                    {"text": draw(TEXTS)}][: draw(st.integers(0, 3))]
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from([{"functionCall": {"name": "f"}},
                                               {"text": "x", "thoughtSignature": "s"}])))
    elif twist == "empty_part":
        parts[:] = [{}]
    elif twist == "missing":
        where = draw(st.sampled_from(["content", "parts", "index", "usageMetadata",
                                      "modelVersion", "responseId", "text", "role"]))
        if where in ("content", "index"):
            cand.pop(where)
        elif where == "parts":
            cand["content"].pop("parts")
        elif where == "role":
            cand["content"].pop("role")
        elif where == "text":
            parts[:] = [{k: v for k, v in part.items() if k != "text"} for part in parts]
        else:
            chunk.pop(where, None)
    elif twist == "wrong_type":
        where, value = draw(st.sampled_from([
            ("text", 5), ("text", None), ("parts", {}), ("parts", None), ("content", "x"),
            ("content", None), ("candidates", {}), ("candidates", None), ("modelVersion", 5),
            ("responseId", 7), ("finishReason", 3), ("usageMetadata", []),
            ("usageMetadata", "x"), ("part", "x"), ("candidate", 5)]))
        if where == "text":
            parts[0]["text"] = value
        elif where == "part":
            parts[:] = [value]
        elif where == "candidate":
            chunk["candidates"] = [value]
        elif where in ("parts",):
            cand["content"]["parts"] = value
        elif where in ("content", "finishReason"):
            cand[where] = value
        else:
            chunk[where] = value
    elif twist in ("finish", "finish_again"):
        cand["finishReason"] = draw(st.sampled_from(
            ["STOP", "STOP", "MAX_TOKENS", "", None, "NEW_REASON"]))
        if previous and draw(st.booleans()):  # the usage delivered at the finish goes on
            chunk["usageMetadata"] = previous[-1].get("usageMetadata")
    elif twist == "usage":
        usage = chunk.setdefault("usageMetadata", common(len(previous))["usageMetadata"])
        variant = draw(st.sampled_from(["empty", "null", "same", "reordered", "float", "bool",
                                        "back", "unknown", "many", "details", "all_fields",
                                        "detail_odd", "string"]))
        if variant == "empty":
            chunk["usageMetadata"] = {}
        elif variant == "null":
            chunk["usageMetadata"] = None
        elif variant == "same" and previous:
            chunk["usageMetadata"] = previous[-1].get("usageMetadata")
        elif variant == "reordered" and previous:
            last = previous[-1].get("usageMetadata")
            if isinstance(last, dict):
                chunk["usageMetadata"] = dict(reversed(list(last.items())))
        elif variant == "float":
            usage["totalTokenCount"] = float(usage["totalTokenCount"])
        elif variant == "bool":
            usage["promptTokenCount"] = True
        elif variant == "back" and len(previous) > 1:
            chunk["usageMetadata"] = previous[-2].get("usageMetadata")
        elif variant == "unknown":
            usage["serverToolUseTokenCount"] = 2
        elif variant == "many":
            usage.update({f"f{i}": i for i in range(70)})
        elif variant == "details":
            usage["candidatesTokensDetails"] = [{"modality": "TEXT"}]
        elif variant == "all_fields":
            usage.update(candidatesTokenCount=2, thoughtsTokenCount=1,
                         cachedContentTokenCount=0, toolUsePromptTokenCount=1,
                         cacheTokensDetails=[], toolUsePromptTokensDetails=[],
                         trafficType="ON_DEMAND")
        elif variant == "detail_odd":
            usage["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": "3"}]
        else:
            usage["promptTokenCount"] = "3"
    elif twist == "top":
        key, value = draw(st.sampled_from([
            ("error", {"code": 500, "message": "boom", "status": "INTERNAL"}),
            ("promptFeedback", {"blockReason": "SAFETY"}), ("promptFeedback", {}),
            ("createTime", "2025-01-01T00:00:00Z"), ("createTime", 5), ("foo", 1),
            ("choices", []), ("type", "x")]))
        chunk[key] = value
    elif twist == "no_candidates":
        chunk.pop("candidates")
    elif twist == "foreign_part":
        parts[:] = [draw(st.sampled_from([{"executableCode": {"code": "1"}},
                                          {"inlineData": {"data": "eA=="}},
                                          {"text": "t", "partMetadata": {}},
                                          {"videoMetadata": {}}]))]
    return chunk


def dumped(chunk: dict[str, Any], draw: st.DrawFn) -> str:
    """The chunk as a frame's data: Google's spacing or compact, sometimes twisted as text."""
    google = draw(st.booleans())
    text = json.dumps(chunk, separators=(",", ": ") if google else (",", ":"),
                      ensure_ascii=draw(st.booleans()))
    if any("\ud800" <= c <= "\udfff" for c in text):
        text = json.dumps(chunk)  # a decoded frame never holds halves: escaped, as servers send
    twist = draw(st.sampled_from(["none"] * 20 + ["dup", "dup_usage", "nan", "deep", "bad",
                                                  "array", "empty", "done", "surrogate"]))
    if twist == "dup":  # a key twice: the last one counts, for every decoder
        key = draw(st.sampled_from(["candidates", "usageMetadata", "modelVersion"]))
        value = json.dumps(draw(st.sampled_from([chunk.get(key), common(99)[key], None])))
        text = text[:-1] + f', "{key}": {value}}}' if draw(st.booleans()) else (
            "{" + f'"{key}": {value}, ' + text[1:])
    elif twist == "dup_usage" and '"usageMetadata": {' in text:
        text = text.replace('"usageMetadata": {', '"usageMetadata": {"totalTokenCount": 1, ', 1)
    elif twist == "nan":
        text = text.replace('"index": 0', '"index": 0, "avgLogprobs": NaN', 1)
    elif twist == "deep":
        depth = draw(st.sampled_from([150, 199, 201, 300]))
        text = text[:-1] + ', "createTime": ' + "[" * depth + "]" * depth + "}"
    elif twist == "bad":
        text = text[:-1]
    elif twist == "array":
        text = "[" + text + "]"
    elif twist == "empty":
        text = ""
    elif twist == "done":
        text = "[DONE]"
    elif twist == "surrogate":
        text = text.replace('"model"', '"\\ud83d"', 1)
    return text


@st.composite
def streams(draw: st.DrawFn) -> list[str]:
    """A stream of the usual chunks, each maybe twisted. Per stream: one or two candidates
    (the second then takes every other chunk), text or a streamed call (an opening chunk,
    then pieces extending ``$.a``), and the chunk from which usage, id and model come (the
    first, mostly)."""
    chunks: list[dict[str, Any]] = []
    texts: list[str] = []
    two = draw(st.integers(0, 3)) == 0
    tool = draw(st.integers(0, 2)) == 0
    start = {key: draw(st.sampled_from([0] * 6 + [1, 2, 99]), key)
             for key in ("usageMetadata", "responseId", "modelVersion")}
    for i in range(draw(st.integers(1, 14))):
        chunk = common(i, text=draw(st.sampled_from([None, None, None, "é😀", ""])))
        if two and i:
            chunk["candidates"][0]["index"] = i % 2
        elif two:
            chunk["candidates"].append(json.loads(json.dumps(chunk["candidates"][0])))
            chunk["candidates"][1]["index"] = 1
        if tool and i == 1:
            with_part(chunk, {"functionCall": {"name": "f", "willContinue": True}})
        elif tool and i > 1:
            value = draw(st.sampled_from(["x", "yz", "é😀", "a\"b\\", ""] * 4
                                         + ["\ud83d", "\ude00", "x\ud83d"]))
            with_part(chunk, piece("$.a", value, more=i == 2 or draw(st.integers(0, 9)) > 0))
        for key, first in start.items():
            if i < first:
                chunk.pop(key)
        twists = TWISTS + ["piece_odd"] * 10 if tool and i > 2 else TWISTS
        chunk = twisted(chunk, draw(st.sampled_from(twists)), draw, chunks)
        chunks.append(chunk)
        texts.append(dumped(chunk, draw))
    return texts


def format_level(texts: list[str], strict: bool) -> tuple[Any, ...]:
    """The fast path's feed_many over all frames against feed one frame at a time."""
    results = []
    for many in (True, False):
        fmt = GeminiFormat("k", strict=strict)
        sses = [ServerSentEvent(data=t) for t in texts]
        out: list[Event] = []
        error = None
        try:
            if many:
                fmt.feed_many(sses, out)
            else:
                for sse in sses:
                    out += fmt.feed(sse)
            out += fmt.body_ended(True)
        except FluxstreamError as exc:
            error = (type(exc), str(exc))
        results.append((out, error, fmt.resume_state(), fmt.done, fmt.skipped, fmt.id,
                        fmt.model))
    return tuple(results)


@SETTINGS
@given(texts=streams(), data=st.data(), strict=st.booleans(),
       eol=st.sampled_from(["\r\n", "\n"]), tight=st.booleans())
def test_built_streams_map_alike(texts: list[str], data: st.DataObject, strict: bool,
                                 eol: str, tight: bool) -> None:
    reads = cut(body(texts, eol), data)
    limits = StreamLimits(max_choices=1, max_tool_calls=1) if tight else None
    fast = parse(reads, strict, limits)
    with without_quick_decoders(GeminiFormat):
        general = parse(reads, strict, limits)
    assert fast == general
    many, single = format_level(texts, strict)
    assert many == single


@SETTINGS
@given(texts=streams(), data=st.data())
def test_a_resumed_stream_maps_alike(texts: list[str], data: st.DataObject) -> None:
    """A resumed stream's format starts from a token's state (its usage snapshot among it):
    the fast path compares the next snapshot with that one as the general path does."""
    from resume_tokens import token

    first = StreamParser(content_key="k", format="gemini")
    first.feed(body([json.dumps(common(0)), json.dumps(common(1))]))
    state = token(first)
    if data.draw(st.booleans(), "undelivered"):
        state["wire"]["usage_sent"] = False
    reads = cut(body(texts), data)
    fast = parse(reads, resume=state)
    with without_quick_decoders(GeminiFormat):
        general = parse(reads, resume=state)
    assert fast == general


# --------------------------------------------------------------------------- examples


def test_usage_that_changes_and_changes_back_is_delivered_again() -> None:
    """The snapshot kept is the last one that differed from the one before it (not the first
    of equal ones): going back and forth marks it undelivered, as the general path does."""
    chunks = [common(0), common(1), common(2), common(1)]
    chunks[3]["usageMetadata"] = dict(reversed(list(chunks[1]["usageMetadata"].items())))
    chunks.append(with_part(common(3), {"text": "."}))
    chunks[-1]["usageMetadata"] = chunks[3]["usageMetadata"]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    reads = [body([json.dumps(c, separators=(",", ":"))]) for c in chunks]
    fast = parse(reads)
    with without_quick_decoders(GeminiFormat):
        assert parse(reads) == fast
    events = fast[0]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "w0 w1 w2 w1 ."
    assert list(fast[-1]["usage"]) == ["promptTokensDetails", "totalTokenCount",
                                       "promptTokenCount"]


def test_thoughts_and_pieces_on_the_fast_path_are_what_the_general_path_makes() -> None:
    chunks = [common(0), with_part(common(1), {"text": "think", "thought": True}),
              with_part(common(2), {"text": "a", "thought": True}, {"text": "b"}),
              with_part(common(3), {"functionCall": {"name": "f", "willContinue": True}},
                        ),
              with_part(common(4), piece("$.a", "x\"y")),
              with_part(common(5), piece("$.a", "z")),
              with_part(common(6), piece("$.a", "", more=False, call_more=False))]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    reads = [body([json.dumps(c) for c in chunks])]
    fast = parse(reads)
    with without_quick_decoders(GeminiFormat):
        assert parse(reads) == fast
    events = fast[0]
    assert [type(e) for e in events if isinstance(e, (ReasoningBlock, ToolCallDelta))]
    reply = fast[3]
    assert reply["choices"][0]["reasoning"] == "thinka"
    assert reply["choices"][0]["tool_calls"][0]["arguments"] == '{"a":"x\\"yz"}'


def test_a_snapshot_that_grows_after_a_finish_delivered_it_is_delivered_again() -> None:
    """Candidate 0 finishes with the usage unchanged (delivered then, nothing new kept);
    candidate 1 goes on and the usage grows: it is undelivered again, and comes at the end."""
    start = common(0)
    start["candidates"].append({"content": {"parts": [{"text": "b"}]}, "index": 1})
    done = common(1)
    done["candidates"][0]["finishReason"] = "STOP"
    done["usageMetadata"] = common(1)["usageMetadata"]
    later = [common(i, index=1) for i in range(2, 5)]
    reads = [body([json.dumps(c)]) for c in [start, common(1), done, *later]]
    fast = parse(reads)
    with without_quick_decoders(GeminiFormat):
        assert parse(reads) == fast
    usages = [e for e in fast[0] if type(e).__name__ == "UsageUpdate"]
    assert [u.usage.total_tokens for u in usages] == [3, 4, 7]


def test_a_candidate_a_token_restored_outside_the_counts_takes_the_general_path() -> None:
    """Offsets restored for a candidate index that is not a count (only a token can make
    one): its chunks are skipped as the general path skips them, never mapped in line."""
    results = []
    for typed in (True, False):
        with contextlib.nullcontext() if typed else without_quick_decoders(GeminiFormat):
            results.append(_restored_outside_the_counts())
    assert results[0] == results[1]
    assert results[0][1] == 2


def _restored_outside_the_counts() -> tuple[Any, ...]:
    fmt = GeminiFormat("k")
    fmt.restore({"0": {"text": 2}, "-1": {"text": 1}, str(2**60): {"text": 1}}, {}, {})
    out: list[Event] = []
    fmt.feed_many([ServerSentEvent(data=json.dumps(common(0)))], out)
    sses = [ServerSentEvent(data=json.dumps(common(i, index=index)))
            for i, index in enumerate([-1, 2**60, 0], 1)]
    fmt.feed_many(sses, out)
    return out, fmt.skipped, fmt.resume_state()


@pytest.mark.parametrize("usage", [{}, None])
def test_an_empty_or_null_snapshot_mid_stream_changes_nothing(usage: Any) -> None:
    """``{}`` and ``null`` are no snapshot: the one kept stays, delivered or not."""
    chunks = [common(0), common(1), common(2), common(3), common(4)]
    chunks[3]["usageMetadata"] = usage
    chunks[4]["usageMetadata"] = chunks[2]["usageMetadata"]
    chunks[4]["candidates"][0]["finishReason"] = "STOP"
    reads = [body([json.dumps(c)]) for c in chunks]
    fast = parse(reads)
    with without_quick_decoders(GeminiFormat):
        assert parse(reads) == fast
    usages = [e for e in fast[0] if type(e).__name__ == "UsageUpdate"]
    assert [u.usage.total_tokens for u in usages] == [3, 5]
