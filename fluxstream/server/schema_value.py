"""A JSON value that fits a JSON schema, computed from the schema alone (no randomness).

The embedded server answers a request for structured output (a ``response_format`` JSON
schema, a Responses ``text.format``, a forced tool's input schema) with a value made here, so
a client test can stream schema-shaped JSON and compare it with a non-streamed parse. The value
is meant to exercise what breaks incremental parsers: every property of every object (required
or not), arrays of a few items, nested objects, ``$defs``/``$ref``, ``anyOf`` with ``null``,
enums, numbers, and strings with non-ASCII text, a quote, a backslash and an emoji made of two
code points.

Deterministic and bounded: the same schema and seed give the same value; recursion (a model
that contains a list of itself) stops at :data:`MAX_DEPTH` (optional values become ``null``,
arrays empty when ``minItems`` allows), at most :data:`MAX_NODES` values are made, and
``minLength`` is met up to :data:`MAX_STRING` code points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_NODES", "MAX_STRING", "schema_value"]

#: Nesting depth after which optional parts are left out (recursive schemas end here).
MAX_DEPTH = 4
#: Values made for one document at most; past it arrays are empty and optional values null.
MAX_NODES = 2_000
#: Longest string made for a ``minLength`` (a longer one is cut, as ``minItems`` is at 64).
MAX_STRING = 4_096
#: Items per array when the schema does not say (``minItems``/``maxItems`` win).
ARRAY_ITEMS = 3

#: Natural string samples by a word in the property name (first match wins).
_NAMED: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("city", "location", "place", "town"), ("Zürich", "São Paulo", "東京")),
    (("country",), ("Schweiz", "Brasil", "日本")),
    (("timezone", "tz", "zone"), ("Europe/Zurich", "America/Sao_Paulo", "Asia/Tokyo")),
    (("lang", "language", "locale"), ("de-CH", "pt-BR", "ja-JP")),
    (("email", "mail"), ("zoë@example.com", "joão@example.com", "hana@example.jp")),
    (("name", "title", "label"), ("Crème brûlée", "Smørrebrød", "お好み焼き")),
)
#: Other strings: multi-byte text, a quote and a backslash JSON must escape, a ZWJ-free
#: two-code-point emoji, a newline.
_TEXT: tuple[str, ...] = (
    "naïve café ☕",
    "你好, 世界",
    'a "quoted" word',
    "C:\\temp\\ünï",
    "wave 👋🏽 hello",
    "Grüße\naus Zürich",
    "Ωmega → ∞",
)
_FORMATS: dict[str, str] = {
    "date-time": "2026-12-01T00:24:30Z",
    "date": "2026-12-01",
    "time": "00:24:30",
    "email": "zoë@example.com",
    "uri": "https://example.com/ünï",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_NODES

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


def schema_value(schema: Any, *, seed: int = 0, name: str = "") -> Any:
    """A value of ``schema`` (a JSON schema dict); ``seed`` varies the samples (choice, call).

    ``$ref`` pointers are resolved against ``schema`` itself (``#/$defs/X``,
    ``#/definitions/X``). Anything the generator does not understand gives a string.
    """
    return _value(schema, schema, seed, name, 0, _Budget())


def _resolve(root: Any, schema: Any) -> Any:
    for _ in range(32):  # a chain of refs; bounded in case they loop
        if not isinstance(schema, Mapping) or not isinstance(schema.get("$ref"), str):
            return schema
        ref = schema["$ref"]
        target: Any = root
        if not ref.startswith("#"):
            return {}
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        schema = {**target, **extra} if isinstance(target, Mapping) and extra else target
    return {}


def _is_null(option: Any) -> bool:
    return isinstance(option, Mapping) and option.get("type") == "null"


def _nullable(options: Sequence[Any]) -> bool:
    return any(_is_null(o) for o in options)


def _value(root: Any, schema: Any, seed: int, name: str, depth: int, budget: _Budget) -> Any:
    schema = _resolve(root, schema)
    if not isinstance(schema, Mapping):
        return _string(name, seed, {})
    if not budget.take():
        return None
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[seed % len(enum)]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            usable = [o for o in options if not _is_null(o)]
            # Optional values alternate with null (seeded), and are null past the depth bound.
            if _nullable(options) and (not usable or seed % 2 == 1 or depth >= MAX_DEPTH):
                return None
            pick = usable[seed % len(usable)] if usable else options[0]
            return _value(root, pick, seed, name, depth, budget)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        merged: dict[str, Any] = {}
        for part in all_of:
            part = _resolve(root, part)
            if isinstance(part, Mapping):
                merged.update(part)
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return _value(root, {**merged, **rest}, seed, name, depth, budget)
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if not kinds or ("null" in kind and depth >= MAX_DEPTH):
            return None
        kind = kinds[0]
    if kind is None:
        if "properties" in schema:
            kind = "object"
        elif "items" in schema:
            kind = "array"
    if kind == "object":
        return _object(root, schema, seed, depth, budget)
    if kind == "array":
        return _array(root, schema, seed, name, depth, budget)
    if kind == "integer":
        return _number(schema, seed + 1, integer=True)
    if kind == "number":
        return _number(schema, seed + 0.25, integer=False)
    if kind == "boolean":
        return seed % 2 == 0
    if kind == "null":
        return None
    return _string(name, seed, schema)


def _object(root: Any, schema: Mapping[str, Any], seed: int, depth: int, budget: _Budget) -> Any:
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and depth < MAX_DEPTH:
            return {"clé": _value(root, extra, seed, "clé", depth + 1, budget)}
        return {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    out: dict[str, Any] = {}
    for position, (key, sub) in enumerate(props.items()):
        if depth >= MAX_DEPTH and key not in required:
            continue
        out[str(key)] = _value(root, sub, seed + position, str(key), depth + 1, budget)
    return out


def _array(
    root: Any, schema: Mapping[str, Any], seed: int, name: str, depth: int, budget: _Budget
) -> Any:
    low = schema.get("minItems")
    high = schema.get("maxItems")
    low = low if isinstance(low, int) and low >= 0 else 0
    count = ARRAY_ITEMS if depth < MAX_DEPTH and budget.left > 0 else low
    if isinstance(high, int) and high >= 0:
        count = min(count, high)
    count = max(count, min(low, 64))
    items = schema.get("items")
    prefix = schema.get("prefixItems")
    out = []
    for i in range(count):
        sub = prefix[i] if isinstance(prefix, list) and i < len(prefix) else items
        out.append(_value(root, sub if sub is not None else {}, seed + i, name, depth + 1, budget))
    return out


def _number(schema: Mapping[str, Any], value: float, *, integer: bool) -> int | float:
    low = _finite(schema.get("minimum", schema.get("exclusiveMinimum")))
    high = _finite(schema.get("maximum", schema.get("exclusiveMaximum")))
    if low is not None and value < low:
        value = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
    if high is not None and value > high:
        value = high - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0)
    return int(value) if integer else float(value)


def _finite(bound: Any) -> float | None:
    """A numeric schema bound, or ``None``: Python's ``json`` reads ``Infinity`` and ``NaN``,
    which no JSON value can meet (``int(inf)`` raised ``OverflowError``)."""
    if isinstance(bound, bool) or not isinstance(bound, (int, float)):
        return None
    return bound if math.isfinite(bound) else None


def _string(name: str, seed: int, schema: Mapping[str, Any]) -> str:
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt in _FORMATS:
        return _FORMATS[fmt]
    lowered = name.lower()
    text = next(
        (samples[seed % len(samples)] for words, samples in _NAMED
         if any(word in lowered for word in words)),
        _TEXT[(seed + len(name)) % len(_TEXT)],
    )
    low = schema.get("minLength")
    high = schema.get("maxLength")
    if isinstance(low, int):
        low = min(low, MAX_STRING)  # a gigabyte minLength stalled the whole server
    if isinstance(low, int) and len(text) < low:
        text = ((text + " ") * (low // (len(text) + 1) + 1))[:low]
    if isinstance(high, int) and high >= 0 and len(text) > high:
        text = text[:high]
    return text
