"""Reasoning inside the text between tags, split out by the sans-IO ``TagSplitter``.

Held to a whole-text reference at every cut (hypothesis draws the text, the pieces a server
sends it in and the reads a client gets them in), through the parser of every wire format.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fluxstream import ReasoningDelta, StreamParser, TextDelta, ThinkTags
from fluxstream._core.resume_token import write_token
from fluxstream._core.think_tags import MAX_WHITESPACE, TagSplitter
from fluxstream.cli.capture import load_capture, replay_capture

KEY = "k"
TAGS = ThinkTags()
WS = " \t\r\n"


def reference(full: str, tags: ThinkTags) -> tuple[str, str, bool]:
    """(text, reasoning, unclosed) of a whole text, read without any cut."""
    names = "|".join(map(re.escape, tags.names))
    text: list[str] = []
    reasoning: list[str] = []
    opened = re.match(rf"[ \t\r\n]{{0,{MAX_WHITESPACE}}}<({names})>", full)
    rest = full
    if opened is None:
        if not tags.anywhere:
            return full, "", False
        name = None
    else:
        name, rest = opened[1], full[opened.end():]
    while True:
        if name is not None:
            close = f"</{name}>"
            at = rest.find(close)
            if at < 0:
                reasoning.append(rest)
                return "".join(text), "".join(reasoning), True
            reasoning.append(rest[:at])
            rest = rest[at + len(close):]
            spaces = len(rest) - len(rest.lstrip(WS))
            rest = rest[min(spaces, MAX_WHITESPACE):]
            name = None
            if not tags.anywhere:
                text.append(rest)
                return "".join(text), "".join(reasoning), False
        found = re.search(rf"<({names})>", rest)
        if found is None:
            text.append(rest)
            return "".join(text), "".join(reasoning), False
        text.append(rest[:found.start()])
        name, rest = found[1], rest[found.end():]


def run(pieces: list[str], tags: ThinkTags = TAGS) -> tuple[str, str, bool, TagSplitter]:
    """Split ``pieces`` as deltas of choice 0; the text and reasoning given out, offsets
    checked to follow on from each other on both channels."""
    splitter = TagSplitter(tags, KEY)
    at = {"text": 0, "reasoning": 0}
    out: dict[str, list[str]] = {"text": [], "reasoning": []}
    offset = 0
    events = []
    for piece in pieces:
        events += splitter.split([TextDelta(KEY, 0, offset, piece)])
        offset += len(piece)
    events += splitter.flush()
    for event in events:
        assert isinstance(event, TextDelta | ReasoningDelta) and event.text
        assert event.offset == at[event.type]
        at[event.type] += len(event.text)
        out[event.type].append(event.text)
    return "".join(out["text"]), "".join(out["reasoning"]), 0 in splitter.unclosed(), splitter


# Texts rich in what could be a tag: its letters, '<', '/', '>', whitespace and non-ASCII.
ATOMS = st.sampled_from([
    "<think>", "</think>", "<thinking>", "</thinking>", "<reasoning>", "</reasoning>",
    "<", "</", ">", "<th", "ink", "</th", "think", "a", "é", "👋🏽", " ", "\n", "\n\n", "x y",
    "<b>", "<thinker>",
])
TEXTS = st.lists(ATOMS, max_size=30).map("".join)


def cuts(text: str, data: st.DataObject) -> list[str]:
    points = sorted(data.draw(st.sets(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=400, deadline=None, derandomize=True)
@given(text=TEXTS, anywhere=st.booleans(), data=st.data())
def test_every_cut_splits_as_the_whole_text_does(
    text: str, anywhere: bool, data: st.DataObject
) -> None:
    tags = ThinkTags(anywhere=anywhere)
    got_text, got_reasoning, unclosed, splitter = run(cuts(text, data), tags)
    assert (got_text, got_reasoning, unclosed) == reference(text, tags)
    # The text as the server sent it is given back from the two channels and the tags.
    assert splitter.wire_text(0, got_text, got_reasoning) == text


@pytest.mark.parametrize("pieces", [
    ["<", "t", "hi", "n", "k", ">", "let me see", "</thi", "nk>\n\n", "Answer"],
    ["<think>let me see</think>", "Answer"],
    ["\n <think", ">let me see<", "/think>Answer"],
])
def test_a_tag_split_across_chunks_is_still_a_tag(pieces: list[str]) -> None:
    assert run(pieces)[:3] == ("Answer", "let me see", False)


def test_a_tag_inside_the_answer_is_text_by_default_and_reasoning_when_anywhere() -> None:
    pieces = ["Use <think>", " tags</think> like this"]
    assert run(pieces)[:3] == ("Use <think> tags</think> like this", "", False)
    assert run(pieces, ThinkTags(anywhere=True))[:3] == ("Use like this", " tags", False)


def test_an_unclosed_tag_is_reasoning_and_says_so() -> None:
    assert run(["<think>still going </thi"])[:3] == ("", "still going </thi", True)


def test_a_closing_tag_must_name_the_tag_that_opened() -> None:
    assert run(["<thinking>a</think>b</thinking>c"])[:3] == ("c", "a</think>b", False)


def test_only_the_names_given_are_tags() -> None:
    tags = ThinkTags(names=("reflect",))
    assert run(["<think>x</think>y"], tags)[:2] == ("<think>x</think>y", "")
    assert run(["<reflect>x</reflect>y"], tags)[:2] == ("y", "x")


@pytest.mark.parametrize("names", [(), ("",), ("a b",), ("<think>",), "think", ("x" * 40,)])
def test_tag_names_that_are_no_names_are_refused(names: object) -> None:
    with pytest.raises(ValueError, match="names"):
        ThinkTags(names=names)  # type: ignore[arg-type]


def test_whitespace_held_at_the_start_is_bounded() -> None:
    spaces = " " * (MAX_WHITESPACE + 1)
    assert run([spaces, "<think>x</think>"])[:2] == (spaces + "<think>x</think>", "")


# ---------------------------------------------------------------------------- the parser


def chat_body(pieces: list[str], finish: str | None = "stop") -> bytes:
    frames = [
        {"id": "c", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        for piece in pieces
    ]
    if finish:
        frames.append({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    body = b"".join(f"data: {json.dumps(frame)}\n\n".encode() for frame in frames)
    return body + (b"data: [DONE]\n\n" if finish else b"")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=TEXTS, data=st.data())
def test_the_parser_splits_exactly_at_every_read_boundary(text: str, data: st.DataObject) -> None:
    finish = data.draw(st.sampled_from(["stop", "length", None]))
    body = chat_body(cuts(text, data), finish)
    reads = cuts(body.decode("latin-1"), data)
    parser = StreamParser(think_tags=TAGS)
    events = []
    for read in reads:
        events += parser.feed(read.encode("latin-1"))
    events += parser.close()
    want_text, want_reasoning, unclosed = reference(text, TAGS)
    choices = parser.reply.choices
    if not text and finish is None:
        assert choices == []
        return
    choice = choices[0]
    assert (choice.text, choice.reasoning or "", choice.reasoning_unclosed) == (
        want_text, want_reasoning, unclosed)
    shown = {"text": "", "reasoning": ""}
    for event in events:
        if isinstance(event, TextDelta | ReasoningDelta):
            kept = shown[event.type]
            shown[event.type] = kept[:event.offset] + event.text
    assert (shown["text"], shown["reasoning"]) == (want_text, want_reasoning)


def test_off_by_default_the_text_is_untouched() -> None:
    body = chat_body(["<think>a</think>", "b"])
    parser = StreamParser()
    parser.feed(body)
    assert parser.reply.text == "<think>a</think>b" and parser.reply.choices[0].reasoning is None


def test_a_provider_s_own_reasoning_and_tagged_reasoning_share_one_channel() -> None:
    native = {"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "N"}}]}
    body = f"data: {json.dumps(native)}\n\n".encode() + chat_body(["<think>T</think>", "A"])
    parser = StreamParser(think_tags=TAGS)
    events = parser.feed(body)
    reasoning = [(e.offset, e.text) for e in events if isinstance(e, ReasoningDelta)]
    assert reasoning == [(0, "N"), (1, "T")] and parser.reply.text == "A"


def test_a_cancel_and_a_failure_decide_what_is_held_back() -> None:
    for end in ("cancel", "fail"):
        parser = StreamParser(think_tags=TAGS)
        parser.feed(chat_body(["<think>abc</th"], finish=None))
        events = getattr(parser, end)("bye")
        assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["</th"]
        assert parser.reply.choices[0].reasoning == "abc</th"
        assert parser.reply.choices[0].reasoning_unclosed


def test_a_reset_starts_every_choice_over() -> None:
    parser = StreamParser(think_tags=TAGS)
    parser.feed(chat_body(["<think>abc</think>", "x"], finish=None))
    parser.reset(2, "restart")
    parser.feed(chat_body(["<think>d</think>", "y"]))
    assert (parser.reply.text, parser.reply.choices[0].reasoning) == ("y", "d")


def test_a_resume_token_goes_on_inside_the_tags() -> None:
    parser = StreamParser(think_tags=TAGS)
    parser.feed(chat_body(["<think>abc"], finish=None))
    token = write_token(parser, api="chat_completions", path="/chat/completions",
                        body={"model": "m", "messages": []}, continued=False)
    again = StreamParser.from_token(token, think_tags=TAGS)
    events = again.feed(chat_body(["d</think>", "answer"]))
    assert (again.reply.text, again.reply.choices[0].reasoning) == ("answer", "abcd")
    assert [(e.offset, e.text) for e in events if isinstance(e, ReasoningDelta)] == [(3, "d")]


# ---------------------------------------------------------------------------- recorded streams

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "think_tags"


@pytest.mark.parametrize("name", [
    "llama-chat-think.json", "llama-responses-think.json", "llama-chat-think-length.json",
])
@pytest.mark.parametrize("read_size", [0, 1, 7, 64])
def test_llama_cpp_s_recorded_tags_split_at_any_read_size(name: str, read_size: int) -> None:
    """Captured from llama.cpp's server (Gemma 3 270M, a grammar starting ``<think>``, the
    tags in ``content`` as ``<``, ``t``, ``hi``, ``n``, ``k``, ``>``): the reply read with
    the tags split out is the one read without them, split as the whole text is."""
    capture = load_capture(str(FIXTURES / name))
    raw = replay_capture(capture, format=capture.wire_format).choices[0]
    split = replay_capture(
        capture, read_size=read_size, format=capture.wire_format, think_tags=TAGS).choices[0]
    assert raw.text.startswith("<think>")
    assert (split.text, split.reasoning or "", split.reasoning_unclosed) == reference(
        raw.text, TAGS)
    assert split.reasoning_unclosed is (name == "llama-chat-think-length.json")


@pytest.mark.parametrize("before", [["<thi"], ["<think>"], ["  "]])
def test_a_hand_off_before_anything_was_shown_starts_the_split_over(before: list[str]) -> None:
    """A tag held back, or an opening tag taken, showed nothing: the next upstream's fresh
    reply must not be read as going on from it."""
    parser = StreamParser(think_tags=TAGS)
    assert parser.feed(chat_body(before, finish=None)) == []
    assert not parser.saw_content
    parser.switch_format("anthropic_messages")
    parser.switch_format("chat_completions")
    parser.feed(chat_body(["<think>a</think>", "b"]))
    assert (parser.reply.text, parser.reply.choices[0].reasoning) == ("b", "a")
