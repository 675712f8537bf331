"""``fluxstream chat`` says, on a line of its own, that the connection dropped and the reply
is being resumed, as it happens: the resume was silent (the demo counted it, ``chat`` said
nothing), and a warning logged meanwhile landed in the middle of the streamed text. With a
fallback, the primary's own resumes come first, each a line, then the handoff."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from cli_support import ENV, run_cli

from fluxstream.server import ServerThread
from fluxstream.server.script import expected_reply

PROMPT = "hello rivers"
EXPECTED = expected_reply(
    {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
).text
RESUME = re.compile(r"^↻ connection dropped \((.+)\); resuming by last_event_id \((\d)/5\)$",
                    re.M)
HANDOFF = re.compile(r"^↪ continued on backup after (.+) at offset (\d+)$", re.M)


@pytest.fixture(scope="module")
def fallback() -> Iterator[ServerThread]:
    with ServerThread() as server:
        yield server


def _chat(url: str, *extra: str, merged: bool = False) -> subprocess.CompletedProcess[str]:
    args = ("chat", "--base-url", url, "--api-key", "k", *extra, PROMPT)
    if not merged:
        return run_cli(*args)
    return subprocess.run(  # stdout and stderr to one place: a terminal, or 2>&1
        [sys.executable, "-m", "fluxstream", *args], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=60, env=ENV, stdin=subprocess.DEVNULL,
    )


def _reply(stdout: str) -> str:
    text, sep, _ = stdout.partition("\n\noutcome:")
    assert sep, stdout
    return text


def test_a_resumed_drop_is_one_line_on_stderr() -> None:
    with ServerThread(faults="drop-after-events=6,fail-first=1") as primary:
        result = _chat(primary.base_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _reply(result.stdout) == EXPECTED  # the text whole, each character once
    (line,) = result.stderr.splitlines()
    match = RESUME.match(line)
    assert match is not None, line
    assert match[2] == "1"


def test_on_one_terminal_the_resume_line_is_not_inside_the_text() -> None:
    with ServerThread(faults="drop-after-events=6,fail-first=1") as primary:
        result = _chat(primary.base_url, merged=True)
    assert result.returncode == 0, result.stdout
    shown = _reply(result.stdout)
    match = RESUME.search(shown)
    assert match is not None, shown
    before, after = shown[: match.start()], shown[match.end() + 1:]
    assert before.endswith("\n")  # the line the text was on is ended first
    assert before[:-1] + after == EXPECTED or before + after == EXPECTED


def test_with_a_fallback_each_resume_on_the_primary_is_a_line_then_the_handoff(
    fallback: ServerThread,
) -> None:
    """A primary that supports Last-Event-ID but drops every connection: the reply is resumed
    there up to five times (``ResumePolicy.max_resumes``), each said, before it goes on on the
    fallback: the order a user trying failover sees."""
    with ServerThread(faults="drop-after-events=3") as primary:
        result = _chat(primary.base_url, "--fallback", f"{fallback.base_url},name=backup")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _reply(result.stdout) == EXPECTED
    *resumes, handoff = result.stderr.splitlines()
    assert [RESUME.match(line)[2] for line in resumes] == ["1", "2", "3", "4", "5"], resumes  # type: ignore[index]
    assert HANDOFF.match(handoff), handoff
