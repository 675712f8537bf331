"""What the partial-object builder needs to know about a type, compiled once from pydantic.

A :class:`Shape` says how a JSON value at one place in the document may be shown before it is
complete, and validates it once it is:

* ``MODEL`` - an object validated into a ``BaseModel``: shown as a partial instance whose
  complete fields are set one by one (each validated with that field's own validator).
* ``LIST`` - an array: shown as a list that grows by complete, validated items, plus the
  item still arriving when that item can itself be shown partially.
* ``STR`` - a plain string: shown as far as it arrived.
* ``OPAQUE`` - everything else (numbers, literals, enums, unions, dicts, tuples, models with
  ``mode="before"`` validators ...): shown only once complete.

Why pydantic's *core* schema and not the JSON schema or the annotations: the core schema holds
exactly the validator pydantic runs for each field (constraints, ``field_validator`` s,
nested models, aliases, the model's config), so validating one field alone gives the same
value as validating the whole model would. Model-level ``mode="after"`` validators are the one
thing that cannot run on a part; they run when the whole object completes.

Validation of a part runs on the Python value the incremental parser built. Python-mode
validation accepts a subset of what JSON-mode accepts for such values (strict mode rejects a
string for a ``datetime`` in Python mode only), so a rejected value is retried in JSON mode:
the result is always what ``model_validate_json`` would give.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import BaseModel, TypeAdapter
from pydantic_core import SchemaValidator, ValidationError

__all__ = ["LIST", "MODEL", "OPAQUE", "STR", "Field", "ModelInfo", "Shape", "compile_shape"]

MODEL, LIST, STR, OPAQUE = range(4)

_to_json = pydantic_core.to_json


class Field:
    """One field of a model: its Python name and the shape of its value."""

    __slots__ = ("name", "shape")

    def __init__(self, name: str, shape: Shape) -> None:
        self.name = name
        self.shape = shape


class ModelInfo:
    """The fields of one model class, keyed by the JSON key that fills them (alias or name)."""

    __slots__ = ("cls", "fields", "forbid_extra")

    def __init__(self, cls: type[BaseModel], forbid_extra: bool) -> None:
        self.cls = cls
        self.fields: dict[str, Field] = {}
        self.forbid_extra = forbid_extra


class Shape:
    """How one value is shown while incomplete, and validated once complete."""

    __slots__ = ("item", "kind", "model", "validator")

    def __init__(
        self,
        kind: int,
        validator: SchemaValidator | None,
        *,
        model: ModelInfo | None = None,
        item: Shape | None = None,
    ) -> None:
        self.kind = kind
        #: ``None`` when pydantic could not build a validator for this part alone: the value
        #: is then never shown before the whole document validates.
        self.validator = validator
        self.model = model
        self.item = item

    def validate(self, value: Any) -> Any:
        """The validated value, exactly as JSON-mode validation would produce it.

        :raises ValidationError: the value does not validate.
        :raises LookupError: no validator for this part alone (see ``validator``).
        """
        validator = self.validator
        if validator is None:
            raise LookupError("no standalone validator")
        try:
            return validator.validate_python(value)
        except ValidationError:
            return validator.validate_json(_to_json(value))


_cache: dict[Any, Shape] = {}
_CACHE_MAX = 256


def compile_shape(tp: Any) -> Shape:
    """The shape of a ``BaseModel`` class, a ``TypeAdapter``, or any type pydantic can adapt.

    Cached per type (building per-field validators costs about as much as building the
    model's own validator).
    """
    try:
        cached = _cache.get(tp)
    except TypeError:  # unhashable type expression
        cached = None
    if cached is not None:
        return cached
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        schema: Any = tp.__pydantic_core_schema__
        validator: Any = tp.__pydantic_validator__
    else:
        adapter = tp if isinstance(tp, TypeAdapter) else TypeAdapter(tp)
        schema = adapter.core_schema
        validator = adapter.validator
    compiler = _Compiler(schema)
    shape = compiler.shape(schema, None, validator if isinstance(validator, SchemaValidator)
                           else None)
    try:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[tp] = shape
    except TypeError:
        pass
    return shape


_WRAPPERS = {"default", "nullable", "function-after"}


class _Compiler:
    """Walks one core schema; definitions are shared, recursive models compiled once."""

    def __init__(self, root: Any) -> None:
        self.defs: dict[str, Any] = {}
        self.models: dict[type[BaseModel], ModelInfo] = {}
        self._collect(root)
        self.def_list = list(self.defs.values())

    def _collect(self, node: Any) -> None:
        """Every schema carrying a ``ref``, wherever it is (``definition-ref`` targets)."""
        stack = [node]
        seen: set[int] = set()
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                if id(item) in seen:
                    continue
                seen.add(id(item))
                ref = item.get("ref")
                if isinstance(ref, str) and "type" in item:
                    self.defs.setdefault(ref, item)
                stack.extend(v for k, v in item.items() if k not in ("cls", "function"))
            elif isinstance(item, list):
                stack.extend(item)

    def _resolve(self, schema: Any) -> Any:
        for _ in range(64):
            kind = schema.get("type")
            if kind == "definitions":
                schema = schema["schema"]
            elif kind == "definition-ref":
                target = self.defs.get(schema["schema_ref"])
                if target is None:
                    return {"type": "any"}
                schema = target
            else:
                return schema
        return {"type": "any"}

    def _validator(self, schema: Any, config: Any) -> SchemaValidator | None:
        resolved = self._resolve(schema)
        if resolved.get("type") == "model" and not resolved.get("custom_init"):
            cls = resolved.get("cls")
            if isinstance(cls, type) and issubclass(cls, BaseModel):
                own = cls.__pydantic_validator__
                if isinstance(own, SchemaValidator):
                    return own
        wrapped = schema
        if self.def_list:
            wrapped = {"type": "definitions", "schema": schema, "definitions": self.def_list}
        try:
            return SchemaValidator(wrapped, config)
        except Exception:  # a part pydantic cannot validate alone: show it only at the end
            return None

    def shape(self, schema: Any, config: Any, validator: SchemaValidator | None = None) -> Shape:
        if validator is None:
            validator = self._validator(schema, config)
        inner = self._resolve(schema)
        for _ in range(64):
            kind = inner.get("type")
            if kind in _WRAPPERS:
                inner = self._resolve(inner["schema"])
            else:
                break
        kind = inner.get("type")
        if kind == "model":
            info = self._model(inner)
            if info is not None:
                return Shape(MODEL, validator, model=info)
        elif kind == "list":
            items = inner.get("items_schema", {"type": "any"})
            return Shape(LIST, validator, item=self.shape(items, config))
        elif kind == "str":
            return Shape(STR, validator)
        return Shape(OPAQUE, validator)

    def _model(self, schema: Any) -> ModelInfo | None:
        cls = schema.get("cls")
        fields_schema = self._resolve(schema.get("schema", {}))
        while fields_schema.get("type") == "function-after":
            fields_schema = self._resolve(fields_schema["schema"])
        if (
            not isinstance(cls, type)
            or not issubclass(cls, BaseModel)
            or schema.get("root_model")
            or fields_schema.get("type") != "model-fields"
        ):
            return None
        info = self.models.get(cls)
        if info is not None:
            return info
        config = schema.get("config") or {}
        info = self.models[cls] = ModelInfo(cls, config.get("extra_fields_behavior") == "forbid")
        by_name = bool(config.get("validate_by_name") or config.get("populate_by_name"))
        by_alias = config.get("validate_by_alias", True)
        for name, field in fields_schema["fields"].items():
            entry = Field(name, self.shape(field["schema"], config))
            alias = field.get("validation_alias")
            if isinstance(alias, str) and by_alias:
                info.fields[alias] = entry
                if by_name:
                    info.fields.setdefault(name, entry)
            else:
                if isinstance(alias, list) and by_alias:  # AliasChoices / AliasPath
                    for path in alias:
                        if isinstance(path, list) and len(path) == 1 and isinstance(path[0], str):
                            info.fields.setdefault(path[0], entry)
                if alias is None or by_name or not by_alias:
                    info.fields.setdefault(name, entry)
        return info
