"""Every name the package's docstrings and comments point to exists.

A docstring that names a function, class, module, method or attribute which was renamed,
moved or removed misleads the next reader more than no docstring at all, and nothing else
notices: Python never reads them. This test reads every ``:mod:``, ``:class:``, ``:func:``,
``:meth:``, ``:attr:``, ``:data:``, ``:exc:`` and ``:obj:`` reference, every backticked
``fluxstream.<dotted.name>`` and every repository path (``fluxstream/relay/writer.py``,
``benchmarks/bench_relay.py``) in the package's source, and resolves each one the way a
reader would: a dotted name by importing it, a bare name in the enclosing class, then in
the module (its imports included, those for type checking too), then among the builtins;
a path on disk.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import re
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fluxstream._core.moved_modules import MOVED

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fluxstream"

#: ``:role:`target``` (Sphinx's cross-references), ``~`` or ``!`` allowed before the target.
ROLE = re.compile(r":(mod|class|func|meth|attr|data|exc|obj):`([^`]+)`")
#: A dotted name of the package inside backticks (``fluxstream.relay.RedisReplyLog``).
DOTTED = re.compile(r"`+(fluxstream(?:\.\w+)+)")
#: A member of a class in backticks (``StreamParser.offsets``): checked when the class is
#: the package's (``Listener.serve`` is anyio's).
MEMBER = re.compile(r"``([A-Z]\w*(?:\.\w+)+)``")
#: A path of the repository (a module, a benchmark, a document).
PATH = re.compile(
    r"(?<![\w/.-])((?:fluxstream|benchmarks|tests|docs|examples)/[\w/.-]*\w\.(?:py|md|toml))"
)

#: References the test finds today in modules being rewritten elsewhere, as
#: (path under the repository, reference): each one must still be found (so the list
#: only shrinks), and is fixed by removing it from here along with the reference.
KNOWN_DRIFT: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Reference:
    path: str
    line: int
    text: str
    #: The classes around it, innermost first (their names, for a bare ``:meth:``).
    classes: tuple[str, ...]


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py":  # running it is importing it
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def references(path: Path) -> Iterator[Reference]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    spans = [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    ]
    where = str(path.relative_to(ROOT))
    for number, line in enumerate(source.splitlines(), start=1):
        around = sorted(
            (span for span in spans if span[0] <= number <= span[1]), key=lambda s: -s[0]
        )
        classes = tuple(name for _, _, name in around)
        for match in ROLE.finditer(line):
            yield Reference(where, number, match.group(0), classes)
        for match in DOTTED.finditer(line):
            yield Reference(where, number, f"``{match.group(1)}``", classes)
        for match in MEMBER.finditer(line):
            yield Reference(where, number, match.group(0), classes)
        for match in PATH.finditer(line):
            yield Reference(where, number, match.group(1), classes)


def target_of(text: str) -> str:
    """The name a reference points to: ``~``/``!`` and an explicit title dropped, no call."""
    match = ROLE.fullmatch(text)
    target = match.group(2) if match else text.strip("`")
    if target.endswith(">") and "<" in target:
        target = target[target.rindex("<") + 1:-1]
    return target.lstrip("~!").removesuffix("()")


@functools.cache
def class_members(cls: type) -> frozenset[str]:
    """What an instance of ``cls`` has: class attributes, fields (annotated, dataclass,
    pydantic) and every ``self.<name> = ...`` of its methods, over its MRO."""
    names: set[str] = set(dir(cls))
    for base in cls.__mro__:
        names.update(getattr(base, "__annotations__", {}))
        if dataclasses.is_dataclass(base):
            names.update(field.name for field in dataclasses.fields(base))
        names.update(getattr(base, "model_fields", {}))
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        tree = ast.parse(inspect.cleandoc("\n" + source) if source[:1].isspace() else source)
        for node in ast.walk(tree):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if (isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name)
                            and part.value.id == "self"):
                        names.add(part.attr)
    return frozenset(names)


def has_path(owner: Any, parts: list[str]) -> bool:
    """Whether ``owner.<parts...>`` exists; past an attribute only an instance has (its
    value unknown here), the rest is taken as it is."""
    for name in parts:
        if isinstance(owner, ModuleType):
            if owner.__name__ in MOVED or f"{owner.__name__}.{name}" in MOVED:
                return False  # a deprecated path is no reference to give
            if hasattr(owner, name):
                owner = getattr(owner, name)
                continue
            try:
                owner = importlib.import_module(f"{owner.__name__}.{name}")
            except ImportError:
                return name in module_names(owner.__name__)
            continue
        if isinstance(owner, type):
            if name in owner.__dict__ or hasattr(owner, name):
                owner = inspect.getattr_static(owner, name)
                if isinstance(owner, (property, functools.cached_property)):
                    return True
                continue
            return name in class_members(owner)
        return hasattr(owner, name)
    return True


def absolute(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if any(".".join(parts[:k]) in MOVED for k in range(1, cut + 1)):
            continue  # a deprecated path is no reference to give
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return has_path(module, parts[cut:])
    return False


@functools.cache
def module_names(module_name: str) -> dict[str, str]:
    """The names a module's source defines or imports anywhere (under ``TYPE_CHECKING`` and
    inside functions too), each with the dotted name it stands for (``""``: defined here)."""
    module = importlib.import_module(module_name)
    path = Path(module.__file__ or "")
    package = module_name if path.name == "__init__.py" else module_name.rpartition(".")[0]
    names: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.setdefault(node.name, "")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names.setdefault(target.id, "")
    return names


def resolves(module_name: str, reference: Reference) -> bool:
    target = target_of(reference.text)
    if "/" in target:
        return (ROOT / target).exists()
    if target.startswith("fluxstream"):
        return absolute(target) or (
            not reference.text.startswith(":") and target in names_not_python()
        )
    module = importlib.import_module(module_name)
    if target.startswith("."):
        level = len(target) - len(target.lstrip("."))
        package = module_name if module.__file__ and module.__file__.endswith(
            "__init__.py") else module_name.rpartition(".")[0]
        base = package.split(".")[: len(package.split(".")) - level + 1]
        return absolute(".".join([*base, target.lstrip(".")]))
    first, *rest = target.split(".")
    for name in reference.classes:  # a member of the class around it (innermost first)
        cls = getattr(module, name, None)
        if isinstance(cls, type) and first in class_members(cls):
            return has_path(cls, [first, *rest])
    if hasattr(module, first):
        return has_path(getattr(module, first), rest)
    known = module_names(module_name)
    if first in known:
        return not known[first] or absolute(".".join([known[first], *rest]))
    if hasattr(builtins, first):
        return has_path(getattr(builtins, first), rest)
    if absolute(target):  # a module outside the package (``asyncio.Task``)
        return True
    if not rest and any(  # a member of one of the module's classes, named at module level
        first in class_members(value) for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module_name
    ):
        return True
    # A class or function of the package named without its module (``ReplyStream.cancel``
    # where the stream is not imported): it must exist, somewhere, with what follows.
    candidates = package_index().get(first)
    if candidates is None:  # a role must resolve; a backticked name may be another library's
        return not reference.text.startswith(":")
    return any(has_path(value, rest) for value in candidates)


@functools.cache
def package_index() -> dict[str, list[Any]]:
    """Every class and function of the package by its name (a name may have several)."""
    index: dict[str, list[Any]] = {}
    for module_name, _ in modules():
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            if (inspect.isclass(value) or inspect.isfunction(value)) and (
                getattr(value, "__module__", None) == module_name
            ):
                index.setdefault(value.__name__, []).append(value)
    return index


@functools.cache
def names_not_python() -> frozenset[str]:
    """The dotted names the code uses as data, not references to resolve: every string it
    holds (a span attribute, a logger's name) and the span events it names by a send's kind
    (``fluxstream.retry``, ``fluxstream.resume``)."""
    from fluxstream._observe import SendInfo

    found = {f"fluxstream.{kind}" for kind in typing.get_args(
        typing.get_type_hints(SendInfo)["kind"])}
    for _, path in modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return frozenset(found)


def unresolved() -> list[tuple[str, str, int]]:
    found = []
    for module_name, path in modules():
        for reference in references(path):
            if not resolves(module_name, reference):
                found.append((reference.path, reference.text, reference.line))
    return found


@pytest.fixture(scope="module")
def drift() -> list[tuple[str, str, int]]:
    pytest.importorskip("redis")
    pytest.importorskip("opentelemetry")
    return unresolved()


def test_every_reference_in_a_docstring_or_comment_resolves(
    drift: list[tuple[str, str, int]],
) -> None:
    new = [
        f"{path}:{line}: {text}" for path, text, line in drift
        if (path, text) not in KNOWN_DRIFT
    ]
    assert not new, "docstrings name what does not exist:\n" + "\n".join(new)


def test_known_drift_is_still_there(drift: list[tuple[str, str, int]]) -> None:
    """An entry of :data:`KNOWN_DRIFT` that is fixed leaves the list."""
    left = {(path, text) for path, text, _ in drift}
    fixed = sorted(KNOWN_DRIFT - left)
    assert not fixed, f"fixed: remove them from KNOWN_DRIFT: {fixed}"


@pytest.mark.parametrize("package", ["_core", "_io"])
def test_a_private_layer_names_each_of_its_modules(package: str) -> None:
    """The docstring of ``_core`` and ``_io`` is their map (what each module decides or
    does): a module added or renamed there is named in it."""
    folder = PACKAGE / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
    named = set(re.findall(r"``(\w+)``", doc or ""))
    unnamed = sorted(
        path.stem for path in folder.glob("*.py")
        if path.name != "__init__.py" and path.stem not in named
    )
    assert not unnamed, f"fluxstream/{package}/__init__.py does not name {unnamed}"


#: Documents whose backticked paths (``relay/_redis_writes.py``, ``tests/docs/``) must exist,
#: under ``fluxstream/`` or the repository (the CHANGELOG names what was true then).
DOCUMENTS = ["README.md", "docs/architecture.md", "benchmarks/README.md"]
DOCUMENT_PATH = re.compile(r"`([\w.-]+/[\w/.-]*(?:\.py|/))`")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_a_document_names_exists(document: str) -> None:
    path = ROOT / document
    missing = sorted({
        name for name in DOCUMENT_PATH.findall(path.read_text(encoding="utf-8"))
        if not any(place.exists() for place in (PACKAGE / name, ROOT / name, path.parent / name))
    })
    assert not missing, f"{document} names paths that do not exist: {missing}"


@pytest.mark.parametrize(
    ("module_name", "text", "classes", "expected"),
    [
        ("fluxstream.relay.redis_log", ":class:`~fluxstream.relay.RedisReplyLog`", (), True),
        ("fluxstream.relay.redis_log", ":mod:`fluxstream.relay.redis_io`", (), False),
        ("fluxstream.relay.redis_log", ":meth:`RedisReplyLog.keys`", (), True),
        ("fluxstream.relay.redis_log", ":meth:`RedisReplyLog.key`", (), False),
        ("fluxstream.relay.redis_log", ":meth:`_scripted`", ("RedisReplyLog",), True),
        ("fluxstream.relay.redis_log", ":meth:`_scripts`", ("RedisReplyLog",), True),
        ("fluxstream.relay.redis_log", ":meth:`_unscripted`", ("RedisReplyLog",), False),
        ("fluxstream.relay.redis_log", ":class:`ScriptCalls`", (), True),
        ("fluxstream.relay.redis_log", ":data:`WRITES`", (), True),
        ("fluxstream.relay.redis_log", ":data:`_READ_COUNT`", (), True),
        ("fluxstream.relay.redis_log", ":data:`_WRITE_COUNT`", (), False),
        ("fluxstream.relay._redis_written_channel", ":attr:`live`", ("WrittenNames",), True),
        ("fluxstream.relay._redis_written_channel", ":attr:`alive`", ("WrittenNames",), False),
        ("fluxstream.relay.redis_log", ":class:`ValueError`", (), True),
        ("fluxstream.relay.redis_log", ":class:`asyncio.Task`", (), True),
        ("fluxstream.relay.redis_log", ":class:`asyncio.Tusk`", (), False),
        ("fluxstream.relay.redis_log", "``fluxstream.relay.codec.encode_entry``", (), True),
        ("fluxstream.relay.redis_log", "``fluxstream.relay.codec.encode_entries``", (), False),
        ("fluxstream.relay.redis_log", "benchmarks/bench_relay.py", (), True),
        ("fluxstream.relay.redis_log", "fluxstream/relay/redis_io.py", (), False),
    ],
)
def test_the_checker_tells_what_exists_from_what_does_not(
    module_name: str, text: str, classes: tuple[str, ...], expected: bool
) -> None:
    pytest.importorskip("redis")
    reference = Reference("fluxstream", 1, text, classes)
    assert resolves(module_name, reference) is expected
