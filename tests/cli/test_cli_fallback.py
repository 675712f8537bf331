"""``fluxstream chat --fallback``: the spec checked part by part (argparse errors naming the
part, never repeating a key), and a reply that goes on on a fallback, before content or in
the middle of the reply, in every API the command speaks: the text printed whole and once,
one line on stderr for the handoff, each upstream's part in the summary, the key never shown.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest
from cli_support import ENV, run_cli

from fluxstream.cli import main
from fluxstream.cli.args import FORMATS
from fluxstream.cli.fallback import parse_fallback
from fluxstream.cli.render import Output
from fluxstream.server import ServerThread
from fluxstream.server.script import expected_reply

PROMPT = "hello rivers"
SECRET = "sk-fallback-SECRET-0451"
#: The whole reply the servers' script gives for PROMPT, whichever API asks for it.
EXPECTED = expected_reply(
    {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "stream": True}
).text
HANDOFF_LINE = re.compile(r"^↪ (continued on|trying) (\S+) after (.+?)(?: at offset (\d+))?$")


@pytest.fixture(scope="module")
def fallback_server() -> Iterator[ServerThread]:
    """A fallback that refuses a request without its key: a 200 proves the key was sent."""
    with ServerThread(api_key=SECRET) as server:
        yield server


def reply_text(stdout: str) -> str:
    """What ``chat`` printed of the reply: everything before the summary."""
    text, sep, _ = stdout.partition("\n\noutcome:")
    assert sep, stdout
    return text


# ---------------------------------------------------------------------------- the spec


def test_a_spec_becomes_an_upstream_with_the_key_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FB_KEY", SECRET)
    spec = parse_fallback(
        "http://127.0.0.1:9/v1, api=anthropic_messages,model=claude-x,key-env=FB_KEY,"
        "max-tokens=77,name=backup"
    )
    assert SECRET not in repr(spec)
    up = spec.upstream("chat_completions")
    assert (up.base_url, up.api, up.model, up.max_tokens, up.label, up.api_key) == (
        "http://127.0.0.1:9/v1", "anthropic_messages", "claude-x", 77, "backup", SECRET)
    plain = parse_fallback("https://example.test/v1").upstream("gemini")
    assert (plain.api, plain.api_key, plain.model, plain.max_tokens) == ("gemini", None, None,
                                                                         None)


@pytest.mark.parametrize(("spec", "says"), [
    ("ftp://h/v1", "needs http:// or https:// and a host"),
    ("", "a fallback needs a URL first"),
    ("http://h:99999/v1", "is not a URL"),
    ("http://h/v1,api=nope", "api='nope' is not an API; one of chat_completions"),
    ("http://h/v1,colour=red", "unknown option 'colour'; the options are api, model, max-tokens"),
    ("http://h/v1,max-tokens=0", "max-tokens='0' is not a positive integer"),
    ("http://h/v1,max-tokens=lots", "max-tokens='lots' is not a positive integer"),
    ("http://h/v1,model=", "model= has no value"),
    ("http://h/v1,api=responses,api=gemini", "api= is given twice"),
    ("http://h/v1,key-env=FLUXSTREAM_TEST_UNSET", "key-env='FLUXSTREAM_TEST_UNSET': that"
     " environment variable is not set"),
])
def test_a_bad_spec_is_a_usage_error_naming_the_part(
    spec: str, says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLUXSTREAM_TEST_UNSET", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["chat", "--base-url", "http://127.0.0.1:1/v1", "--fallback", spec, "hi"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --fallback: " in err and says in err, err


@pytest.mark.parametrize("spec", [
    f"http://h/v1,key={SECRET}",
    f"http://h/v1,api-key={SECRET}",
    f"http://user:{SECRET}@h/v1",
    f"http://h/v1,{SECRET}",
    f"http://h/v1,{SECRET}=x",
    f"http://h/v1,api={SECRET}",
    f"http://h/v1,max-tokens={SECRET}",
    f"http://h/v1,key-env={SECRET}",
    f"http://h/v1,key-env=sk{SECRET.upper()}",
    SECRET,
    f"{SECRET}://",
    f"http://h/v1?key={SECRET},api=gemini",
    f"http://h/v1beta?alt=sse&key={SECRET}",
    f"http://h/v1?access_token={SECRET}",
    f"http://h/v1?api_key={SECRET}",
    f"http://h/v1?token={SECRET}",
    f"http://h/v1?Api-Key={SECRET}",
    f"http://h/v1?api-version=2024-06-01&X-Amz-Signature={SECRET}",
    f"http://h/v1?sig={SECRET}",
    f"http://h/v1?{SECRET}_key=x",
])
def test_a_key_on_the_command_line_is_refused_without_repeating_it(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["chat", "--base-url", "http://127.0.0.1:1/v1", "--fallback", spec, "hi"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert "argument --fallback" in err
    assert "secret" not in (out + err).lower()


def test_a_query_without_credentials_is_kept() -> None:
    """Azure's ``api-version``, Gemini's ``alt``: not credentials, so the URL is taken."""
    url = "http://127.0.0.1:9/v1?api-version=2024-06-01&alt=sse"
    assert parse_fallback(f"{url},api=gemini").upstream("chat_completions").base_url == url


# ---------------------------------------------------------------------------- a reply


def run_with_fallback(primary: ServerThread, fallback: ServerThread, fmt: str, *extra: str,
                      fallback_spec: str = "") -> tuple[int, str, str]:
    spec = f"{fallback.base_url},key-env=FB_KEY,name=backup{fallback_spec}"
    result = run_cli("chat", "--format", fmt, "--base-url", primary.base_url, "--api-key", "k",
                     "--fallback", spec, *extra, PROMPT, env={**ENV, "FB_KEY": SECRET})
    assert SECRET not in result.stdout + result.stderr
    return result.returncode, result.stdout, result.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_reply_cut_mid_way_goes_on_on_the_fallback_in_every_format(
    fmt: str, fallback_server: ServerThread
) -> None:
    """The primary drops every connection after a few events: its own resume (Last-Event-ID,
    where the stream has ids) is spent first, then the reply goes on on the fallback, which
    speaks the same API (the spec names none). Printed whole, each character once."""
    before = len(fallback_server.records.requests)
    with ServerThread(faults="drop-after-events=3" if fmt == "chat_completions" else
                      "drop-after-events=12") as primary:
        code, out, err = run_with_fallback(primary, fallback_server, fmt)
        primary_requests = len(primary.records.requests)
    assert code == 0, out + err
    assert reply_text(out) == EXPECTED
    *resumes, line = err.splitlines()
    # The primary's own resumes first, a line each (streams with ids: Last-Event-ID).
    assert all(r.startswith("↻ connection dropped (") for r in resumes), resumes
    assert [r.rpartition("(")[2] for r in resumes] == [f"{i}/5)" for i in
                                                        range(1, len(resumes) + 1)]
    match = HANDOFF_LINE.match(line)
    assert match is not None and match[1] == "continued on" and match[2] == "backup", line
    offset = int(match[4])
    assert 0 < offset < len(EXPECTED)
    assert "outcome:        done" in out
    segments = re.search(r"^segments:\s+1\. (.*)\n\s+2\. (.*)\n", out, re.M)
    assert segments is not None, out
    assert f"characters 0-{offset}, {primary_requests} request" in segments[1]
    assert segments[2].startswith(f"backup (gpt-4o-mini): characters {offset}-{len(EXPECTED)}")
    assert segments[2].endswith("; done")
    sent = fallback_server.records.requests[before:]
    assert len(sent) == 1 and sent[0].path.endswith(
        {"chat_completions": "/chat/completions", "responses": "/responses",
         "anthropic_messages": "/messages", "gemini": ":streamGenerateContent"}[fmt])


def test_before_content_the_next_upstream_answers_across_apis(
    fallback_server: ServerThread,
) -> None:
    """A primary answering 503 (its own attempts spent): the request, translated into the
    fallback's API with its model and length cap, is asked there instead."""
    before = len(fallback_server.records.requests)
    with ServerThread(faults="status=503") as primary:
        code, out, err = run_with_fallback(
            primary, fallback_server, "anthropic_messages",
            fallback_spec=",api=chat_completions,model=other-model,max-tokens=30",
        )
    assert code == 0, out + err
    assert reply_text(out) == EXPECTED
    notes = [line for line in err.splitlines() if line.startswith("↪")]
    assert notes == [f"↪ trying backup after {notes[0].partition(' after ')[2]}"]
    assert "503" in notes[0]
    (sent,) = fallback_server.records.requests[before:]
    assert sent.path == "/v1/chat/completions"
    assert sent.json["model"] == "other-model" and sent.json["max_tokens"] == 30
    assert "backup (other-model): characters 0-" in out


def test_when_every_upstream_fails_the_command_fails_with_one_line() -> None:
    with ServerThread(faults="status=503") as primary, \
            ServerThread(faults="status=500") as fallback:
        result = run_cli("chat", "--base-url", primary.base_url, "--api-key", "k",
                         "--fallback", fallback.base_url, PROMPT)
        asked = [r.path for r in fallback.records.requests]
    assert result.returncode == 1
    assert asked and set(asked) == {"/v1/chat/completions"}
    assert result.stderr.splitlines()[-1].startswith("fluxstream: APIStatusError: HTTP ")
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- the note


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_note_is_dim_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = _Terminal()
    Output(terminal).note("↪ continued on b\x1b]52;c;x\x07 after x")
    assert terminal.getvalue() == "\x1b[2m↪ continued on b\\x1b]52;c;x\\x07 after x\x1b[22m\n"
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Terminal()
    Output(plain).note("↪ note")
    assert plain.getvalue() == "↪ note\n"
    piped = io.StringIO()
    monkeypatch.delenv("NO_COLOR")
    Output(piped).note("↪ note")
    assert piped.getvalue() == "↪ note\n"
