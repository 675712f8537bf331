"""docs/recipes/testing.md runs as written: each ```python block is a user's test file, run
by pytest with the plugin (every test in it must pass), so the page cannot drift from the kit.

The cassette block records from OpenAI in the page; here it records once from a local
upstream instead (the only change made to a block), then replays without it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from kit_plugin import PLUGIN

import fluxstream
from fluxstream.testing import Upstream

ROOT = Path(fluxstream.__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "recipes" / "testing.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
BLOCKS = [m.group(2) for m in FENCE.finditer(PAGE.read_text(encoding="utf-8"))
          if m.group(1) == "python"]
REAL = 'record_from="https://api.openai.com"'


def test_the_page_opens_with_the_readme_example() -> None:
    assert "def test_the_app_survives_a_drop(fluxstream_upstream)" in BLOCKS[0]


@pytest.mark.parametrize("block", range(len(BLOCKS)))
def test_each_block_passes_as_a_test_file(pytester: pytest.Pytester,
                                          monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    code = BLOCKS[block]
    assert "def test_" in code, "each block of the page is a test file"
    tests = len(re.findall(r"^def test_", code, flags=re.M))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = ("-p", PLUGIN, "-p", "no:cacheprovider")
    if REAL not in code:
        pytester.makepyfile(test_block=code)
        pytester.runpytest_subprocess(*args, timeout=120).assert_outcomes(passed=tests)
        return
    with Upstream() as real:
        real.reply(text="Hello!")
        pytester.makepyfile(test_block=code.replace(REAL, f'record_from="{real.url}"'))
        recorded = pytester.runpytest_subprocess(*args, "--fluxstream-record=missing",
                                                 timeout=120)
        recorded.assert_outcomes(passed=tests)
        assert len(real.requests) == tests
    assert (pytester.path / "cassettes" / "greeting.json").exists()
    replayed = pytester.runpytest_subprocess(*args, timeout=120)  # the real one is gone
    replayed.assert_outcomes(passed=tests)
    assert os.environ.get("OPENAI_API_KEY") is None
