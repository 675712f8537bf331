"""What the CLI prints never carries a secret the user passed in a header."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxstream.cli import EXIT_USAGE, main


@pytest.mark.parametrize(
    "header", ["Authorization Bearer sk-live-SECRET", "sk-live-SECRET", ": sk-live-SECRET"]
)
def test_a_malformed_header_is_refused_without_echoing_it(
    header: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``--header`` with the colon forgotten is most often ``Authorization Bearer <key>``:
    the usage error used to print it whole (to a terminal or a CI log)."""
    code = main(["chat", "--base-url", "http://127.0.0.1:1/v1", "--header", header, "hi"])
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert "--header takes 'Name: value'" in err
    assert "SECRET" not in out + err


@pytest.mark.parametrize("command", ["chat", "capture"])
def test_a_credential_header_a_header_cannot_carry_is_refused_without_echoing_it(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``capture`` built its request directly and skipped the check every credential header
    gets elsewhere: a control character in the key went on to the HTTP library, whose error
    (and DEBUG log) carried the whole value. Both commands refuse it without showing it."""
    args = [command, "--base-url", "http://127.0.0.1:1/v1",
            "--header", "x-api-key: sk-live-SECRET\x01tail", "hi"]
    if command == "capture":
        args[1:1] = ["--output", str(tmp_path / "capture.json")]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == EXIT_USAGE
    assert "x-api-key" in err
    assert "SECRET" not in out + err
