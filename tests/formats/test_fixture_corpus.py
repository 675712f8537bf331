"""The fixture corpus the suite owns is complete, says where each piece comes from, and still
equals the upstream copy it was carried from (by the digests pinned in
``tests/fixtures/UPSTREAM.json``: no test reads ``../shared``).

A missing owned fixture fails here and in the tests that use it; nothing here skips.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixture_files import (
    CHAT,
    FIXTURES,
    SSE_CASES,
    UPSTREAM_DIGESTS,
    piece_digests,
    require,
    sse_cases,
)

#: What the suite's tests and the other formats' tests rely on: counts per prefix.
CHAT_COUNTS = {"cc-": 52, "resp-": 9, "anth-": 14}


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


def test_carried_pieces_equal_the_upstream_ones() -> None:
    pinned: dict[str, str] = _json(require(UPSTREAM_DIGESTS))
    names = sorted(pinned)
    assert any(n.startswith("chat/") for n in names) and "sse/cases.json" in names
    for name in names:
        require(FIXTURES / name)
    assert piece_digests(FIXTURES, names, carried=True) == pinned
