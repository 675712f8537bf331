"""Every Python block of ``docs/recipes/browser.md`` runs as written, in a fresh interpreter,
against the embedded server (``OPENAI_BASE_URL``), as a reader who pasted it would run it; the
resumable one prints the reply, rebuilt across a reconnect, and the status of a bad id. The
first block is the one a README shows: an endpoint in about ten lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxstream.server import ServerThread, expected_reply

PAGE = Path(__file__).resolve().parents[2] / "docs" / "recipes" / "browser.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
BLOCKS = [m.group(2) for m in FENCE.finditer(PAGE.read_text(encoding="utf-8"))
          if m.group(1) == "python"]


@pytest.fixture(scope="module")
def module_upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


def run(code: str, upstream: ServerThread, tmp_path: Path) -> str:
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(OPENAI_BASE_URL=upstream.base_url, OPENAI_API_KEY="sk-docs")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_the_page_opens_with_a_short_endpoint() -> None:
    first = BLOCKS[0]
    assert "EventStreamResponse(" in first and "@app.get" in first
    assert len([line for line in first.splitlines() if line.strip()]) <= 10


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_block_runs_as_written(
    index: int, module_upstream: ServerThread, tmp_path: Path,
) -> None:
    out = run(BLOCKS[index], module_upstream, tmp_path)
    if "Last-Event-ID" in BLOCKS[index]:
        text = expected_reply({"model": "gpt-4o-mini",
                               "messages": [{"role": "user", "content": "hi"}],
                               "stream": True, "stream_options": {"include_usage": True}}).text
        assert out.startswith(text + "\n"), out
        assert '"outcome":"done"' in out and "400 malformed_last_event_id" in out
