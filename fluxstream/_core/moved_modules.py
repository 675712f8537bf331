"""The module paths 0.1 made public and this release made private keep importing.

``fluxstream`` is the public surface, with the subpackages ``errors``, ``sse``, ``apis``,
``formats``, ``structured``, ``relay``, ``server``, ``otel`` and ``cli``; the modules behind
it say they are private by their names (``fluxstream._reply``). Code written against 0.1's
paths (``from fluxstream.reply import Reply``, ``from fluxstream.endpoints import
anthropic_client``) still works: a finder placed last on ``sys.meta_path`` (so it is asked
only for a name no file answers) gives each old path a module holding the private module's
names, and a ``DeprecationWarning`` at the user's import line says where to import from.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Collection
from types import ModuleType

from .deprecation import warn_deprecated

__all__ = ["MOVED", "MovedModuleFinder", "install"]

#: Old public path -> the private module that holds its names now.
MOVED: dict[str, str] = {
    f"fluxstream.{name}": f"fluxstream._{name}"
    for name in (
        "assembly", "client", "endpoints", "events", "limits", "observe", "parser",
        "partial_json", "reply", "retry", "stream", "timeouts", "upstream", "usage", "wire",
    )
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads the old paths of :data:`MOVED`, and nothing else.

    :param public: the names ``fluxstream`` exports, for the warning to say which to import
        from there.
    """

    def __init__(self, public: Collection[str]) -> None:
        self._public = frozenset(public)

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        private = importlib.import_module(MOVED[module.__name__])
        public = getattr(private, "__all__", ())
        at_top = [name for name in public if name in self._public]
        where = (f"import {', '.join(at_top[:4])}{', ...' if len(at_top) > 4 else ''} from"
                 " fluxstream" if at_top else "import from fluxstream")
        warn_deprecated(
            f"{module.__name__} is private now ({private.__name__}): {where}; the old path"
            " goes away in 1.0"
        )
        module.__dict__.update(
            {name: value for name, value in vars(private).items() if not name.startswith("__")}
        )
        module.__all__ = list(public)  # type: ignore[attr-defined]


def install(public: Collection[str]) -> None:
    """Put the finder last on ``sys.meta_path`` (once); ``public``: ``fluxstream.__all__``."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(public))
