"""Where the suite's fixture corpus lives, and what a missing fixture does: it fails.

The corpus (recorded chat streams, the SSE framing cases, the quirk notes) is carried inside the
repository in ``tests/fixtures/`` so that a fresh clone runs the whole suite. A fixture the
suite owns that is missing is a broken checkout, never a reason to skip: a skip would let two
thirds of the suite pass silently (a fresh clone once skipped most of it).
``../shared/fixtures`` beside the checkout, where present, is only an extra cross-check
(``tests/formats/test_fixture_corpus.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
#: The corpus the suite owns.
FIXTURES = HERE / "fixtures"
CHAT = FIXTURES / "chat"
#: Gemini's recorded streams (their expectations in that corpus' own names: ``gemini/README.md``).
GEMINI = FIXTURES / "gemini"
SSE_CASES = FIXTURES / "sse" / "cases.json"
#: The upstream copy, when a checkout sits beside it (an optional cross-check, never required).
SHARED = HERE.parent.parent / "shared" / "fixtures"


def require(path: Path) -> Path:
    """``path``, or a test failure that says the owned corpus is incomplete."""
    if not path.exists():
        pytest.fail(
            f"fixture {path} is missing: tests/fixtures/ is part of the repository, restore it "
            "(git checkout -- tests/fixtures)",
            pytrace=False,
        )
    return path


def chat_streams(prefix: str) -> list[Path]:
    """Every ``<prefix>*.sse`` of the chat corpus, sorted; a placeholder that fails when none.

    Parametrising over an empty list would make pytest *skip* the test ("got empty parameter
    set"); the placeholder path instead reaches :func:`require` in the test and fails.
    """
    found = sorted(CHAT.glob(f"{prefix}*.sse"))
    return found or [CHAT / f"{prefix}MISSING.sse"]


def chat_stream(name: str) -> Path:
    """The recorded body ``<name>.sse`` (failing the test if the corpus lost it)."""
    return require(CHAT / f"{name}.sse")


def chat_expected(name_or_path: str | Path) -> dict[str, Any]:
    """The expected assembly ``<name>.json`` of a recorded stream."""
    stem = name_or_path.stem if isinstance(name_or_path, Path) else name_or_path
    data: dict[str, Any] = json.loads(require(CHAT / f"{stem}.json").read_text(encoding="utf-8"))
    return data


def sse_cases() -> list[dict[str, Any]]:
    """The SSE framing cases, or ``[]`` when the file is gone (the suite then fails on it)."""
    if not SSE_CASES.is_file():
        return []
    cases: list[dict[str, Any]] = json.loads(SSE_CASES.read_text(encoding="utf-8"))
    return cases


def api_streams(api_name: str) -> list[Path]:
    """Every recorded stream whose expectation says it is in the wire format of ``api_name``
    (the ``format`` field of its ``.json``, the API's one name), sorted; a placeholder that
    fails when there is none (an API without a recorded stream is untested)."""
    found = sorted(
        path.with_suffix(".sse") for corpus in (CHAT, GEMINI) for path in corpus.glob("*.json")
        if json.loads(path.read_text(encoding="utf-8")).get("format") == api_name
    )
    return found or [CHAT / f"{api_name}-MISSING.sse"]
