"""The APIs, the endpoints and the client import one another one way, at every level.

``tests/test_layers.py`` checks module-level imports; here every import counts (also under
``if TYPE_CHECKING:`` and inside functions) for the modules a request goes through on its way
from the client to an API: the client and the endpoints used to import each other (typing the
client, building one), and so did the stream and its structured output.
"""

from __future__ import annotations

import ast

import pytest
from test_layers import MODULES, PACKAGE, module_name

#: The modules between the client and the registry of APIs.
WATCHED = ("client", "endpoints", "_typed_endpoints", "_io.endpoint", "_io.client_settings",
           "_io.call_options", "_io.request_builder", "_io.base_url", "stream",
           "_io.structured_output", "_io.stream_objects", "apis")


def every_import(module: str) -> set[str]:
    """The package modules ``module`` imports anywhere in its source."""
    path = MODULES[module]
    own = module_name(path)
    parts = [part for part in own.split(".") if part]
    package = parts if path.name == "__init__.py" else parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - (node.level - 1)]
            if node.module:
                found.add(".".join([*base, node.module]))
            else:
                for alias in node.names:
                    candidate = ".".join([*base, alias.name])
                    found.add(candidate if candidate in MODULES else ".".join(base))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fluxstream"):
            found.add((node.module or "").removeprefix("fluxstream").lstrip("."))
    found.discard(own)
    return {name for name in found if name in MODULES}


def watched(module: str) -> bool:
    return any(module == w or module.startswith(w + ".") for w in WATCHED)


def test_the_modules_from_client_to_apis_form_no_circle_at_any_level() -> None:
    graph = {name: {d for d in every_import(name) if watched(d)}
             for name in MODULES if watched(name)}
    done: set[str] = set()
    path: list[str] = []

    def walk(node: str) -> None:
        if node in path:
            cycle = [*path[path.index(node):], node]
            pytest.fail("import circle: " + " -> ".join(cycle))
        if node in done:
            return
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            walk(dep)
        path.pop()
        done.add(node)

    for name in sorted(graph):
        walk(name)
    assert PACKAGE.is_dir()
