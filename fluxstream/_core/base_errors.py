"""The root of fluxstream's errors, and the two that reading a reply's content raises.

The public home of these classes is :mod:`fluxstream.errors` (which re-exports them, and
whose name they carry in ``__module__``, so tracebacks, ``repr`` and error trackers show
``fluxstream.errors.ParseError`` as they always did). They are defined here, at the bottom of
the package, because the reply model raises them (``ToolCall.parse_arguments``,
``Reply.parse``) while :mod:`fluxstream.errors` names the reply (``StreamError.reply``): with
the root here, the reply imports nothing above it and the errors module may sit above the
reply. This module imports nothing from the package and must stay that way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ArgumentsError", "FluxstreamError", "ParseError"]

#: Where users import these classes from (see the module docstring).
PUBLIC_MODULE = "fluxstream.errors"


class FluxstreamError(Exception):
    """Base class of every error raised by fluxstream."""

    __module__ = PUBLIC_MODULE


class ArgumentsError(FluxstreamError, ValueError):
    """A tool call's assembled arguments are not valid JSON, or fail the given model.

    Raised only when the caller asks for parsed arguments, never while streaming.
    """

    __module__ = PUBLIC_MODULE

    def __init__(self, message: str, *, name: str | None, arguments: str) -> None:
        self.name = name
        self.arguments = arguments
        super().__init__(message)


class ParseError(FluxstreamError, ValueError):
    """Structured output (:mod:`fluxstream.structured`) is not JSON, not the expected shape, or
    does not validate against the requested type.

    ``text`` is the raw text received (markdown fences included), ``errors`` pydantic's error
    list (``ValidationError.errors()``, locations from the document root), ``partial`` the last
    valid partial object (``None`` if none was built), ``reason`` a short machine-readable
    cause: ``"invalid_json"``, ``"not_an_object"``, ``"schema"`` or ``"incomplete"``.
    """

    __module__ = PUBLIC_MODULE

    def __init__(
        self,
        message: str,
        *,
        text: str,
        errors: list[Any] | None = None,
        partial: Any = None,
        reason: str = "schema",
    ) -> None:
        self.text = text
        self.errors = errors or []
        self.partial = partial
        self.reason = reason
        excerpt = text if len(text) <= 200 else text[:200] + "..."
        super().__init__(f"{message}; text starts {excerpt!r}" if text else message)
