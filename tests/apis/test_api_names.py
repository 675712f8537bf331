"""No API is told apart by its name outside ``fluxstream/apis/``.

What differs between APIs is a member of its :class:`~fluxstream.apis.Api`; a module that
compares a name instead (``api.name == "chat_completions"``) gives every API it did not think
of the other branch's behaviour, silently. The rule this test enforces, over every module of
the package outside ``fluxstream/apis/`` (the embedded server and the CLI included): no
comparison (``==``, ``!=``, ``in``, ``not in``, ``is``, ``is not``) and no ``match`` case has a
registered API's name as a string literal on either side, alone or inside a tuple, list or set
literal. Names used as data are not comparisons and stay allowed: a table keyed by name (the
server's dialects, ``formats.FORMATS``), a default argument, an argument
(``apis.get("gemini")``), a format's ``name = "..."`` declaration.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fluxstream import apis

PACKAGE = Path(__file__).resolve().parents[2] / "fluxstream"
NAMES = frozenset(apis.names())


def _names_in(node: ast.expr) -> list[str]:
    """The API names ``node`` is, or holds as a literal collection's element."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [name for element in node.elts for name in _names_in(element)]
    return []


def _case_names(pattern: ast.pattern) -> list[str]:
    if isinstance(pattern, ast.MatchValue):
        return _names_in(pattern.value)
    if isinstance(pattern, ast.MatchOr):
        return [name for option in pattern.patterns for name in _case_names(option)]
    return []


def name_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every comparison of ``source`` against an API name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(node.lineno, name) for name in _names_in(operand)]
        elif isinstance(node, ast.match_case):
            found += [(node.pattern.lineno, name) for name in _case_names(node.pattern)]
    return found


def outside_apis() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if (PACKAGE / "apis") not in p.parents)


def test_no_module_outside_apis_compares_an_api_name() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name!r}"
        for path in outside_apis()
        for line, name in name_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "ask the Api instead of comparing its name:\n" + "\n".join(found)


def test_the_package_outside_apis_is_searched_server_and_cli_included() -> None:
    searched = {path.relative_to(PACKAGE).parts[0] for path in outside_apis()}
    assert {"server", "cli", "_io", "_core", "formats", "relay"} <= searched
    assert "apis" not in searched


@pytest.mark.parametrize("source", [
    'if api.name == "chat_completions": pass',
    'ok = "responses" != target.name',
    'ok = name in ("responses", "gemini")',
    'ok = name not in ["anthropic_messages"]',
    'ok = name in {"gemini"}',
    'ok = x is "gemini"',
    'match name:\n    case "chat_completions": pass',
    'match name:\n    case "x" | "responses": pass',
])
def test_the_search_finds_every_way_of_comparing_a_name(source: str) -> None:
    assert name_comparisons(source) != []


@pytest.mark.parametrize("source", [
    'DIALECTS = {"chat_completions": 1}',
    'def f(api: str = "gemini") -> None: pass',
    'api = apis.get("anthropic_messages")',
    'name = "responses"',
    'ok = api is CHAT_COMPLETIONS',
    'ok = name == "chat"',  # an alias, not a registered name
])
def test_names_used_as_data_are_not_comparisons(source: str) -> None:
    assert name_comparisons(source) == []
