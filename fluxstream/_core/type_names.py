"""The name a type goes by at the API: one rule for the request and for reading the reply.

Structured output names the JSON schema (``response_format``) or the forced tool (Anthropic's
"tool as schema") after the requested type, and ``Reply.parse(Model)`` finds that tool call by
the same name. The rule lives here, below both :mod:`fluxstream.structured.schema` (the
request) and :mod:`fluxstream._reply` (the reading), so neither imports the other.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter

__all__ = ["schema_name"]

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_MODULE_PREFIX = re.compile(r"\b[A-Za-z_][\w]*\.(?=[A-Za-z_])")


def schema_name(tp: Any) -> str:
    """A schema name the APIs accept (``^[A-Za-z0-9_-]{1,64}$``), from the type's name."""
    if isinstance(tp, TypeAdapter):
        tp = tp._type
    if isinstance(tp, type):
        name = tp.__name__
    else:  # list[Item], Annotated[...]: the expression without module prefixes
        name = _MODULE_PREFIX.sub("", repr(tp)).replace("typing.", "")
    name = _NAME_CHARS.sub("_", name).strip("_")[:64]
    return name or "response"
