"""Every test the code and the documents cite exists.

Each fast path says which test holds it equal to the general path (``tests/x.py`` or
``tests/x.py::test_y``, in a docstring, a comment, a page under ``docs/`` or a README). A
renamed or removed test would leave the citation behind, and the claim with it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"tests/[\w/]+\.py(?:::\w+)?")


def citing_files() -> list[Path]:
    return [*sorted((ROOT / "fluxstream").rglob("*.py")), ROOT / "README.md",
            *sorted((ROOT / "docs").rglob("*.md")), ROOT / "benchmarks" / "README.md"]


def citations() -> dict[str, list[str]]:
    """Each cited test (or test file) -> the files that cite it."""
    found: dict[str, list[str]] = {}
    for path in citing_files():
        for cited in set(CITATION.findall(path.read_text(encoding="utf-8"))):
            found.setdefault(cited, []).append(path.relative_to(ROOT).as_posix())
    return found


def defined_names(path: Path) -> set[str]:
    """The functions and classes a test file defines, at any depth."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


CITED = citations()


def test_the_fast_paths_are_among_the_citations() -> None:
    """Not vacuous: the differential tests are cited, from the code too."""
    assert "tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path" in CITED
    assert any(f.startswith("fluxstream/") for f in CITED[
        "tests/formats/test_fast_paths.py::test_fast_paths_equal_the_general_path"])


@pytest.mark.parametrize("cited", sorted(CITED))
def test_a_cited_test_exists(cited: str) -> None:
    file, _, name = cited.partition("::")
    path = ROOT / file
    assert path.is_file(), f"{cited} (cited by {CITED[cited]}) is not a file"
    if name:
        assert name in defined_names(path), f"{cited} (cited by {CITED[cited]}) is not defined"
