"""Wherever the APIs fluxstream speaks are listed, all four are named: the package's
description, its docstring and the command line's help (a user deciding whether it fits their
Gemini app reads these first)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import fluxstream
from fluxstream.cli.args import build_parser

ROOT = Path(__file__).resolve().parents[2]
APIS = ("Chat Completions", "Responses", "Anthropic Messages", "Gemini")


def _names_every_api(text: str) -> None:
    flat = " ".join(text.split())
    for api in APIS:
        assert api in flat, f"{api!r} is not named in {flat!r}"


def test_the_package_description_names_every_api() -> None:
    found = re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert found is not None
    _names_every_api(found.group(1))


def test_the_package_docstring_names_every_api() -> None:
    assert fluxstream.__doc__ is not None
    _names_every_api(fluxstream.__doc__.split("\n\n")[0])


@pytest.mark.parametrize("command", [None, "chat", "serve"])
def test_the_help_names_every_api(command: str | None) -> None:
    parser = build_parser()
    if command is None:
        _names_every_api(parser.format_help())
        return
    sub = next(a for a in parser._actions if a.dest == "command")
    lines = {a.dest: a.help for a in sub._get_subactions()}
    help_line = lines[command]
    assert help_line is not None
    _names_every_api(help_line)
    if command == "serve":
        assert ":streamGenerateContent" in help_line  # the Gemini route is listed with the others
