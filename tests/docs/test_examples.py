"""The examples and the README's usage must work as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_readme_quick_start_has_exactly_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", quick, flags=re.S)
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    assert "fluxstream demo" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()  # CI runs the README's test command, verbatim


def anchors(page: Path) -> set[str]:
    """The anchors MkDocs gives a page's headings (its ``toc`` extension's default slugs)."""
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    slugs = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", slug))
    return slugs


def test_the_readme_links_to_files_and_headings_that_exist() -> None:
    """The README is read on its own (on the forge, in the package): a link into the
    documentation site that does not resolve is the first thing a new user meets. The site's
    own links are checked by ``mkdocs build --strict`` (.ci/run)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in local), local  # not vacuous
    broken = []
    for link in local:
        target, _, anchor = link.partition("#")
        path = ROOT / target
        if not path.is_file() or (anchor and anchor not in anchors(path)):
            broken.append(link)
    assert not broken, broken
