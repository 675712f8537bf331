"""The package's imports run one way (docs/architecture.md).

Every module-level import inside ``fluxstream`` must point to a module of the same or a lower
layer, and the module-level import graph must have no cycle. Imports under ``if
TYPE_CHECKING:`` and inside functions count too: with them, no import of any kind points
upward and the graph of every import has no cycle, except the few call-time imports named in
:data:`DELIBERATE_UPWARD` with the reason each exists. Importing ``a.b`` also runs ``a``'s
``__init__``, so an import of a subpackage's module from outside it counts as an import of
that package too.
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
    # reply imports only these (the errors it raises, when one is raised: DELIBERATE_UPWARD)
    (0, ["_timeouts", "_limits", "_retry", "_core.coalesce", "_partial_json", "_wire", "_io.tasks",
         "formats._surrogates", "_core", "_io", "_core.base_errors", "_core.object_shapes",
         "_core.type_names", "_core.partial_objects", "_core.sse_event", "_core.sse_runs",
         "_core.deprecation", "_core.moved_modules", "_core.extras", "_reply",
         "_core.rate_limits"]),  # a response's headers read: imports nothing
    # errors names the reply (StreamError.reply) and re-exports the root errors of _core
    (1, ["errors", "sse", "structured.schema", "structured.shapes"]),
    # _core.headers: which header names are credentials, headers checked without showing them;
    # _core.token_signature: the HMAC of resume tokens (raises ResumeTokenError)
    # _core.secret: a masked secret, and token_secret read into a TokenSigner
    (2, ["_events", "_usage", "_core.headers", "_core.token_signature", "_core.secret"]),
    # what the formats share: _base (FormatBase, the helpers), _event_makers, _usage_fields,
    # _choice_state and _json_event (the base of the event-typed formats)
    (3, ["formats._contract", "formats._event_makers", "formats._usage_fields",
         "formats._choice_state", "formats._base", "formats._json_event",
         "formats._responses_items", "formats._responses_parts", "formats._responses_calls",
         "formats.chat_completions", "formats.responses", "formats.anthropic_messages",
         "formats._gemini_args", "formats._gemini_quick", "formats._gemini_candidates",
         "formats._gemini_raw", "formats._gemini_usage", "formats.gemini",
         "structured.objects",
         "_json_paths"]),  # path events of streamed JSON: the events and the partial parser
    # _core.resume_check and _core.resume_token import formats._base, which runs the formats
    # package's __init__
    # _core.echo (a continuation's echo cut), _core.error_hold (an error event held back for
    # failover) and _core.carried (the counts of replaced decoders and formats): the parser's
    # hooks and bookkeeping, below it
    (4, ["formats.auto", "formats", "_assembly", "structured.reply", "_core.resume_check",
         "_core.resume_token", "_core.reread", "_core.echo", "_core.error_hold",
         "_core.carried", "_core.stream_position",
         "_core.stream_moves",  # a parser's moves between connections and upstreams
         "_core.length_budget",  # what is left of a length cap: reads the reply, its usage
         "_core.think_tags"]),  # reasoning in tags split out of text deltas: reads events
    (5, ["_parser", "structured.track", "structured", "_core.recovery", "_core.progress",
         # and every apis.* module (one per provider API)
         "_observe", "apis", "_core.failover", "_upstream"]),
    # _core.genai_attributes: what the OpenTelemetry conventions read of a request and reply
    # _io.transport: the seam an HTTP client is used through; _io.aiohttp_private: every use
    # of aiohttp's internals, checked on import; _io.aiohttp_errors: its exceptions as httpx's;
    # _io.client_timeouts, _io.base_url, _io.request_builder, _io.call_options: how a client's
    # deadlines, URLs and requests are made, and a call's options as one value (plain values
    # and builders, below everything that makes a stream)
    (6, ["_core.observers", "_core.genai_attributes", "_io.http_library", "_io.transport",
         "_io.aiohttp_private", "_io.aiohttp_errors", "_io.aiohttp_client",
         "_io.default_client", "_io.attempt", "_io.readahead",
         "_io.client_timeouts", "_io.base_url", "_io.request_builder", "_io.call_options"]),
    (7, ["_io.channel"]),
    # _io.hedge_reading -> _io.hedge_racers -> _io.hedge_timer -> _io.hedge: a racer read until
    # content, how each racer ends, the race on asyncio, the entry (and the race on trio)
    (8, ["_io.reconnect", "_io.failover", "_io.hedge_reading", "_io.hedge_racers",
         "_io.hedge_timer", "_io.hedge", "_io.stream_end"]),
    (9, ["_io.reader", "_io.structured_output"]),
    (10, ["_io.stream_objects"]),
    (11, ["_stream"]),
    # _io.client_settings: the client's settings as one value, which the endpoint reads (the
    # endpoint imports it, never the client)
    (12, ["_io.client_settings", "_io.endpoint"]),
    # the typed signatures sit under the client, which makes them over its generic endpoints:
    # they are handed those endpoints, never the client
    (13, ["_typed_endpoints"]),
    # endpoints builds a client (anthropic_client), so it imports the client, never the reverse
    (14, ["_client", "_endpoints"]),
    (15, [""]),  # fluxstream/__init__.py
    (16, ["relay", "otel"]),  # and every relay.* module; otel: the OpenTelemetry observer
    # and every server.* and cli.* module; web: a reply streamed to a browser (stream, relay)
    (17, ["server", "cli", "__main__", "web"]),
    # and every testing.* module: the testing kit drives the server and reads cli's captures
    (18, ["testing"]),
]
for _layer, _names in _ORDER:
    for _name in _names:
        LAYERS[_name] = _layer


def layer_of(module: str) -> int:
    if module in LAYERS:
        return LAYERS[module]
    top = module.split(".", 1)[0]
    if top in ("relay", "server", "cli", "apis", "web", "testing"):
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


def imports_in(source: str, own: str, is_package: bool, *, typing: bool = False) -> set[str]:
    """The package modules that ``source`` (module ``own``) imports at module level (and under
    ``if TYPE_CHECKING:`` too when ``typing``)."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                if typing or not is_type_checking(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody):
                    visit(block)
                for handler in node.handlers:
                    visit(handler.body)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                found.update(imported_by(node, own, is_package))

    visit(ast.parse(source).body)
    return with_packages(found, own, is_package)


def all_imports_in(source: str, own: str, is_package: bool) -> set[str]:
    """The package modules that ``source`` imports anywhere: at module level, for typing, or
    inside a function (when it is called)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(imported_by(node, own, is_package))
    return with_packages(found, own, is_package)


def imported_by(node: ast.Import | ast.ImportFrom, own: str, is_package: bool) -> set[str]:
    """The package modules one import statement of module ``own`` names."""
    parts = [part for part in own.split(".") if part]
    package = parts if is_package else parts[:-1]
    found: set[str] = set()
    if isinstance(node, ast.ImportFrom) and node.level:
        base = package[: len(package) - (node.level - 1)]
        if node.module:
            found.add(".".join([*base, node.module]))
        else:
            for alias in node.names:
                candidate = ".".join([*base, alias.name])
                is_module = (PACKAGE / Path(*candidate.split("."))).with_suffix(".py")
                is_a_package = PACKAGE / Path(*candidate.split(".")) / "__init__.py"
                if candidate and (is_module.exists() or is_a_package.exists()):
                    found.add(candidate)
                else:
                    found.add(".".join(base))
    elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fluxstream"):
        found.add((node.module or "").removeprefix("fluxstream").lstrip("."))
    elif isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("fluxstream"):
                found.add(alias.name.removeprefix("fluxstream").lstrip("."))
    return found


def with_packages(found: set[str], own: str, is_package: bool) -> set[str]:
    """``found`` plus the packages whose ``__init__`` importing them runs: importing
    ``structured.objects`` from ``reply`` runs ``structured/__init__.py`` first (and whatever
    it imports), while a module inside ``structured`` is already inside that package."""
    parts = [part for part in own.split(".") if part]
    package = parts if is_package else parts[:-1]
    mine = {".".join(package[:depth]) for depth in range(len(package) + 1)}
    for module in list(found):
        pieces = module.split(".")
        for depth in range(1, len(pieces)):
            parent = ".".join(pieces[:depth])
            if parent not in mine:
                found.add(parent)
    found.discard(own)
    return found


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
GRAPH = {name: module_level_imports(path) for name, path in MODULES.items()}


def _import_kinds(path: Path) -> tuple[set[str], set[str]]:
    """Every import of the module at ``path``, and those that run only when one of its
    functions is called."""
    source, own, is_package = path.read_text(encoding="utf-8"), module_name(path), (
        path.name == "__init__.py")
    everything = all_imports_in(source, own, is_package)
    return everything, everything - imports_in(source, own, is_package, typing=True)


_KINDS = {name: _import_kinds(path) for name, path in MODULES.items()}
#: Every import of each module: module-level, typing-only and call-time.
ALL_IMPORTS = {name: kinds[0] for name, kinds in _KINDS.items()}
#: The imports of each module that run only when one of its functions is called.
CALL_TIME = {name: kinds[1] for name, kinds in _KINDS.items()}

#: Call-time imports that point upward on purpose (importer, imported): each is a convenience
#: that would otherwise make users import a second module, and none runs at import time.
#: An edge listed here is left out of the checks below only while *every* import along it is
#: inside a function: a module-level or typing-only import of the same module still counts.
#: Keep this short; a new entry needs its reason.
DELIBERATE_UPWARD: dict[tuple[str, str], str] = {
    ("_reply", "errors"): "Reply.raise_for_outcome() raises the stream errors, which carry the "
    "reply (typed: errors names the reply for type checking), so the reply imports them only "
    "when it raises one",
}


def checked_imports(module: str) -> set[str]:
    """Every import of ``module`` but the deliberate call-time ones."""
    return {dep for dep in ALL_IMPORTS[module]
            if not ((module, dep) in DELIBERATE_UPWARD and dep in CALL_TIME[module])}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (``[a, b, ..., a]``), or ``None``."""
    done: set[str] = set()
    on_path: list[str] = []

    def walk(node: str) -> list[str] | None:
        if node in on_path:
            return [*on_path[on_path.index(node):], node]
        if node in done:
            return None
        on_path.append(node)
        for dep in sorted(graph.get(node, ())):
            cycle = walk(dep)
            if cycle is not None:
                return cycle
        on_path.pop()
        done.add(node)
        return None

    for name in sorted(graph):
        cycle = walk(name)
        if cycle is not None:
            return cycle
    return None


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or not (the strongly connected
    components of more than one module, each sorted), so a failure names all of them."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        reach[start] = seen
    groups = {tuple(sorted(m for m in reach[a] if a in reach[m] or m == a))
              for a in graph if a in reach[a]}
    return sorted(list(group) for group in groups)


@pytest.mark.parametrize("module", sorted(MODULES), ids=lambda m: m or "fluxstream")
def test_a_module_imports_only_its_own_layer_or_lower(module: str) -> None:
    mine = layer_of(module)
    upward = sorted(dep for dep in GRAPH[module] if layer_of(dep) > mine)
    assert upward == [], f"fluxstream.{module} (layer {mine}) imports higher layers: {upward}"


def test_the_module_level_import_graph_has_no_cycle() -> None:
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_of_every_import_has_no_cycle() -> None:
    """Typing-only and call-time imports count: a circle through them still ties the modules
    together (one cannot be read, moved or tested without the other), and one edit away from
    a module-level import it fails at import time."""
    graph = {module: checked_imports(module) for module in MODULES}
    found = cycles(graph)
    shown = "; ".join(
        " <-> ".join(m or "fluxstream" for m in group)
        + " (" + ", ".join(f"{m or 'fluxstream'} -> {sorted(graph[m] & set(group))}"
                           for m in group) + ")"
        for group in found
    )
    assert found == [], f"import circles (counting typing-only and call-time imports): {shown}"


@pytest.mark.parametrize("module", sorted(MODULES), ids=lambda m: m or "fluxstream")
def test_no_import_of_any_kind_points_upward(module: str) -> None:
    """An import under ``if TYPE_CHECKING:`` or inside a function points down too, unless it
    is one of :data:`DELIBERATE_UPWARD` (then it must be inside a function)."""
    mine = layer_of(module)
    upward = sorted(dep for dep in checked_imports(module) if layer_of(dep) > mine)
    assert upward == [], f"fluxstream.{module} (layer {mine}) imports higher layers: {upward}"


def test_every_deliberate_upward_import_says_why_and_points_up() -> None:
    for (importer, imported), reason in DELIBERATE_UPWARD.items():
        assert reason.strip(), (importer, imported)
        assert importer in LAYERS and imported in LAYERS, (importer, imported)
        assert layer_of(imported) > layer_of(importer), (importer, imported)


def test_the_checker_sees_upward_imports_and_ignores_typing_and_lazy_ones() -> None:
    """The checker must catch what it is for, and only that."""
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
from .errors import FluxstreamError
from . import _stream
if TYPE_CHECKING:
    from ._client import AsyncClient
try:
    from .relay import MemoryReplyLog
except ImportError:
    pass
def later():
    from .server import serve
"""
    found = imports_in(source, "sse", is_package=False)
    assert found == {"errors", "_stream", "relay"}
    assert sorted(dep for dep in found if layer_of(dep) > layer_of("sse")) == ["_stream", "relay"]
    assert imports_in(source, "sse", is_package=False, typing=True) == {
        "errors", "_stream", "relay", "_client"}
    assert all_imports_in(source, "sse", is_package=False) == {
        "errors", "_stream", "relay", "_client", "server"}


def test_importing_a_module_of_a_subpackage_counts_as_importing_the_package() -> None:
    """``from .structured.objects import X`` runs ``structured/__init__.py`` first; from inside
    ``structured`` the package is already there."""
    source = """
from .structured.objects import ObjectBuilder
from ._core.partial_objects import StructuredResult
"""
    assert imports_in(source, "_reply", is_package=False) == {
        "structured", "structured.objects", "_core", "_core.partial_objects"}
    assert imports_in("from .objects import ObjectBuilder\n", "structured.track",
                      is_package=False) == {"structured.objects"}
    assert imports_in("from .objects import ObjectBuilder\n", "structured",
                      is_package=True) == {"structured.objects"}


def test_the_cycle_finders_find_a_circle_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert cycles(graph) == [["a", "b", "c"], ["e"]]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    assert cycles({"a": {"b"}, "b": set()}) == []
