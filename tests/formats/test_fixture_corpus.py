"""The fixture corpus the suite owns is complete, says where each piece comes from, and (when
``../shared`` sits beside the checkout) still equals the upstream copy it was carried from.

A missing owned fixture fails here and in the tests that use it; only the upstream cross-check
may skip, because ``../shared`` is optional.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixture_files import CHAT, FIXTURES, SHARED, SSE_CASES, require, sse_cases

#: What the suite's tests and the other formats' tests rely on: counts per prefix.
CHAT_COUNTS = {"cc-": 52, "resp-": 9, "anth-": 14}
NO_SHARED = f"no upstream copy at {SHARED} to cross-check against"


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_every_owned_piece_is_present() -> None:
    for piece in ("README.md", "QUIRKS.md", "chat/README.md", "sse/README.md", "sse/cases.json"):
        require(FIXTURES / piece)
    for prefix, count in CHAT_COUNTS.items():
        streams = sorted(require(CHAT).glob(f"{prefix}*.sse"))
        assert len(streams) == count, (prefix, len(streams))
        for stream in streams:
            require(stream.with_suffix(".json"))
    assert len(list(CHAT.glob("*.json"))) == sum(CHAT_COUNTS.values())


def test_every_recorded_stream_names_its_source_and_licence() -> None:
    for path in sorted(require(CHAT).glob("*.json")):
        record = _json(path)
        assert record["source"].strip(), path.name
        assert record["licence"].strip(), path.name
    cases = sse_cases()
    assert len(cases) == 101, f"expected 101 cases in {SSE_CASES}"
    for case in cases:
        assert case["source"].strip() and case["licence"].strip(), case["id"]


def test_the_readme_names_every_set_and_every_licence() -> None:
    readme = require(FIXTURES / "README.md").read_text(encoding="utf-8")
    licences = {_json(p)["licence"] for p in CHAT.glob("*.json")}
    licences |= {c["licence"] for c in sse_cases()}
    for licence in sorted(licences):
        for part in licence.split("; "):
            spdx = part.split(" (")[0]
            assert spdx in readme, f"licence {spdx!r} is not explained in tests/fixtures/README.md"
    for prefix in CHAT_COUNTS:
        assert f"`{prefix}*`" in readme


# --------------------------------------------------------------------------- upstream cross-check


def _without_licence(record: dict[str, Any]) -> dict[str, Any]:
    """The carried copy adds only the ``licence`` note; everything else is upstream's."""
    return {k: v for k, v in record.items() if k != "licence"}


@pytest.mark.skipif(not SHARED.is_dir(), reason=NO_SHARED)
def test_carried_chat_streams_equal_the_upstream_ones() -> None:
    upstream = {p.name for p in (SHARED / "chat").iterdir()}
    carried = {p.name for p in CHAT.iterdir()}
    assert upstream <= carried, f"not carried yet: {sorted(upstream - carried)}"
    for name in sorted(upstream):
        ours, theirs = CHAT / name, SHARED / "chat" / name
        if name.endswith(".json"):
            assert _without_licence(_json(ours)) == _json(theirs), name
        else:
            assert ours.read_bytes() == theirs.read_bytes(), name


@pytest.mark.skipif(not SHARED.is_dir(), reason=NO_SHARED)
def test_carried_sse_cases_and_quirks_equal_the_upstream_ones() -> None:
    theirs = _json(SHARED / "sse" / "cases.json")
    assert [_without_licence(c) for c in sse_cases()] == theirs
    for piece in ("QUIRKS.md", "sse/README.md"):
        assert (FIXTURES / piece).read_bytes() == (SHARED / piece).read_bytes(), piece
