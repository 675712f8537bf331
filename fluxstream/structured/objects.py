"""Typed partial objects from JSON text that is still arriving (:class:`ObjectBuilder`).

The engine is defined in the sans-IO core (:mod:`fluxstream._core.partial_objects`, whose
docstring says what a partial object holds and costs), below :mod:`fluxstream._reply`, because
``Reply.parse(Model)`` runs it; its public home is :mod:`fluxstream.structured`.
"""

from __future__ import annotations

from .._core.partial_objects import (
    ObjectBuilder,
    StructuredResult,
    parse_structured,
    partial_object,
    strip_fences,
)

__all__ = ["ObjectBuilder", "StructuredResult", "parse_structured", "partial_object",
           "strip_fences"]
