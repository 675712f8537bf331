"""``fluxstream demo --handoff``: two embedded servers, the first dropping every connection in
mid-answer; the reply goes on on the second, in another API, and reads whole: each character
once, none missing, one line saying where it went on and from which offset."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from cli_support import ENV, run_cli

from fluxstream.cli.args import FORMATS
from fluxstream.server.script import expected_reply

PROMPT = "Tell me how fluxstream streams a reply, token by token."
EXPECTED = expected_reply(
    {"model": "flux-demo", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
).text
NOTE = re.compile(r"^↪ continued on (\S+) after (.+) at offset (\d+)$", re.M)
#: The fallback's API when none is chosen: another than the primary's.
OTHER = {"chat_completions": "anthropic_messages"}


def split_output(stdout: str) -> tuple[str, str, str]:
    """The banner, the reply as printed, and the summary."""
    banner, sep, rest = stdout.partition("\n\n")
    assert sep, stdout
    text, sep, tail = rest.partition("\n\noutcome:")
    assert sep, stdout
    return banner, text, "outcome:" + tail


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_reply_goes_on_on_the_fallback_each_character_once(fmt: str) -> None:
    result = run_cli("demo", "--handoff", "--pace", "0", "--format", fmt)
    assert result.returncode == 0, result.stdout + result.stderr
    banner, text, summary = split_output(result.stdout)
    fallback_api = OTHER.get(fmt, "chat_completions")
    assert f"({fmt}, drops mid-reply)" in banner and f"({fallback_api})" in banner
    assert text == EXPECTED  # every character once, none missing
    (line,) = result.stderr.splitlines()
    note = NOTE.match(line)
    assert note is not None, line
    assert note[1].endswith(f"/{fallback_api}")
    offset = int(note[3])
    assert 0 < offset < len(EXPECTED)
    assert "outcome:        done" in summary
    segments = re.findall(r"^(?:segments:)?\s+\d\. (\S+) \(flux-demo\): characters (\d+)-(\d+)"
                          r", 1 request.*; (.*)$", summary, re.M)
    assert [(s[1], s[2]) for s in segments] == [("0", str(offset)),
                                                (str(offset), str(len(EXPECTED)))]
    assert segments[0][0].endswith(f"/{fmt}") and segments[1][0] == note[1]
    assert segments[1][3] == "done"
    assert re.search(r"^survived: .*, 1 handoff, continued on \S+$", summary, re.M)
    # the primary was cut before its usage's final count: its part is estimated
    assert "(all upstreams, estimated in part)" in summary
    assert re.search(r"^(?:segments:)?\s+1\. .*, usage (?:prompt \d+, )?completion [1-9]\d*"
                     r"(?:, total \d+)? \(estimated\); dropped: ", summary, re.M), summary


def test_on_one_terminal_the_note_is_a_line_of_its_own() -> None:
    """stdout and stderr to one place (a terminal, ``2>&1``): the note does not land in the
    middle of a sentence, and what surrounds it is still the reply, once."""
    result = subprocess.run(
        [sys.executable, "-m", "fluxstream", "demo", "--handoff", "--pace", "0", "--format",
         "chat_completions", "--fallback-format", "responses"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, env=ENV,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout
    _, shown, _ = split_output(result.stdout)
    note = NOTE.search(shown)
    assert note is not None, shown
    assert note[1].endswith("/responses")
    before, after = shown[: note.start()], shown[note.end() + 1:]
    offset = int(note[3])
    # The reply's own text up to the offset (there, in mid-line), then the line break that
    # frees the note's line.
    printed = EXPECTED[:offset]
    assert not printed.endswith("\n")
    assert before == printed + "\n"
    assert after == EXPECTED[offset:]


def test_a_cut_tool_call_is_restarted_on_the_fallback_and_said_so() -> None:
    result = run_cli("demo", "--handoff", "--tools", "--pace", "0", "--format",
                     "anthropic_messages")
    assert result.returncode == 0, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("↪ restarted on ") and line.endswith("(the reply starts over)")
    _, text, summary = split_output(result.stdout)
    last = text.rpartition("[restarted]\n")[2]  # what the restarted reply printed
    calls = re.findall(r"^\[tool call (\d+)\] (\w+)\(", last, re.M)
    assert calls == [("0", "get_weather"), ("1", "get_time")]
    assert "stop:           tool_calls" in summary
