"""The ``ai`` npm package under Node, for tests that read our bytes with the AI SDK's own code.

The package is installed from npm once into a cache directory outside the repository
(``$FLUXSTREAM_NPM_CACHE``, default ``~/.cache/fluxstream/npm``), under a file lock so that
xdist workers install it once between them; later sessions reuse it. Without ``node`` or
``npm`` (or without the registry) the tests are skipped with the reason, unless
``FLUXSTREAM_REQUIRE_NODE=1`` (set by ``.ci/run``), where that is a failure.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

#: The major version of the ``ai`` package the protocol is checked against (``useChat``'s).
AI_PACKAGE = "ai@7"
READER = Path(__file__).with_name("ai_sdk_reader.mjs")


def _unavailable(reason: str) -> None:
    if os.environ.get("FLUXSTREAM_REQUIRE_NODE") == "1":
        pytest.fail(f"FLUXSTREAM_REQUIRE_NODE=1 but {reason}")
    pytest.skip(reason)


def cache_dir() -> Path:
    configured = os.environ.get("FLUXSTREAM_NPM_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fluxstream" / "npm"


def install_ai_sdk() -> Path:
    """The directory (an npm prefix) holding ``node_modules/ai``, installed if missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        _unavailable("node and npm are needed to read our bytes with the `ai` npm package")
    prefix = cache_dir() / AI_PACKAGE.replace("@", "-")
    prefix.mkdir(parents=True, exist_ok=True)
    installed = prefix / "node_modules" / "ai" / "package.json"
    with open(prefix / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time; the others then reuse it
        if not installed.is_file():
            done = subprocess.run(
                ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 "--loglevel=error", AI_PACKAGE],
                capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
            )
            if done.returncode != 0 or not installed.is_file():
                _unavailable(f"`npm install {AI_PACKAGE}` failed: {done.stderr[-1000:]}")
    version = json.loads(installed.read_text())["version"]
    assert version.startswith("7."), version
    return prefix


def read_with_ai_sdk(prefix: Path, cases: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    """Run the reader over ``cases`` (``{"url": ...}`` or ``{"bytes": b"..."}``): one result
    per case (see ``ai_sdk_reader.mjs``)."""
    listed = [
        {"bytes": base64.b64encode(case["bytes"]).decode()} if "bytes" in case else case
        for case in cases
    ]
    cases_file = work / "cases.json"
    cases_file.write_text(json.dumps(listed))
    done = subprocess.run(
        ["node", str(READER), str(prefix), str(cases_file)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert len(results) == len(cases), done.stdout[-3000:]
    return results


def parts(result: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The message's parts of one type (``"text"``, ``"reasoning"``, tool parts: ``"tool"``)."""
    message = result["message"] or {"parts": []}
    if kind == "tool":
        return [p for p in message["parts"] if p["type"].startswith("tool-")]
    return [p for p in message["parts"] if p["type"] == kind]


def joined(result: dict[str, Any], kind: str) -> str:
    return "".join(p["text"] for p in parts(result, kind))
