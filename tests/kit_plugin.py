"""Whether pytest loads the testing kit's plugin by itself, and the arguments that load it
when it does not: the suite (tests/conftest.py) and the pytest runs it starts load it once
either way (twice is refused by pytest)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

#: The plugin module the ``pytest11`` entry point names.
PLUGIN = "_fluxstream_pytest_plugin"


def autoloaded() -> bool:
    """fluxstream is installed with its ``pytest11`` entry point and plugins autoload (a
    checkout whose installed metadata predates the entry point: not)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == PLUGIN for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    """What a pytest command line adds to have the plugin loaded."""
    return [] if autoloaded() else ["-p", PLUGIN]
