"""``fluxstream replay`` of a capture labelled with a version it cannot read names that
version, instead of reading the JSON as a raw ``.sse`` body (``truncated``, 0 events, and not
a word about why)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cli_support import run_cli

from fluxstream.cli.capture import CAPTURE_FORMAT, load_capture

BODY = (b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"},'
        b'"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')


def _capture(tmp_path: Path, label: object) -> Path:
    path = tmp_path / "reply.json"
    record = {"format": label, "status": 200, "content_type": "text/event-stream",
              "reads": [{"t": 0.0, "b64": base64.b64encode(BODY).decode()}]}
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("label", ["fluxstream-capture/2", "fluxstream-capture/0",
                                   "fluxstream-capture/1.1", "fluxstream-capture"])
def test_a_capture_of_another_version_is_refused_by_its_version(
    tmp_path: Path, label: str
) -> None:
    path = _capture(tmp_path, label)
    result = run_cli("replay", str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "\n" not in line
    assert repr(label) in line and CAPTURE_FORMAT in line and str(path) in line
    with pytest.raises(ValueError, match="cannot read"):
        load_capture(path)


def test_the_version_it_reads_is_replayed(tmp_path: Path) -> None:
    result = run_cli("replay", str(_capture(tmp_path, CAPTURE_FORMAT)))
    assert result.returncode == 0, result.stderr
    assert "[text 0] hi" in result.stdout


def test_json_that_is_no_capture_is_still_read_as_a_body(tmp_path: Path) -> None:
    """A JSON object without a capture label (a whole non-streamed reply saved to a file) is
    what it was before: a body."""
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something-else", "reads": []}))
    assert load_capture(path).reads == [path.read_bytes()]
