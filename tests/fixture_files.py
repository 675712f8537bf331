"""Where the suite's fixture corpus lives, and what a missing fixture does: it fails.

The corpus (recorded chat streams, the SSE framing cases, the quirk notes) is carried inside the
repository in ``tests/fixtures/`` so that a fresh clone runs the whole suite. A fixture the
suite owns that is missing is a broken checkout, never a reason to skip: a skip would let two
thirds of the suite pass silently (a fresh clone once skipped most of it).
What was carried from the upstream copy (``../shared/fixtures``) is pinned by its digests in
``tests/fixtures/UPSTREAM.json``, so the suite checks its copy against upstream without
reading ``../shared`` (``tests/formats/test_fixture_corpus.py``); ``python
tests/fixture_files.py ../shared/fixtures`` writes that file again from an upstream copy.
"""

from __future__ import annotations

import hashlib
import json
import sys
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
#: The digests of the upstream pieces the corpus carries (see :func:`piece_digests`).
UPSTREAM_DIGESTS = FIXTURES / "UPSTREAM.json"
#: The upstream pieces besides every file of ``chat/``.
UPSTREAM_PIECES = ("QUIRKS.md", "sse/README.md", "sse/cases.json")


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


def _without_licence(record: dict[str, Any]) -> dict[str, Any]:
    """The carried copy adds only the ``licence`` note; everything else is upstream's."""
    return {k: v for k, v in record.items() if k != "licence"}


def piece_digest(path: Path, *, carried: bool) -> str:
    """SHA-256 of one piece as upstream has it: a carried piece's ``licence`` notes left out
    (chat expectations, SSE cases), JSON compared as values (key order and spacing aside),
    anything else byte for byte."""
    if path.suffix != ".json":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    value = json.loads(path.read_text(encoding="utf-8"))
    if carried:
        value = ([_without_licence(v) for v in value] if isinstance(value, list)
                 else _without_licence(value))
    canonical = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def piece_digests(root: Path, names: list[str], *, carried: bool) -> dict[str, str]:
    """:func:`piece_digest` of each of ``names`` under ``root``."""
    return {name: piece_digest(root / name, carried=carried) for name in names}


def upstream_names(upstream: Path) -> list[str]:
    """The pieces of an upstream copy the corpus carries: every file of ``chat/`` and
    :data:`UPSTREAM_PIECES`."""
    chat = sorted(f"chat/{p.name}" for p in (upstream / "chat").iterdir() if p.is_file())
    return [*chat, *UPSTREAM_PIECES]


if __name__ == "__main__":  # python tests/fixture_files.py ../shared/fixtures
    source = Path(sys.argv[1])
    digests = piece_digests(source, upstream_names(source), carried=False)
    UPSTREAM_DIGESTS.write_text(json.dumps(digests, indent=1) + "\n", encoding="utf-8")
    print(f"{len(digests)} digests written to {UPSTREAM_DIGESTS}")
