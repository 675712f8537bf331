"""An optional dependency imported under a guard that names the extra installing it.

fluxstream's relay on Redis and its OpenTelemetry observer need packages a plain install does
not bring; without this, the user meets a bare ``ModuleNotFoundError: No module named 'redis'``
from deep inside the package and has to guess which extra brings it. The error raised is still
a ``ModuleNotFoundError`` (code catching ``ImportError`` to fall back keeps working), worded as
what to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["needs_extra"]


@contextmanager
def needs_extra(extra: str, feature: str, *packages: str) -> Iterator[None]:
    """Run the imports of the ``with`` block; one of ``packages`` missing raises a
    ``ModuleNotFoundError`` saying that ``feature`` needs it and ``pip install
    'fluxstream[extra]'`` brings it. Another module missing (a bug, not an install) is let
    through as it is."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.partition(".")[0] not in packages:
            raise
        raise ModuleNotFoundError(
            f"{feature} needs {missing}, which is not installed:"
            f" pip install 'fluxstream[{extra}]'",
            name=missing,
        ) from exc
