"""What the partial-object builder needs to know about a type, compiled once from pydantic.

Defined in the sans-IO core (:mod:`fluxstream._core.object_shapes`, whose docstring gives the
rules) beside the engine that uses it, below :mod:`fluxstream._reply`; re-exported here so
the structured package keeps every module it had.
"""

from __future__ import annotations

from .._core.object_shapes import LIST, MODEL, OPAQUE, STR, Field, ModelInfo, Shape, compile_shape

__all__ = ["LIST", "MODEL", "OPAQUE", "STR", "Field", "ModelInfo", "Shape", "compile_shape"]
