"""``fluxstream chat -p n=2``: each choice is printed whole, one after another, labelled;
choice 0 still streams as it arrives."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import ENV, run_cli

from fluxstream.server import ServerThread
from fluxstream.server.script import expected_reply


@pytest.fixture
def server() -> Iterator[Any]:
    with ServerThread(port=0) as srv:
        yield srv


def test_choices_are_printed_one_after_another(server: Any) -> None:
    result = run_cli("chat", "--base-url", server.base_url, "--model", "m", "-p", "n=3", "two")
    assert result.returncode == 0, result.stdout + result.stderr
    sent = server.records.requests[-1].json
    choices = expected_reply(sent).choices
    assert len(choices) == 3
    out = result.stdout
    starts = []
    for choice in choices:
        label = f"[choice {choice.index}]\n"
        assert out.count(label) == 1, out
        starts.append(out.index(label + choice.text))  # the label, then the whole text
    assert starts == sorted(starts)  # in order: 0, 1, 2


def test_choice_zero_streams_live_while_the_others_wait(server: Any) -> None:
    """Before the server has finished, choice 0's first words are already on the screen."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxstream", "chat", "--base-url", server.base_url,
         "--model", "m", "-p", "n=2", "--header", "X-Fluxstream-Fault: drip=0.05", "two"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV,
    )
    try:
        assert proc.stdout is not None
        seen = b""
        deadline = time.monotonic() + 60
        while b"Hello \xe2\x80\x94 or" not in seen and time.monotonic() < deadline:
            byte = proc.stdout.read(1)
            if not byte:
                break
            seen += byte
        assert b"Hello \xe2\x80\x94 or" in seen, seen
        # 2 choices x 30 deltas, 50 ms apart: the reply is far from complete.
        assert not server.records.responses
        assert b"Take 2" not in seen  # choice 1 waits for choice 0
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    text = (seen + out).decode()
    first, second = expected_reply(server.records.requests[-1].json).choices
    assert text.index(first.text) < text.index("[choice 1]\n" + second.text)
