"""The Gemini corpus (``tests/fixtures/gemini``): where it is, and a reply in its field names.

The expectations (``gem-*.json``) use the corpus' own names (``tests/fixtures/gemini/README.md``):
``choices`` keyed by candidate index, ``usage`` the last ``usageMetadata`` verbatim, ``error``
``{message, code, status}`` (``{message, blockReason}`` for a blocked prompt) and ``ended``
(``failed`` when an error arrived, ``done`` when the body ended after every finish reason or a
block, else ``truncated``). :func:`as_corpus` maps a :class:`~fluxstream._reply.Reply` onto them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fixture_files import FIXTURES, require
from format_corpus import as_corpus as chat_corpus

from fluxstream._events import Outcome
from fluxstream._reply import Reply

GEMINI = FIXTURES / "gemini"


def gemini_streams() -> list[Path]:
    """Every ``gem-*.sse``, sorted; a placeholder that fails when none (never a skip)."""
    return sorted(GEMINI.glob("gem-*.sse")) or [GEMINI / "gem-MISSING.sse"]


def gemini_expected(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        require(path.with_suffix(".json")).read_text(encoding="utf-8")
    )
    return data


def as_corpus(reply: Reply) -> dict[str, Any]:
    """The reply in the corpus' field names."""
    got = chat_corpus(reply)
    error = reply.error
    if error is None:
        got["error"] = None
    elif error.type == "prompt_blocked":
        got["error"] = {"message": error.message, "blockReason": error.code}
    else:
        code = int(error.code) if error.code and error.code.isdecimal() else error.code
        got["error"] = {"message": error.message, "code": code, "status": error.type}
    if reply.outcome is Outcome.FAILED and (error is None or error.type != "prompt_blocked"):
        got["ended"] = "failed"
    return got


def check(reply: Reply, exp: dict[str, Any]) -> None:
    got = as_corpus(reply)
    for field in ("choices", "usage", "error", "ended"):
        assert got[field] == exp[field], field
