"""Text from a server or a capture never reaches the terminal as control sequences.

A reply (or a tool name, a finish reason) can carry escape sequences that retitle the window,
clear the screen or write the clipboard (OSC 52) when printed raw. By default the CLI shows
every control character visibly (``\\x1b``), except newline and tab; ``--raw`` prints the
bytes as they came; ``--json`` escapes them as JSON does (C1 controls too).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import canned_server, run_cli
from sse_frames import chat_frame

from fluxstream.cli import main

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
C1_CSI = "\u009b31m"
TEXT = f"one{TITLE}\ttwo{CLEAR}\nthree{CLIPBOARD} four{C1_CSI}\r\n"
TOOL = "get\x1b[8mweather"
RAW_CONTROLS = ("\x1b", "\x07", "\u009b", "\r")


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return chat_frame({"index": 0, "delta": delta, "finish_reason": finish}, id="c1", typed=True)


BODY = (
    _chunk({"role": "assistant", "content": TEXT[:7]})
    + _chunk({"content": TEXT[7:]})
    + _chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                              "function": {"name": TOOL, "arguments": "{}"}}]})
    + _chunk({}, "stop\x1b]0;x\x07")
    + b"data: [DONE]\n\n"
)


def _assert_neutral(out: str) -> None:
    for raw in RAW_CONTROLS:
        assert raw not in out, (raw, out)
    # Shown, not dropped: a reader sees what the server tried.
    assert "one\\x1b]0;pwned\\x07\ttwo\\x1b[2J\\x1b[H\nthree\\x1b]52;c;" in out
    assert "four\\x9b31m" in out
    assert "get\\x1b[8mweather" in out


def test_chat_shows_control_characters_visibly_unless_raw() -> None:
    with canned_server(BODY) as server:
        safe = run_cli("chat", "--base-url", server.base_url, "hi")
        raw = run_cli("chat", "--base-url", server.base_url, "--raw", "hi")
    assert safe.returncode == 0, safe.stdout + safe.stderr
    _assert_neutral(safe.stdout)
    assert raw.returncode == 0, raw.stdout + raw.stderr
    assert TEXT.rstrip("\r\n") in raw.stdout and TOOL in raw.stdout


def test_replay_shows_control_characters_visibly_and_json_escapes_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hostile.sse"
    path.write_bytes(BODY)
    safe = run_cli("replay", str(path))
    assert safe.returncode == 0, safe.stdout + safe.stderr
    _assert_neutral(safe.stdout)

    as_json = run_cli("replay", str(path), "--json")
    assert as_json.returncode == 0, as_json.stderr
    for raw in RAW_CONTROLS:
        assert raw not in as_json.stdout
    assert json.loads(as_json.stdout)["choices"][0]["text"] == TEXT  # escaped, not changed

    raw = run_cli("replay", str(path), "--raw")
    assert TITLE in raw.stdout and C1_CSI in raw.stdout


def test_demo_shows_control_characters_visibly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo prints what its embedded server sends through the same guard (here a server
    whose scripted answer carries escape sequences)."""
    import fluxstream.server.script as script

    monkeypatch.setattr(script, "text_deltas", lambda count, choice: (TEXT[:9], TEXT[9:]))
    code = main(["demo", "--pace", "0", "--no-faults", "hi"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    for raw in RAW_CONTROLS:
        assert raw not in out + err
    assert "one\\x1b]0;pwned\\x07\ttwo\\x1b[2J\\x1b[H\nthree\\x1b]52;c;" in out
