"""Every Python block of the recipe pages runs as written, against the embedded server.

As the README's blocks: each is saved as a script and run in a fresh interpreter with
``OPENAI_BASE_URL`` naming a running embedded server, and must print what the page says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluxstream.server import ServerThread

RECIPES = Path(__file__).resolve().parents[2] / "docs" / "recipes"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
#: What each page's blocks must print, in order of the blocks.
PRINTS = {
    "reasoning-tags.md": [["thinking:", "reasoning: The user wants", "answer: Hello"],
                          ["'2 and 2' '4.'"]],
    "rate-limits.md": [["of 60 requests left until", "tokens left: 99000", "request id: req_"],
                       ["503 retry? False"]],
}


def blocks(page: str) -> list[str]:
    text = (RECIPES / page).read_text(encoding="utf-8")
    return [m.group(2) for m in FENCE.finditer(text) if m.group(1) == "python"]


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


@pytest.mark.parametrize("page", sorted(PRINTS))
def test_the_page_s_python_blocks_run(page: str, upstream: ServerThread,
                                      tmp_path: Path) -> None:
    found = blocks(page)
    assert len(found) == len(PRINTS[page])
    env = {**os.environ, "OPENAI_BASE_URL": upstream.base_url, "NO_COLOR": "1"}
    env.pop("OPENAI_API_KEY", None)
    for number, (code, wanted) in enumerate(zip(found, PRINTS[page], strict=True)):
        script = tmp_path / f"block{number}.py"
        script.write_text(code, encoding="utf-8")
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env=env, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        for text in wanted:
            assert text in done.stdout, (text, done.stdout)
