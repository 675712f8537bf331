"""Typed partial objects from JSON text that is still arriving, in linear time.

:class:`ObjectBuilder` is fed the text deltas of a structured reply (``response_format``
content, or a tool call's arguments) and keeps a *live* partial instance of the user's type:

* a field is set (and in ``model_fields_set``) from the moment its value starts; a complete
  field holds the value validated by that field's own pydantic validator, a string still
  arriving holds the text so far, a nested model or list still arriving holds its own live
  partial object; fields not started are absent from ``model_fields_set`` (required ones are
  not set at all, ones with a default hold the default, exactly as ``model_construct`` does);
* lists grow by complete, validated items, followed by the item still arriving when it can
  be shown (a model, a list or a string); numbers, literals, enums and other "opaque" values
  appear only once complete;
* a value reported complete never changes later, and the final object equals
  ``Model.model_validate_json(text)``.

Why ``model_construct`` of the user's own class rather than a derived all-optional model:
``isinstance`` and static types stay ``Model`` (``ObjectBuilder[Model]`` yields ``Model``),
nested classes stay the user's classes, and pydantic already has the vocabulary for "which
fields arrived" (``model_fields_set``, ``model_dump(exclude_unset=True)``). Model-level
``mode="after"`` validators cannot run on half an object; they run when it completes.

Why live objects: handing out an independent deep copy after every delta costs the size of the
whole object each time, which is quadratic for the common "list that grows" reply. The builder
keeps one partial object and updates it in place, so a partial object after every delta costs
O(bytes of the delta + nesting depth) (plus the length of a string still arriving, which no
design can avoid). The object only ever moves forward; :meth:`ObjectBuilder.snapshot` gives a
view that later text never changes by copying only the containers still open, sharing every
complete value: its Python work is per open container, not per value, and what grows with the
object is one C-level copy of an open list's item pointers (about a nanosecond an item).

The engine is :class:`fluxstream._partial_json.PartialJSON`, which reads each character once;
this module mirrors only its open path (the containers still open), so completed values are
validated exactly once where they complete (and once more as part of each mirrored enclosing
object when that completes, which is bounded by the nesting depth of the type).

Bad input never raises from :meth:`ObjectBuilder.feed`: text that is not JSON, JSON that is
not the expected object, or a value that fails validation stops the partial object at its last
valid state and is recorded (``problem``, ``errors``); :meth:`ObjectBuilder.finish` then raises
:class:`~fluxstream.errors.ParseError`. A markdown fence around the JSON (```` ```json ````) is
stripped.

This is the engine behind :mod:`fluxstream.structured` (where users import it). It sits in the
sans-IO core, below :mod:`fluxstream._reply`, because ``Reply.parse(Model)`` runs it: the reply
model imports it, and nothing here imports the reply, the events or the structured package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import islice
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, TypeAdapter, ValidationError

from .._partial_json import PartialJSON
from .base_errors import ParseError
from .object_shapes import LIST, MODEL, STR, Shape, compile_shape

__all__ = [
    "ObjectBuilder",
    "StructuredResult",
    "parse_structured",
    "partial_object",
    "after_fence",
    "strip_fences",
]

T = TypeVar("T")

_FENCE_LINE = re.compile(r"```[A-Za-z0-9_+-]*[ \t]*\r?")
_FENCE_MAX = 64  # a longer first line that starts with a backtick is not a fence
_FOLD = 256
_VALUE_START = frozenset('{["-0123456789')

_setattr = object.__setattr__


class _Stepper(PartialJSON):
    """The incremental parser, stepping through every container so that the open path is
    always visible (no buffering of small unclosed containers)."""

    __slots__ = ()
    buffer_max = 0


@dataclass(frozen=True)
class StructuredResult(Generic[T]):
    """How a structured reply ended: never a silent half object.

    ``complete`` is true only when the whole document arrived and validated; then ``value``
    is the validated instance. Otherwise ``value`` is the last partial object (``None`` if
    nothing usable arrived) and ``reason`` says why it is partial (``"truncated"``,
    ``"length"``, ``"refusal"``, ...); ``refusal`` holds the model's refusal text, if any.
    """

    value: T | None
    complete: bool
    reason: str
    text: str
    refusal: str | None = None


def after_fence(text: str) -> tuple[str, str]:
    """The start of a streamed JSON document: ``(held, rest)``, ``rest`` being ``text``
    without leading whitespace and a markdown fence line (```` ```json ````), ``held`` the
    start of a fence line whose newline has not come yet (feed it again with what follows)."""
    stripped = text.lstrip()
    if stripped[:1] == "`":
        newline = stripped.find("\n")
        if newline < 0 and len(stripped) <= _FENCE_MAX:
            return stripped, ""  # wait for the rest of the fence line
        if 0 <= newline <= _FENCE_MAX and _FENCE_LINE.fullmatch(stripped[:newline]):
            return "", stripped[newline + 1 :].lstrip()
    return "", stripped


def strip_fences(text: str) -> str:
    """``text`` without surrounding whitespace and a markdown code fence around it."""
    text = text.strip()
    if text.startswith("`"):
        newline = text.find("\n")
        if 0 < newline <= _FENCE_MAX and _FENCE_LINE.fullmatch(text[:newline]):
            text = text[newline + 1 :].rstrip()
            if text.endswith("```"):
                text = text[:-3].rstrip()
    return text


def _validator_of(tp: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__pydantic_validator__
    adapter = tp if isinstance(tp, TypeAdapter) else TypeAdapter(tp)
    return adapter.validator


def partial_object(text: str, tp: Any) -> Any:
    """The partial object of ``tp`` for ``text`` (a prefix of the JSON), in one pass: for a
    snapshot such as ``reply.choices[0].tool_calls[0].arguments``. Live streams should keep
    one :class:`ObjectBuilder` (or a :class:`~fluxstream.structured.StructuredTracker`) instead."""
    builder: ObjectBuilder[Any] = ObjectBuilder(tp)
    return builder.feed(text)


def parse_structured(text: str, tp: Any) -> Any:
    """The non-streamed parse: ``text`` (fences stripped) validated as ``tp``.

    :raises ParseError: not JSON, or it does not validate.
    """
    try:
        return _validator_of(tp).validate_json(strip_fences(text))
    except ValidationError as exc:
        raise _parse_error(text, exc, None) from exc


def _parse_error(text: str, exc: ValidationError, partial: Any) -> ParseError:
    errors = exc.errors(include_url=False)
    json_error = any(e.get("type") == "json_invalid" for e in errors)
    if json_error:
        reason = "incomplete" if any("EOF" in str(e.get("msg", "")) for e in errors) else (
            "invalid_json"
        )
    elif any(e.get("type") in ("model_type", "model_attributes_type", "dict_type")
             and not e.get("loc") for e in errors):
        reason = "not_an_object"
    else:
        reason = "schema"
    return ParseError(
        f"structured output does not parse ({reason}): {errors[0].get('msg') if errors else exc}",
        text=text,
        errors=errors,
        partial=partial,
        reason=reason,
    )


class _Node:
    """One open container of the document that the partial object mirrors."""

    __slots__ = ("child", "done", "opened", "out", "pending", "raw", "seen", "shape", "tail")

    def __init__(self, shape: Shape, raw: Any, out: Any) -> None:
        self.shape = shape
        self.raw = raw  # the parser's container (grows in place)
        self.out = out  # the live partial model instance, or the live list
        self.done = 0  # children of ``raw`` already validated into ``out``
        self.pending = False  # (lists) ``out`` ends with the item still arriving
        self.tail = -1  # length of the open string last shown here
        self.seen = -1  # len(raw) at the last update
        self.child: Any = None  # the open child's partial object placed at the last update
        #: A child of ``raw`` was open at the last update. Needed besides ``seen``: a child the
        #: object cannot show while it arrives (a dict, a union ...) is in ``raw`` from its
        #: first character, so only this says when it completed.
        self.opened = False


def _new_instance(cls: type[BaseModel]) -> BaseModel:
    try:
        return cls.model_construct()
    except Exception:  # a model_post_init that needs every field: build it bare
        obj = cls.__new__(cls)
        _setattr(obj, "__dict__", {})
        _setattr(obj, "__pydantic_fields_set__", set())
        _setattr(obj, "__pydantic_extra__", None)
        _setattr(obj, "__pydantic_private__", None)
        return obj


def _copy_container(obj: Any) -> Any:
    """A shallow copy of an open container (a list, or a partial model instance whose
    ``__dict__`` and fields set are its own): its children are shared."""
    if type(obj) is list:
        return obj[:]
    cls: type[BaseModel] = type(obj)
    new = cls.__new__(cls)
    extra = obj.__pydantic_extra__
    private = obj.__pydantic_private__
    _setattr(new, "__dict__", dict(obj.__dict__))
    _setattr(new, "__pydantic_fields_set__", set(obj.__pydantic_fields_set__))
    _setattr(new, "__pydantic_extra__", None if extra is None else dict(extra))
    _setattr(new, "__pydantic_private__", None if private is None else dict(private))
    return new


def _replace_child(parent: Any, child: Any, child_copy: Any) -> None:
    """Put ``child_copy`` where ``parent`` (a copy) holds the open container ``child``: a
    list's last item, or one of a model's fields."""
    if type(parent) is list:
        if parent and parent[-1] is child:
            parent[-1] = child_copy
        return
    values = parent.__dict__
    for name, value in values.items():
        if value is child:
            values[name] = child_copy
            return


class _Invalid(Exception):
    """Internal: the child at ``key`` of a container failed validation."""

    def __init__(self, key: Any, error: ValidationError) -> None:
        self.key = key
        self.error = error


class _Stop(Exception):
    """Internal: the document stopped being valid (``errors``) or checkable (no errors)."""

    def __init__(self, problem: str | None, errors: list[Any]) -> None:
        self.problem = problem
        self.errors = errors


class ObjectBuilder(Generic[T]):
    """Feed the text of a structured reply; read a live, typed partial object at any time.

    ``tp`` is a ``BaseModel`` class, a ``TypeAdapter``, or any type pydantic can adapt (a
    list of models, a dataclass ...). See the module docstring for what a partial object
    holds and what it costs.
    """

    @overload
    def __init__(self, tp: type[T]) -> None: ...
    @overload
    def __init__(self, tp: TypeAdapter[T]) -> None: ...
    @overload
    def __init__(self, tp: Any) -> None: ...

    def __init__(self, tp: Any) -> None:
        self.type = tp
        self._shape = compile_shape(tp)
        self._parser = _Stepper()
        self._nodes: list[_Node] = []
        # The text so far: recent deltas, and older ones folded into chunks of ``_FOLD``
        # deltas each (never re-joined while streaming, so keeping the text stays linear).
        self._parts: list[str] = []
        self._chunks: list[str] = []
        self._lead = ""  # text held until we know whether it opens a markdown fence
        self._started = False  # the first character of the JSON itself was seen
        self._value: Any = None
        #: The document is complete and ``value`` is the validated object.
        self.complete = False
        #: Why partial objects stopped early (``None`` while all is well).
        self.problem: str | None = None
        #: pydantic's errors for a value that failed validation mid-way.
        self.errors: list[Any] = []
        self._stopped = False
        #: Bumped whenever the partial object changed or a value in it became complete (for
        #: "only yield on change"; a string shown in full and then complete bumps it twice).
        self.version = 0

    # ------------------------------------------------------------------ reading

    @property
    def value(self) -> T | None:
        """The live partial object (the validated object once ``complete``)."""
        value: T | None = self._value
        return value

    @property
    def text(self) -> str:
        """Everything fed so far."""
        if self._parts:
            self._chunks.append("".join(self._parts))
            self._parts = []
        if len(self._chunks) > 1:
            self._chunks = ["".join(self._chunks)]
        return self._chunks[0] if self._chunks else ""

    def snapshot(self) -> T | None:
        """The partial object as it is now, which later text never changes: the containers
        still open are copied, complete values are shared (treat the snapshot as read-only).

        Only the containers still being filled in (:meth:`open_objects`) are copied; every
        complete value is shared with :attr:`value` and with other snapshots, as it never
        changes again. So a snapshot costs the open containers (a C-level copy of an open
        list's item pointers, the fields of an open model), not the whole object, and a
        snapshot after every delta stays linear in the reply. Once the document is complete
        (or stopped), the snapshot *is* :attr:`value`: nothing changes any more.

        Treat a snapshot as read-only. Changing a complete value in place (an item of a
        list, a nested model that closed) shows in every snapshot and live object sharing it;
        ``copy.deepcopy`` the snapshot to edit it. The builder never reads its objects back,
        so no change to a snapshot alters later partial objects or the final value.
        """
        value = self._value
        nodes = self._nodes
        if not nodes or nodes[0].out is not value:
            return value  # type: ignore[no-any-return]
        copies = [_copy_container(node.out) for node in nodes]
        for parent, child, child_copy in zip(copies, nodes[1:], copies[1:], strict=False):
            _replace_child(parent, child.out, child_copy)
        return copies[0]  # type: ignore[no-any-return]

    def open_objects(self) -> list[Any]:
        """The containers of the partial object still being filled in, root first (partial
        model instances and lists; each holds the next as its last item or one of its
        fields): the only parts that later text changes in place. Every other value in the
        partial object is complete and never changes, which is what makes
        :meth:`snapshot` cheap."""
        return [node.out for node in self._nodes]

    def open_path(self) -> tuple[str | int, ...] | None:
        """Where the value still arriving sits (``("items", 3, "name")``), ``()`` for the
        document itself, ``None`` once complete or stopped. Every value of the partial object
        not on this path is complete."""
        if self.complete or self._stopped:
            return None
        stack, keys = self._parser.open_containers()
        path: list[str | int] = []
        for depth, raw in enumerate(stack):
            if type(raw) is list:
                path.append(len(raw) - 1 if depth + 1 < len(stack) else len(raw))
            elif keys[depth] is not None:
                path.append(keys[depth])
        return tuple(path)

    # ------------------------------------------------------------------ feeding

    def feed(self, text: str) -> T | None:
        """Read one delta; return the (live) partial object. Never raises for bad input."""
        if not text:
            return self._value  # type: ignore[no-any-return]
        parts = self._parts
        parts.append(text)
        if len(parts) >= _FOLD:
            self._chunks.append("".join(parts))
            self._parts = []
        if self._stopped or self.complete:
            return self._value  # type: ignore[no-any-return]
        if not self._started:
            text = self._lead_in(text)
            if not text:
                return self._value  # type: ignore[no-any-return]
        parser = self._parser
        parser.feed(text)
        try:
            if parser.complete:
                self._close()
            else:
                self._sync()
                if parser.failed:
                    raise _Stop("invalid JSON", [])
        except _Stop as stop:
            self._stop(stop.problem, stop.errors)
        return self._value  # type: ignore[no-any-return]

    def _lead_in(self, text: str) -> str:
        """Strip a leading markdown fence line; check the first character of the JSON."""
        self._lead, stripped = after_fence(self._lead + text)
        if not stripped:
            return ""
        kind = self._shape.kind
        first = stripped[0]
        if (kind == MODEL and first != "{") or (kind == LIST and first != "["):
            if first in _VALUE_START or any(
                word.startswith(stripped[:5]) or stripped.startswith(word)
                for word in ("true", "false", "null")
            ):
                self._stop("not an object" if kind == MODEL else "not an array", [])
            else:
                self._stop("invalid JSON", [])
            return ""
        self._started = True
        return stripped

    def _stop(self, problem: str | None, errors: list[Any]) -> None:
        self._stopped = True
        self.problem = problem
        self.errors = errors
        self._nodes = []

    def _close(self) -> None:
        """The document closed: validate it whole (the complete object replaces the partial)."""
        try:
            value = self._shape.validate(self._parser.value())
        except ValidationError as exc:
            raise _Stop("schema violation", exc.errors(include_url=False)) from None
        except Exception:  # not checkable here; finish() decides on the whole text
            raise _Stop(None, []) from None
        self._value = value
        self.complete = True
        self._nodes = []
        self.version += 1

    # ------------------------------------------------------------------ the open path

    def _sync(self) -> None:
        """Bring the partial object up to date with the parser: O(depth + new children)."""
        stack, keys = self._parser.open_containers()
        nodes = self._nodes
        depth = len(stack)
        # The parser's stack only grows and shrinks at its top, so a node still matching its
        # container means every node below it matches too: scan down from the top, which
        # costs the levels that changed, not the depth.
        common = min(len(nodes), depth)
        while common and nodes[common - 1].raw is not stack[common - 1]:
            common -= 1
        if common < len(nodes):
            del nodes[common:]  # closed: their parents now hold them as complete children
        if not nodes:
            if not stack:
                return
            root = self._new_node(self._shape, stack[0])
            if root is None:
                return
            nodes.append(root)
            if self._value is None:
                self._value = root.out
                self.version += 1
        while len(nodes) < depth:
            shape = self._child_shape(nodes[-1], keys[len(nodes) - 1])
            node = None if shape is None else self._new_node(shape, stack[len(nodes)])
            if node is None:
                break
            nodes.append(node)
        tail = self._parser.open_string() if len(nodes) == depth else None
        last = len(nodes) - 1
        for d in range(last, -1, -1):
            node = nodes[d]
            child = nodes[d + 1].out if d < last else None
            here = tail if d == depth - 1 else None
            size = len(node.raw)
            child_open = d + 1 < depth
            if (size == node.seen and child is node.child and here is None
                    and child_open == node.opened):
                # Unchanged here, so unchanged above: a parent only changes when this
                # container closes (and then this node would be gone).
                break
            node.seen = size
            node.child = child
            node.opened = child_open
            try:
                if node.shape.kind == LIST:
                    self._update_list(node, child_open, child, here)
                else:
                    self._update_model(node, child_open, child, keys[d], here)
            except _Invalid as invalid:
                prefix = (*self._path_to(d, keys), invalid.key)
                errors = []
                for error in invalid.error.errors(include_url=False):
                    error["loc"] = (*prefix, *error.get("loc", ()))
                    errors.append(error)
                raise _Stop("schema violation", errors) from None
            except _Stop:
                raise
            except Exception:  # a validator that needs the whole object: stop showing parts
                raise _Stop(None, []) from None

    def _path_to(self, depth: int, keys: list[Any]) -> tuple[Any, ...]:
        path: list[Any] = []
        for d in range(depth):
            node = self._nodes[d]
            path.append(node.done if node.shape.kind == LIST else keys[d])
        return tuple(path)

    @staticmethod
    def _child_shape(parent: _Node, key: Any) -> Shape | None:
        shape = parent.shape
        if shape.kind == LIST:
            return shape.item
        assert shape.model is not None
        field = shape.model.fields.get(key)
        return None if field is None else field.shape

    def _new_node(self, shape: Shape, raw: Any) -> _Node | None:
        if shape.kind == MODEL and type(raw) is dict:
            assert shape.model is not None
            return _Node(shape, raw, _new_instance(shape.model.cls))
        if shape.kind == LIST and type(raw) is list:
            return _Node(shape, raw, [])
        return None

    def _update_list(self, node: _Node, child_open: bool, child: Any, tail: str | None) -> None:
        raw, out = node.raw, node.out
        complete = len(raw) - child_open
        item = node.shape.item
        assert item is not None
        new = []  # validate first, change the object after: it stays valid if this fails
        for index in range(node.done, complete):
            try:
                new.append(item.validate(raw[index]))
            except ValidationError as exc:
                raise _Invalid(index, exc) from None
        if node.pending:
            out.pop()
            node.pending = False
        if new:
            out += new
            node.done = complete
            node.tail = -1
            self.version += 1
        if child is not None:
            out.append(child)
            node.pending = True
        elif tail is not None and item.kind == STR:
            out.append(tail)
            node.pending = True
            if len(tail) != node.tail:
                node.tail = len(tail)
                self.version += 1

    def _update_model(
        self, node: _Node, child_open: bool, child: Any, key: Any, tail: str | None
    ) -> None:
        raw = node.raw
        obj = node.out
        values = obj.__dict__
        fields_set = obj.__pydantic_fields_set__
        info = node.shape.model
        assert info is not None
        complete = len(raw) - child_open
        if complete > node.done:
            fields = info.fields
            new = []
            for name in islice(raw, node.done, complete):
                field = fields.get(name)
                if field is None:
                    if info.forbid_extra:
                        raise _Stop("schema violation", [{
                            "type": "extra_forbidden", "loc": (*self._path_to(
                                self._nodes.index(node), self._parser.open_containers()[1]),
                                name),
                            "msg": "Extra inputs are not permitted", "input": raw[name],
                        }])
                    continue
                try:
                    new.append((field.name, field.shape.validate(raw[name])))
                except ValidationError as exc:
                    raise _Invalid(name, exc) from None
            for name, value in new:
                values[name] = value
                fields_set.add(name)
            node.done = complete
            node.tail = -1
            self.version += 1
        if key is None:
            return
        field = info.fields.get(key)
        if field is None:
            return
        if child is not None:
            if values.get(field.name) is not child:
                values[field.name] = child
                fields_set.add(field.name)
                self.version += 1
        elif tail is not None and field.shape.kind == STR and len(tail) != node.tail:
            values[field.name] = tail
            fields_set.add(field.name)
            node.tail = len(tail)
            self.version += 1

    # ------------------------------------------------------------------ the end

    def finish(
        self, *, truncated: bool = False, reason: str | None = None, refusal: str | None = None
    ) -> StructuredResult[T]:
        """How the reply ended, as a result or a :class:`~fluxstream.errors.ParseError`.

        ``truncated``: the reply stopped early (the stream was cut, or the model hit its
        token limit; ``reason`` names it). A document that never completed then gives the
        last partial object with ``complete=False``; a document that completed is validated
        as usual. ``refusal``: the model refused; the result carries the refusal text.

        :raises ParseError: the text is not JSON or not the expected shape, a value failed
            validation (mid-way or at the end), or the reply claims to be whole but the
            document is incomplete.
        """
        text = self.text
        if refusal:
            return StructuredResult(None, False, "refusal", text, refusal)
        if truncated and not self.complete and not self._parser.complete:
            if self.problem is not None:
                raise ParseError(
                    f"structured output stopped being valid: {self.problem}",
                    text=text, errors=self.errors, partial=self.value,
                    reason="schema" if self.errors else (
                        "not_an_object" if self.problem.startswith("not an") else "invalid_json"
                    ),
                )
            return StructuredResult(self.value, False, reason or "truncated", text)
        try:
            value = _validator_of(self.type).validate_json(strip_fences(text))
        except ValidationError as exc:
            raise _parse_error(text, exc, self.value) from exc
        self._value = value
        self.complete = True
        return StructuredResult(value, True, "complete", text)
