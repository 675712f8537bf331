"""No module or class of the package is bigger than ``docs/architecture.md`` says.

The limits and the modules and classes allowed over them, each with its reason, are read from
the document's *Size limits* section (between its ``size-limits`` markers), so the document
cannot drift from the code: a module or class that grows past its limit without a row fails,
and so does a row whose module or class fits again (the row goes), or names nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fluxstream"
DOC = ROOT / "docs" / "architecture.md"


def size_section(text: str) -> str:
    match = re.search(r"<!-- size-limits:[^>]*-->(.*?)<!-- end size-limits -->", text, re.S)
    assert match, "docs/architecture.md has lost its size-limits section (see tests/test_sizes.py)"
    return match.group(1)


def limits(section: str) -> dict[str, int]:
    """``{"module": 700, "class": 450}``, from the lines ``* module: at most **700** lines``."""
    found = dict(re.findall(r"^\* (module|class): at most \*\*(\d+)\*\* lines$", section, re.M))
    assert set(found) == {"module", "class"}, found
    return {kind: int(value) for kind, value in found.items()}


def exceptions(section: str) -> dict[str, str]:
    """The table's rows: ``fluxstream/x.py`` or ``fluxstream/x.py::Class`` -> the reason."""
    rows = re.findall(r"^\| `([^`]+)` \| (.*?) \|$", section, re.M)
    named = dict(rows)
    assert len(named) == len(rows), "a module or class is named twice"
    return named


def measured() -> dict[str, tuple[str, int]]:
    """Every module and class of the package (nested ones too): name -> (kind, lines)."""
    sizes: dict[str, tuple[str, int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        module = path.relative_to(ROOT).as_posix()
        sizes[module] = ("module", len(source.splitlines()))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                sizes[f"{module}::{node.name}"] = ("class", node.end_lineno - first + 1)
    return sizes


SECTION = size_section(DOC.read_text(encoding="utf-8"))
LIMITS = limits(SECTION)
EXCEPTIONS = exceptions(SECTION)
SIZES = measured()


def test_nothing_is_over_its_limit_unless_the_document_says_why() -> None:
    over = {name: lines for name, (kind, lines) in SIZES.items() if lines > LIMITS[kind]}
    unnamed = {name: lines for name, lines in over.items() if name not in EXCEPTIONS}
    assert not unnamed, (
        f"over the limits of docs/architecture.md ({LIMITS}): {unnamed}; split it, or add a "
        "row to the table of its *Size limits* section with the reason")


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_every_exception_is_still_over_its_limit_and_says_why(name: str) -> None:
    assert name in SIZES, f"{name} (docs/architecture.md, Size limits) names nothing"
    kind, lines = SIZES[name]
    assert lines > LIMITS[kind], (
        f"{name} is {lines} lines, within the {kind} limit of {LIMITS[kind]}: delete its row "
        "in docs/architecture.md")
    assert len(EXCEPTIONS[name].strip()) > 10, f"{name}: the row must say why"


def test_the_reader_reads_what_the_document_writes() -> None:
    """The parsing itself: limits, rows, a class and a module, a missing section."""
    section = size_section(
        "x\n<!-- size-limits: read -->\n* module: at most **7** lines\n"
        "* class: at most **4** lines\n\n| over the limit | why |\n|---|---|\n"
        "| `fluxstream/a.py` | to be split |\n| `fluxstream/a.py::B` | one loop |\n"
        "<!-- end size-limits -->\n")
    assert limits(section) == {"module": 7, "class": 4}
    assert exceptions(section) == {"fluxstream/a.py": "to be split",
                                   "fluxstream/a.py::B": "one loop"}
    with pytest.raises(AssertionError):
        size_section("no section here")
    assert SIZES["fluxstream/sse.py::SSEDecoder"][0] == "class"
    assert SIZES["fluxstream/sse.py"][0] == "module"
