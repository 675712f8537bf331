"""Every recorded Chat Completions stream of the corpus assembles exactly, however it is read.

The corpus (`tests/fixtures/chat`, 52 `cc-*.sse` streams with expected `.json`) is fed
whole, one byte at a time and in seeded random reads; a hypothesis property checks that the
event list itself does not depend on where reads are cut.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from fixture_files import CHAT, chat_expected, chat_streams, require
from format_corpus import check_events_rebuild_reply, check_reply

from fluxstream._events import (
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
)
from fluxstream._parser import StreamParser, replay


def chat_fixtures() -> list[Path]:
    """Every ``cc-*.sse`` stream (a failing placeholder when the corpus is gone)."""
    return chat_streams("cc-")


def require_fixtures() -> None:
    """Fail (never skip) when the corpus the suite owns is not there."""
    require(CHAT)


def expected(path: Path) -> dict[str, Any]:
    return chat_expected(path)


def random_reads(body: bytes, seed: int, max_size: int = 64) -> list[bytes]:
    rng = random.Random(seed)
    reads, pos = [], 0
    while pos < len(body):
        size = rng.randint(1, max_size)
        reads.append(body[pos : pos + size])
        pos += size
    return reads


# --------------------------------------------------------------------------- the tests

FILES = chat_fixtures()
IDS = [p.stem for p in FILES]
MODES = ["whole", "bytewise", "random-1", "random-2", "random-3", "random-4"]


def _reads(body: bytes, mode: str) -> list[bytes]:
    if mode == "whole":
        return [body]
    if mode == "bytewise":
        return [body[i : i + 1] for i in range(len(body))]
    return random_reads(body, seed=int(mode.split("-")[1]), max_size=48)


def test_corpus_is_present_and_complete() -> None:
    require_fixtures()
    assert len(FILES) == 52, "the chat corpus has 52 cc-*.sse streams"
    for path in FILES:
        assert path.with_suffix(".json").is_file(), path


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_fixture_assembles_exactly(path: Path, mode: str) -> None:
    body = require(path).read_bytes()
    reply = replay(_reads(body, mode))
    check_reply(reply, expected(path))
    assert reply.bytes == len(body)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_events_rebuild_the_reply(path: Path) -> None:
    """Offsets make deltas idempotent: writing each at its offset rebuilds every channel,
    and replaying every delta twice changes nothing."""
    parser = StreamParser(content_key="k")
    events = parser.feed(require(path).read_bytes()) + parser.close()
    text_like = (TextDelta, ReasoningDelta, RefusalDelta)
    assert all(ev.key == "k" for ev in events if isinstance(ev, text_like))
    check_events_rebuild_reply(events, parser.reply)


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_strict_mode_accepts_every_fixture(path: Path) -> None:
    """No fixture has an invalid frame except cut ones at EOF, which strict mode also drops."""
    check_reply(replay([require(path).read_bytes()], strict=True), expected(path))
