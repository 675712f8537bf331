"""Structured output: request parameters from pydantic types, typed partial objects while the
JSON streams, and the validated result (sans-IO; see :mod:`.objects` and :mod:`.schema`).

Layer: beside :mod:`fluxstream._assembly` (imports the reply and the events, and the engine in
:mod:`fluxstream._core`; never the I/O layer). The engine (:class:`ObjectBuilder`, the name a
type goes by) and the reading of a finished reply (:func:`parse_reply`) are defined below the
reply model, which runs them for ``Reply.parse(Model)``; this package is where users import them.
"""

from .._json_paths import PathTracker
from .objects import (
    ObjectBuilder,
    StructuredResult,
    parse_structured,
    partial_object,
    strip_fences,
)
from .reply import TRUNCATING_STOPS, parse_reply, parse_tool_call
from .schema import (
    anthropic_tool,
    json_schema,
    response_format,
    schema_name,
    strict_json_schema,
    text_format,
)
from .track import StructuredTracker

__all__ = [
    "TRUNCATING_STOPS",
    "ObjectBuilder",
    "PathTracker",
    "StructuredResult",
    "StructuredTracker",
    "anthropic_tool",
    "json_schema",
    "parse_reply",
    "parse_structured",
    "parse_tool_call",
    "partial_object",
    "response_format",
    "schema_name",
    "strict_json_schema",
    "strip_fences",
    "text_format",
]
