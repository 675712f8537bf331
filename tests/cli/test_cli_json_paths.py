"""``chat --json-paths``: each completed JSON path of a tool call's arguments (or of a reply
asked for with ``response_format``) is a note line of its own, as the CLI says its other
asides, with its value as JSON, escaped, and never inside a line of the reply's text."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from cli_support import ENV, run_cli

from fluxstream.cli.render import PATH_VALUE_CHARS
from fluxstream.server import ServerThread

NOTE = "· "


def _tool_body(properties: dict[str, Any]) -> str:
    write = {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": properties}}}
    return json.dumps({"tools": [write],
                       "tool_choice": {"type": "function", "function": {"name": "write_file"}}})


FILE = {"path": {"type": "string"}, "content": {"type": "string"}}
REPLY_FORMAT = json.dumps({"response_format": {"type": "json_schema", "json_schema": {
    "name": "dish", "schema": {"type": "object", "properties": {
        "name": {"type": "string"}, "servings": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}}}}}})


def _chat_merged(base_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``chat`` with stderr on stdout (``2>&1``): the notes and the reply on one stream, as
    on a terminal, so a note inside a line of text would show."""
    return subprocess.run(
        [sys.executable, "-m", "fluxstream", "chat", "--base-url", base_url, "--api-key", "k",
         "--model", "m", *args, "hi"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, env=ENV,
        stdin=subprocess.DEVNULL,
    )


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= PATH_VALUE_CHARS else text[: PATH_VALUE_CHARS - 1] + "…"


def _notes(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(NOTE)]


def _arguments(output: str) -> dict[str, Any]:
    line = next(line for line in output.splitlines() if line.startswith("[tool call 0] "))
    arguments: dict[str, Any] = json.loads(line.removeprefix("[tool call 0] write_file(")[:-1])
    return arguments


def test_a_forced_tool_call_notes_each_completed_path_once() -> None:
    with ServerThread() as server:
        plain = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                        "--body", _tool_body(FILE), "hi")
        paths = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                        "--body", _tool_body(FILE), "--json-paths", "hi")
    assert plain.returncode == paths.returncode == 0, (plain.stderr, paths.stderr)
    assert NOTE not in plain.stdout + plain.stderr  # not asked for: not said
    arguments = _arguments(paths.stdout)
    assert set(arguments) == {"path", "content"}
    assert _notes(paths.stderr) == [  # in document order; the whole object last
        f"· tool 0 path ('path',) = {_shown(arguments['path'])}",
        f"· tool 0 path ('content',) = {_shown(arguments['content'])}",
        f"· tool 0 path () = {_shown(arguments)}",
    ]
    assert _arguments(plain.stdout) == arguments  # the reply itself is printed as before
    assert NOTE not in paths.stdout


def test_a_structured_reply_notes_its_paths_between_lines_of_its_text() -> None:
    with ServerThread() as server:
        merged = _chat_merged(server.base_url, "--body", REPLY_FORMAT, "--json-paths")
        plain = _chat_merged(server.base_url, "--body", REPLY_FORMAT)
    assert merged.returncode == plain.returncode == 0, (merged.stdout, plain.stdout)
    reply_text = merged.stdout.partition("\n\noutcome:")[0]
    lines = reply_text.splitlines()
    notes = _notes(reply_text)
    # Every note is a line of its own: the other lines, joined, are the reply's text whole.
    assert all(NOTE not in line for line in lines if not line.startswith(NOTE))
    document = json.loads("".join(line for line in lines if not line.startswith(NOTE)))
    assert set(document) == {"name", "servings", "tags"} and document["tags"]
    expected = [f"· reply path ('name',) = {_shown(document['name'])}",
                f"· reply path ('servings',) = {_shown(document['servings'])}",
                *(f"· reply path ('tags', {i}) = {_shown(tag)}"
                  for i, tag in enumerate(document["tags"])),
                f"· reply path ('tags',) = {_shown(document['tags'])}",
                f"· reply path () = {_shown(document)}"]
    assert notes == expected
    assert NOTE not in plain.stdout
    assert json.loads(plain.stdout.partition("\n\noutcome:")[0]) == document


def test_a_long_value_is_cut_and_escape_sequences_are_shown_escaped() -> None:
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31m"
    long = "x" * (3 * PATH_VALUE_CHARS)
    properties = {"path": {"const": hostile}, "content": {"const": long}}
    with ServerThread() as server:
        result = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                         "--body", _tool_body(properties), "--json-paths", "hi")
    assert result.returncode == 0, result.stderr
    for control in ("\x1b", "\x07", "\x9b"):
        assert control not in result.stderr
    notes = _notes(result.stderr)
    assert notes[0] == "· tool 0 path ('path',) = \"\\u001b]0;pwned\\u0007\\u001b[2J\\x9b31m\""
    assert notes[1] == f"· tool 0 path ('content',) = \"{'x' * (PATH_VALUE_CHARS - 2)}…"
    assert len(notes) == 3 and notes[2].endswith("…")


def test_a_hostile_key_is_shown_escaped() -> None:
    properties = {"\x1b[2Jkey": {"type": "string"}}
    with ServerThread() as server:
        result = run_cli("chat", "--base-url", server.base_url, "--api-key", "k", "--model", "m",
                         "--body", _tool_body(properties), "--json-paths", "hi")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stderr
    assert _notes(result.stderr)[0].startswith("· tool 0 path ('\\x1b[2Jkey',) = ")


DISH = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}}
#: Each API's own way to ask for that object: its structured output, or Anthropic's forced tool.
OWN_WAY = {
    "responses": {"text": {"format": {"type": "json_schema", "name": "dish", "schema": DISH}}},
    "gemini": {"generationConfig": {"responseMimeType": "application/json",
                                    "responseJsonSchema": DISH}},
    "anthropic_messages": {"tools": [{"name": "dish", "input_schema": DISH}],
                           "tool_choice": {"type": "tool", "name": "dish"}},
}


@pytest.mark.parametrize("api", sorted(OWN_WAY))
def test_every_api_notes_the_paths_of_the_object_it_was_asked_for(api: str) -> None:
    with ServerThread() as server:
        result = _chat_merged(server.base_url, "--format", api, "--json-paths",
                              "--body", json.dumps(OWN_WAY[api]))
    assert result.returncode == 0, result.stdout
    shown = result.stdout.partition("\n\noutcome:")[0]
    if api == "anthropic_messages":  # the object is the forced tool's input
        whose, document = "tool 0", json.loads(shown.rpartition("[tool call 0] dish(")[2][:-1])
    else:
        whose = "reply"
        document = json.loads("".join(line for line in shown.splitlines()
                                      if not line.startswith(NOTE)))
    assert _notes(shown) == [f"· {whose} path ('name',) = {_shown(document['name'])}",
                             f"· {whose} path ('n',) = {_shown(document['n'])}",
                             f"· {whose} path () = {_shown(document)}"]
