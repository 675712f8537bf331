"""Request parameters for structured output: strict JSON schemas from pydantic types.

OpenAI's ``strict`` structured outputs accept a subset of JSON Schema. The rules applied here
are the ones openai-python applies (``to_strict_json_schema``), re-implemented so that
fluxstream does not depend on the openai package, and without mutating the caller's schema:

* every object gets ``additionalProperties: false`` unless it says otherwise;
* every property is listed in ``required`` (optional fields stay nullable in their type);
* ``properties``, ``items``, ``anyOf``, ``allOf``, ``$defs`` and ``definitions`` are
  processed recursively; an ``allOf`` with one entry is merged into its parent;
* a ``default`` of ``null`` is dropped (it carries no information for the API);
* a ``$ref`` next to other keys (``{"$ref": ..., "description": ...}``) is inlined, the
  sibling keys winning, because the API rejects such siblings.

Everything here is a pure function; a ``dict`` given where a type is expected is returned as is
(the caller already wrote the provider's parameter).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .._core.type_names import schema_name

__all__ = [
    "anthropic_tool",
    "json_schema",
    "response_format",
    "schema_name",
    "strict_json_schema",
    "text_format",
]

_DEPTH_MAX = 256


def json_schema(tp: Any) -> dict[str, Any]:
    """The (non-strict) JSON schema pydantic generates for ``tp`` (validation mode)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.model_json_schema()
    adapter = tp if isinstance(tp, TypeAdapter) else TypeAdapter(tp)
    return adapter.json_schema()


def strict_json_schema(tp: Any) -> dict[str, Any]:
    """``tp``'s JSON schema made strict (see the module docstring for the rules)."""
    schema = json_schema(tp)
    return _strict(schema, root=schema, depth=0)


def _strict(node: Any, *, root: dict[str, Any], depth: int) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise TypeError(f"expected a JSON schema object, got {type(node).__name__}")
    if depth > _DEPTH_MAX:
        raise ValueError("JSON schema nested too deeply (or a $ref cycle)")
    out = dict(node)
    for key in ("$defs", "definitions"):
        defs = out.get(key)
        if isinstance(defs, dict):
            out[key] = {n: _strict(s, root=root, depth=depth + 1) for n, s in defs.items()}
    if out.get("type") == "object" and "additionalProperties" not in out:
        out["additionalProperties"] = False
    properties = out.get("properties")
    if isinstance(properties, dict):
        out["required"] = list(properties)
        out["properties"] = {
            n: _strict(s, root=root, depth=depth + 1) for n, s in properties.items()
        }
    items = out.get("items")
    if isinstance(items, dict):
        out["items"] = _strict(items, root=root, depth=depth + 1)
    any_of = out.get("anyOf")
    if isinstance(any_of, list):
        out["anyOf"] = [_strict(s, root=root, depth=depth + 1) for s in any_of]
    all_of = out.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            del out["allOf"]
            out.update(_strict(all_of[0], root=root, depth=depth + 1))
        else:
            out["allOf"] = [_strict(s, root=root, depth=depth + 1) for s in all_of]
    if "default" in out and out["default"] is None:
        del out["default"]
    ref = out.get("$ref")
    if isinstance(ref, str) and len(out) > 1:
        resolved = _resolve(root, ref)
        merged = {**copy.deepcopy(resolved), **out}
        del merged["$ref"]
        return _strict(merged, root=root, depth=depth + 1)
    return out


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"unsupported $ref {ref!r} (only local '#/...' references)")
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"$ref {ref!r} does not resolve")
        node = node[part]
    if not isinstance(node, dict):
        raise ValueError(f"$ref {ref!r} does not resolve to an object")
    return node


def response_format(tp: Any, *, name: str | None = None) -> Any:
    """Chat Completions ``response_format`` for ``tp``; a ``dict`` passes through untouched."""
    if isinstance(tp, dict):
        return tp
    return {
        "type": "json_schema",
        "json_schema": {
            "name": name or schema_name(tp),
            "schema": strict_json_schema(tp),
            "strict": True,
        },
    }


def text_format(tp: Any, *, name: str | None = None) -> Any:
    """Responses API ``text.format`` for ``tp``; a ``dict`` passes through untouched."""
    if isinstance(tp, dict):
        return tp
    return {
        "type": "json_schema",
        "name": name or schema_name(tp),
        "schema": strict_json_schema(tp),
        "strict": True,
    }


def anthropic_tool(
    tp: Any, *, name: str | None = None, description: str | None = None, strict: bool = False
) -> Any:
    """An Anthropic tool whose ``input_schema`` is ``tp`` (force it with
    ``tool_choice={"type": "tool", "name": <name>}``); a ``dict`` passes through untouched.

    ``strict=False`` sends pydantic's own schema (optional fields stay optional); ``strict``
    applies the strict rules above and sets the tool's ``strict`` flag.
    """
    if isinstance(tp, dict):
        return tp
    tool: dict[str, Any] = {
        "name": name or schema_name(tp),
        "input_schema": strict_json_schema(tp) if strict else json_schema(tp),
    }
    doc = description
    if doc is None and isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__doc__:
        doc = tp.__doc__.strip()
    if doc:
        tool["description"] = doc
    if strict:
        tool["strict"] = True
    return tool
