"""Deprecation warnings that point at the user's line.

A warning is attributed to the first caller outside fluxstream and outside the import
machinery (a keyword may come through ``anthropic_client(**kwargs)``, a moved module through
``import``), so Python's default filter shows it once per line of the user's code rather
than once, silently, inside the package.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_deprecated"]

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_IMPORT_MACHINERY = "<frozen importlib"


def _ours(filename: str) -> bool:
    return filename.startswith(_PACKAGE) or filename.startswith(_IMPORT_MACHINERY)


def warn_deprecated(message: str) -> None:
    """A ``DeprecationWarning`` of ``message`` attributed to the user's line."""
    frame = sys._getframe(1)
    level = 2
    while frame.f_back is not None and _ours(frame.f_code.co_filename):
        frame = frame.f_back
        # ``warnings`` skips the import machinery's frames itself when it counts.
        if not frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)
