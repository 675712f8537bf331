"""``fluxstream replay`` reads a recorded stream in the format it is in, and says when the
format asked for does not fit the frames."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_support import run_cli
from fixture_files import chat_expected, chat_stream

#: A recorded stream of each format whose choice 0 has text and ended ``done``.
STREAMS = {
    "chat_completions": "cc-openai-py-basic-text",
    "responses": "resp-vercel-lmstudio-args-only-in-done",
    "anthropic_messages": "anth-sdk-py-tool-use",
}
NAMES = {"chat_completions": "Chat Completions", "responses": "Responses",
         "anthropic_messages": "Anthropic Messages"}


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_replay_without_format_reads_any_format(fmt: str) -> None:
    name = STREAMS[fmt]
    expected = chat_expected(name)
    result = run_cli("replay", str(chat_stream(name)), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    reply = json.loads(result.stdout)
    assert reply["outcome"] == expected["ended"] == "done"
    assert reply["choices"][0]["text"] == expected["choices"]["0"]["text"]
    assert result.stderr == ""  # the right format: nothing to hint


@pytest.mark.parametrize(
    ("fmt", "asked"),
    [("responses", "chat_completions"), ("anthropic_messages", "chat_completions"),
     ("chat_completions", "responses"), ("anthropic_messages", "responses")],
)
def test_replay_in_the_wrong_format_names_the_one_that_fits(fmt: str, asked: str) -> None:
    name = STREAMS[fmt]
    result = run_cli("replay", str(chat_stream(name)), "--format", asked)
    assert result.returncode != 0  # nothing was read: not a clean end
    (hint,) = result.stderr.strip().splitlines()
    assert hint.startswith("fluxstream: most frames were skipped")
    match = re.search(rf"(\d+) of (\d+) events are {NAMES[fmt]} events; try --format {fmt}$",
                      hint)
    assert match, hint
    fitting, total = int(match[1]), int(match[2])
    assert total > 0 and fitting > total // 2
    # The summary counts the frames that were not read, whatever the format did with them.
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("bytes/events:"))
    events = int(line.split("/ ")[1].split()[0])
    foreign = int(line.split("of another format ")[1].rstrip(")"))
    assert events == total and foreign >= fitting


def test_a_capture_without_a_recorded_format_is_detected(tmp_path: Path) -> None:
    """A capture file that does not say its format (hand-written, or from an older version)
    is read by detection too, read by read."""
    import base64

    body = chat_stream(STREAMS["anthropic_messages"]).read_bytes()
    reads = [body[i:i + 50] for i in range(0, len(body), 50)]
    path = tmp_path / "capture.json"
    path.write_text(json.dumps({
        "format": "fluxstream-capture/1", "status": 200, "content_type": "text/event-stream",
        "reads": [{"t": 0.0, "b64": base64.b64encode(r).decode()} for r in reads],
    }))
    result = run_cli("replay", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    text = chat_expected(STREAMS["anthropic_messages"])["choices"]["0"]["text"]
    assert text in result.stdout and result.stderr == ""


def test_the_format_census_refuses_a_frame_of_tiny_objects_undecoded() -> None:
    """The census that names the fitting format decoded every frame whole with
    ``json.loads``: a 4 MB frame of empty objects cost ~25x its size, where the replay
    itself refuses it before decoding. It now reads frames as the formats do."""
    import tracemalloc

    from fluxstream.cli.capture import Capture, format_census

    flood = b"data: [" + b"{}," * 1_400_000 + b"{}]\n\n"
    chunk = b'data: {"id":"c","object":"chat.completion.chunk","choices":[]}\n\n'
    capture = Capture(reads=[chunk, flood], status=200, content_type="text/event-stream")
    tracemalloc.start()
    try:
        census = format_census(capture)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert census.events == 2 and census.counts == {"chat_completions": 1}
    assert peak < 8 * len(flood), peak  # the decoded list cost ~25x; the body and its frame ~4x
