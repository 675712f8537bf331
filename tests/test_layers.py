"""The package's imports run one way (docs/architecture.md).

Every module-level import inside ``fluxstream`` must point to a module of the same or a lower
layer, and the module-level import graph must have no cycle. Imports under ``if
TYPE_CHECKING:`` and inside functions are not module-level: the architecture document names
the few call-time imports that point upward and why.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "fluxstream"

#: Layer of each module (a package's own ``__init__`` is named by the package). A module may
#: import, at module level, only modules whose layer is the same or lower.
LAYERS: dict[str, int] = {}
_ORDER: list[tuple[int, list[str]]] = [
    (0, ["errors", "limits", "retry", "_core.coalesce", "partial_json", "wire", "_io.tasks",
         "formats._surrogates", "structured.schema", "structured.shapes", "_core", "_io"]),
    (1, ["sse", "reply"]),
    (2, ["events"]),
    (3, ["formats._base", "formats.chat_completions", "formats.responses",
         "formats.anthropic_messages", "_core.resume_check", "structured.objects"]),
    (4, ["formats.auto", "formats", "assembly", "structured.reply"]),
    (5, ["parser", "structured.track", "structured", "_core.recovery", "_core.progress"]),
    (6, ["_io.http_library", "_io.aiohttp_client", "_io.default_client", "_io.attempt",
         "_io.readahead"]),
    (7, ["_io.channel"]),
    (8, ["_io.reconnect"]),
    (9, ["_io.reader", "_io.structured_output"]),
    (10, ["_io.stream_objects"]),
    (11, ["stream"]),
    (12, ["endpoints"]),
    (13, ["client"]),
    (14, [""]),  # fluxstream/__init__.py
    (15, ["relay"]),  # and every relay.* module
    # and every server.* and cli.* module
    (16, ["server", "cli", "__main__"]),
]
for _layer, _names in _ORDER:
    for _name in _names:
        LAYERS[_name] = _layer


def layer_of(module: str) -> int:
    if module in LAYERS:
        return LAYERS[module]
    top = module.split(".", 1)[0]
    if top in ("relay", "server", "cli"):
        return LAYERS[top]
    raise KeyError(f"fluxstream.{module} has no layer in tests/test_layers.py: give it one")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(path: Path) -> set[str]:
    """The package modules ``path`` imports when it is imported (not lazily, not for typing)."""
    source = path.read_text(encoding="utf-8")
    return imports_in(source, module_name(path), path.name == "__init__.py")


def imports_in(source: str, own: str, is_package: bool) -> set[str]:
    """The package modules that ``source`` (module ``own``) imports at module level."""
    parts = [part for part in own.split(".") if part]
    package = parts if is_package else parts[:-1]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                if not is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:
                    for alias in node.names:
                        candidate = ".".join([*base, alias.name])
                        is_module = (PACKAGE / Path(*candidate.split("."))).with_suffix(".py")
                        is_package = PACKAGE / Path(*candidate.split(".")) / "__init__.py"
                        if candidate and (is_module.exists() or is_package.exists()):
                            found.add(candidate)
                        else:
                            found.add(".".join(base))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fluxstream"):
                found.add((node.module or "").removeprefix("fluxstream").lstrip("."))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("fluxstream"):
                        found.add(alias.name.removeprefix("fluxstream").lstrip("."))

    visit(ast.parse(source).body)
    found.discard(own)
    return found


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: module_level_imports(path) for name, path in MODULES.items()}


@pytest.mark.parametrize("module", sorted(MODULES), ids=lambda m: m or "fluxstream")
def test_a_module_imports_only_its_own_layer_or_lower(module: str) -> None:
    mine = layer_of(module)
    upward = sorted(dep for dep in GRAPH[module] if layer_of(dep) > mine)
    assert upward == [], f"fluxstream.{module} (layer {mine}) imports higher layers: {upward}"


def test_the_module_level_import_graph_has_no_cycle() -> None:
    done: set[str] = set()
    on_path: list[str] = []

    def walk(node: str) -> None:
        if node in on_path:
            cycle = [*on_path[on_path.index(node):], node]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if node in done:
            return
        on_path.append(node)
        for dep in sorted(GRAPH.get(node, ())):
            walk(dep)
        on_path.pop()
        done.add(node)

    for name in sorted(GRAPH):
        walk(name)


def test_the_checker_sees_upward_imports_and_ignores_typing_and_lazy_ones() -> None:
    """The checker must catch what it is for, and only that."""
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
from .errors import FluxstreamError
from . import stream
if TYPE_CHECKING:
    from .client import AsyncClient
try:
    from .relay import MemoryReplyLog
except ImportError:
    pass
def later():
    from .server import serve
"""
    found = imports_in(source, "sse", is_package=False)
    assert found == {"errors", "stream", "relay"}
    assert sorted(dep for dep in found if layer_of(dep) > layer_of("sse")) == ["relay", "stream"]
