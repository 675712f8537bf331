"""The ``fluxstream`` command line, run as a user would: a subprocess, real sockets on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_support import start_cli
from fixture_files import chat_expected, chat_stream
from waiting import WITHIN

from fluxstream.server import ServerThread
from fluxstream.server.script import expected_reply

DEMO_PROMPT = "Tell me how fluxstream streams a reply, token by token."
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluxstream", *args],
        capture_output=True, text=True, timeout=timeout, env=ENV, stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def server() -> Iterator[Any]:
    with ServerThread(port=0) as srv:
        yield srv


def test_demo_streams_live_and_reports_the_outcome() -> None:
    result = run_cli("demo", "hello rivers")
    assert result.returncode == 0, result.stderr
    body = {"model": "flux-demo", "messages": [{"role": "user", "content": "hello rivers"}],
            "stream": True, "stream_options": {"include_usage": True}}
    assert expected_reply(body).text in result.stdout
    for label in ("outcome:        done", "stop:           stop (choice 0)", "usage:",
                  "first token:", "tokens/s:"):
        assert label in result.stdout
    assert result.stderr == ""


SURVIVED = re.compile(
    r"^survived:\s+(\d+) heartbeats?, (\d+) reads? \((\d+) ending mid-event\), (.*)$", re.M
)


def test_demo_says_on_one_line_what_the_stream_survived() -> None:
    """By default the demo's server sends heartbeats, writes in small pieces and drops the
    connection once mid-answer; the reply is still exact and one line says what happened."""
    result = run_cli("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    body = {"model": "flux-demo", "messages": [{"role": "user", "content": DEMO_PROMPT}],
            "stream": True, "stream_options": {"include_usage": True}}
    assert expected_reply(body).text in result.stdout
    assert "outcome:        done" in result.stdout
    (line,) = SURVIVED.findall(result.stdout)
    heartbeats, reads, split, drops = int(line[0]), int(line[1]), int(line[2]), line[3]
    # 24-byte writes, 1 ms apart: even on a loaded machine many reads end inside an event
    assert heartbeats >= 10 and reads >= split >= 10
    assert drops == "1 dropped connection, resumed by last_event_id"
    assert result.stderr == ""  # the resume is told in the summary, not as a log line

    calm = run_cli("demo", "--pace", "0", "--no-faults")
    assert calm.returncode == 0, calm.stdout + calm.stderr
    (line,) = SURVIVED.findall(calm.stdout)
    assert line[0] == "0" and line[3] == "no dropped connection"
    assert expected_reply(body).text in calm.stdout


def test_demo_reads_like_an_answer() -> None:
    """The default reply is a short natural answer, not the prompt echoed between tokens."""
    result = run_cli("demo", "--pace", "0", "--no-faults")
    assert result.returncode == 0, result.stderr
    answer = result.stdout.split("\n\n", 1)[1].split("\n\noutcome:", 1)[0]
    assert answer.startswith("Hello") and answer.endswith(" in order.")
    assert "Tell me" not in answer and "Echo" not in answer
    for needle in ("你好", "👋🏽", "é"):
        assert needle in answer


def test_demo_with_a_quirk_profile_and_tools() -> None:
    result = run_cli("demo", "--profile", "azure,heartbeats", "--tools", "weather")
    assert result.returncode == 0, result.stderr
    assert "[tool call 0] get_weather(" in result.stdout
    assert "[tool call 1] get_time(" in result.stdout
    assert "stop:           tool_calls (choice 0)" in result.stdout
    assert "heartbeats 0" not in result.stdout


def test_demo_reports_a_truncation_with_its_exit_code() -> None:
    result = run_cli("demo", "--fault", "drop-after=400")
    assert result.returncode == 3, result.stdout + result.stderr
    assert "outcome:        truncated" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_chat_against_an_endpoint_and_http_errors_are_one_line(server: Any) -> None:
    result = run_cli("chat", "--base-url", server.base_url, "--model", "m", "tell me about rain")
    assert result.returncode == 0, result.stderr
    body = {"model": "m", "messages": [{"role": "user", "content": "tell me about rain"}],
            "stream": True, "stream_options": {"include_usage": True}}
    assert expected_reply(body).text in result.stdout

    with ServerThread(port=0, api_key="the-right-key") as locked:
        result = run_cli("chat", "--base-url", locked.base_url, "--api-key", "sk-WRONG-123", "hi")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "AuthenticationError" in lines[0] and "401" in lines[0]
    assert "sk-WRONG-123" not in result.stderr + result.stdout


def test_ctrl_c_cancels_cleanly_and_prints_the_outcome(server: Any) -> None:
    proc = start_cli("chat", "--base-url", server.base_url,
                     "--header", "X-Fluxstream-Fault: stall=30,stall-after-events=3", "hi")
    try:
        deadline = time.monotonic() + 60
        while not server.records.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 4, out + err
    assert "outcome:        cancelled" in out
    assert "Traceback" not in out + err
    record = server.records.wait_disconnect_sync(timeout=WITHIN)
    assert record.completed is False


def test_serve_answers_other_clients() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = start_cli("serve", "--port", str(port))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"127.0.0.1:{port}" in line
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert models["data"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)


def test_capture_then_replay_gives_the_same_reply(server: Any, tmp_path: Path) -> None:
    out = tmp_path / "capture.json"
    result = run_cli("capture", "--base-url", server.base_url, "--model", "m", "-o", str(out),
                     "capture this")
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["format"] == "fluxstream-capture/1" and record["reads"]
    assert all({"t", "b64"} <= set(r) for r in record["reads"])

    result = run_cli("replay", str(out), "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    body = {"model": "m", "messages": [{"role": "user", "content": "capture this"}],
            "stream": True, "stream_options": {"include_usage": True}}
    assert reply["choices"][0]["text"] == expected_reply(body).text
    assert reply["outcome"] == "done"


@pytest.mark.parametrize(
    ("name", "code", "outcome"),
    [("cc-openai-py-basic-text", 0, "done"), ("cc-syn-finish-no-done", 0, "finished"),
     ("cc-syn-cut-mid-json", 3, "truncated"), ("cc-syn-vllm-error-object", 1, "failed")],
)
def test_replay_a_plain_sse_body(name: str, code: int, outcome: str) -> None:
    expected = chat_expected(name)
    result = run_cli("replay", str(chat_stream(name)), "--read-size", "7")
    assert result.returncode == code, result.stdout + result.stderr
    assert f"outcome:        {outcome}" in result.stdout
    text = expected["choices"].get("0", {}).get("text")
    if text:
        assert text in result.stdout


def test_capture_from_a_dead_endpoint_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_cli("capture", "--base-url", f"http://127.0.0.1:{port}/v1", "-o",
                     str(tmp_path / "c.json"), "hi")
    assert result.returncode in (1, 2)
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_bad_usage_is_one_line_with_exit_code_2(tmp_path: Path) -> None:
    result = run_cli("replay", str(tmp_path / "missing.sse"))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    result = run_cli("demo", "--fault", "no-such-fault=1")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "400" in result.stderr


# ---------------------------------------------------------------------------- capture and replay


def _capture(tmp_path: Path, base_url: str, *args: str) -> tuple[Any, dict[str, Any]]:
    out = tmp_path / "capture.json"
    result = run_cli("capture", "--base-url", base_url, "--model", "m", "-o", str(out), *args)
    return result, json.loads(out.read_text()) if out.exists() else {}


def _body_of(record: dict[str, Any]) -> bytes:
    return b"".join(base64.b64decode(r["b64"]) for r in record["reads"])


def test_capture_keeps_every_read_and_the_error_when_the_connection_breaks(
    tmp_path: Path,
) -> None:
    with ServerThread(port=0, faults="drop-after=700") as srv:
        result, record = _capture(tmp_path, srv.base_url, "break this")
    assert result.returncode == 3, result.stdout + result.stderr  # the reply was cut
    assert record, "nothing was written"
    assert record["status"] == 200 and len(_body_of(record)) == 700
    assert record["error"]["type"] == "RemoteProtocolError" and record["error"]["message"]
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr

    replayed = run_cli("replay", str(tmp_path / "capture.json"))
    assert replayed.returncode == 3, replayed.stdout + replayed.stderr
    assert "outcome:        truncated" in replayed.stdout
    assert "RemoteProtocolError" in replayed.stdout  # what broke the recorded connection
    body = {"model": "m", "messages": [{"role": "user", "content": "break this"}],
            "stream": True, "stream_options": {"include_usage": True}}
    text = replayed.stdout.split("[text 0] ", 1)[1].split("\n", 1)[0]
    assert text and expected_reply(body).text.startswith(text)


def test_replay_of_a_non_2xx_capture_is_the_typed_error(server: Any, tmp_path: Path) -> None:
    result, record = _capture(
        tmp_path, server.base_url, "--header", "X-Fluxstream-Fault: status=429,retry-after=7", "hi"
    )
    assert result.returncode == 1 and record["status"] == 429
    replayed = run_cli("replay", str(tmp_path / "capture.json"))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    (line,) = replayed.stderr.strip().splitlines()
    assert line.startswith("fluxstream: RateLimitError: HTTP 429")

    hand = tmp_path / "bad-request.json"
    error = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}
    hand.write_text(json.dumps({
        "format": "fluxstream-capture/1", "status": 400, "content_type": "application/json",
        "reads": [{"t": 0.0, "b64": base64.b64encode(json.dumps(error).encode()).decode()}],
    }))
    replayed = run_cli("replay", str(hand))
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert replayed.stderr.strip() == (
        "fluxstream: APIStatusError: HTTP 400: max_tokens is too large"
    )


def test_replay_of_a_json_capture_is_the_reply_it_was(server: Any, tmp_path: Path) -> None:
    result, record = _capture(tmp_path, server.base_url, "-p", "stream=false", "whole")
    assert result.returncode == 0, result.stderr
    assert record["content_type"].startswith("application/json")
    replayed = run_cli("replay", str(tmp_path / "capture.json"), "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    reply = json.loads(replayed.stdout)
    body = {"model": "m", "messages": [{"role": "user", "content": "whole"}], "stream": False}
    assert reply["choices"][0]["text"] == expected_reply(body).text
    assert reply["outcome"] == "done" and reply["usage"]["completion_tokens"] == 30


def test_chat_and_capture_send_any_request_field(server: Any, tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    flags = ["--max-tokens", "5", "-p", "n=2", "-p", "user=ann=1", "-p", "temperature=0.5",
             "--body", json.dumps({"tools": tools, "seed": 7, "n": 9}), "--no-usage"]
    result = run_cli("chat", "--base-url", server.base_url, "--model", "m", *flags, "fields")
    assert result.returncode == 0, result.stdout + result.stderr
    sent = server.records.requests[-1].json
    assert sent == {"model": "m", "messages": [{"role": "user", "content": "fields"}],
                    "tools": tools, "seed": 7, "n": 2, "user": "ann=1", "temperature": 0.5,
                    "max_tokens": 5, "stream": True}
    expected = expected_reply(sent)
    assert len(expected.choices) == 2 and expected.usage is None
    for choice in expected.choices:
        for call in choice.tool_calls:
            assert f"[tool call {call.index}] {call.name}({call.arguments})" in result.stdout
    assert "usage:" not in result.stdout

    capture, record = _capture(tmp_path, server.base_url, *flags, "fields")
    assert capture.returncode == 0, capture.stderr
    assert record["request"]["body"] == server.records.requests[-1].json == sent


def test_request_field_flags_reject_bad_input(server: Any) -> None:
    for bad in (["--body", "[1, 2]"], ["--body", "{nope"], ["-p", "novalue"], ["-p", "=1"],
                ["-p", "tools=5"], ["--max-tokens", "0"]):
        result = run_cli("chat", "--base-url", server.base_url, *bad, "hi")
        assert result.returncode == 2, (bad, result.stdout + result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


# ---------------------------------------------------------------------------- --format


@pytest.mark.parametrize(
    ("fmt", "finish", "resumed_by"),
    [("responses", 'stop (choice 0, finish reason "completed")', "last_event_id"),
     ("anthropic_messages", 'stop (choice 0, finish reason "end_turn")', "continuation")],
)
def test_demo_speaks_each_format_and_survives_the_drop(
    fmt: str, finish: str, resumed_by: str
) -> None:
    """``demo --format``: the same exact answer over Responses and Anthropic Messages, with
    the demo's heartbeats, small writes and one dropped connection, resumed (Anthropic by
    prefill continuation)."""
    result = run_cli("demo", "--format", fmt, "--pace", "0", "hello rivers")
    assert result.returncode == 0, result.stdout + result.stderr
    body = {"model": "flux-demo", "messages": [{"role": "user", "content": "hello rivers"}]}
    assert expected_reply(body).text in result.stdout
    assert f"stop:           {finish}" in result.stdout
    usage = expected_reply({**body, "stream": False}).usage
    assert usage is not None
    assert (f"usage:          prompt {usage['prompt_tokens']}, completion 30, total"
            f" {usage['prompt_tokens'] + 30}") in result.stdout
    (line,) = SURVIVED.findall(result.stdout)
    assert int(line[0]) >= 10  # comments (Responses) / ping events (Anthropic) counted
    assert line[3] == f"1 dropped connection, resumed by {resumed_by}"
    assert result.stderr == ""


@pytest.mark.parametrize("fmt", ["responses", "anthropic_messages"])
def test_demo_tools_in_each_format(fmt: str) -> None:
    result = run_cli("demo", "--format", fmt, "--pace", "0", "--tools")
    assert result.returncode == 0, result.stdout + result.stderr
    assert '[tool call 0] get_weather({"city":"Zürich","unit":"celsius"})' in result.stdout
    assert "get_time(" in result.stdout and "outcome:        done" in result.stdout


def test_demo_rejects_an_unknown_format() -> None:
    result = run_cli("demo", "--format", "soap")
    assert result.returncode == 2 and "invalid choice: 'soap'" in result.stderr


@pytest.mark.parametrize(
    ("fmt", "path", "finish"),
    # 12 tokens cut the 30-token answer: each API says so in its own words.
    [("responses", "/v1/responses", "incomplete"), ("anthropic_messages", "/v1/messages",
                                                   "max_tokens")],
)
def test_chat_capture_and_replay_take_the_format(
    fmt: str, path: str, finish: str, tmp_path: Path
) -> None:
    with ServerThread(port=0, api_key="sk-cli-format") as srv:
        args = ("--base-url", srv.base_url, "--api-key", "sk-cli-format", "--format", fmt,
                "--model", "m", "--max-tokens", "12")
        chat = run_cli("chat", *args, "tell me about rain")
        out = tmp_path / "capture.json"
        capture = run_cli("capture", *args, "-o", str(out), "tell me about rain")
        requests = list(srv.records.requests)
    assert chat.returncode == 0, chat.stdout + chat.stderr
    assert capture.returncode == 0, capture.stdout + capture.stderr
    assert [r.path for r in requests] == [path, path]
    if fmt == "anthropic_messages":  # Anthropic's key header, not a Bearer token
        assert requests[0].header("x-api-key") == "<redacted>"
        assert requests[0].header("authorization") is None
    limit = "max_output_tokens" if fmt == "responses" else "max_tokens"
    assert requests[0].json[limit] == 12 and requests[1].json[limit] == 12
    text = "".join(expected_reply(
        {"model": "m", "messages": [{"role": "user", "content": "tell me about rain"}],
         "max_tokens": 12}).text)
    assert text in chat.stdout
    record = json.loads(out.read_text())
    assert record["wire_format"] == fmt and record["request"]["path"] == path.removeprefix("/v1/")
    replayed = run_cli("replay", str(out), "--json")  # the recorded format is used
    assert replayed.returncode == 0, replayed.stderr
    reply = json.loads(replayed.stdout)
    assert reply["choices"][0]["text"] == text and reply["choices"][0]["finish_reason"] == finish
    as_auto = run_cli("replay", str(out), "--format", "auto")
    assert as_auto.returncode == 0 and text in as_auto.stdout
    wrong = run_cli("replay", str(out), "--format", "chat_completions", "--json")
    assert json.loads(wrong.stdout)["choices"] == [] or text not in wrong.stdout
