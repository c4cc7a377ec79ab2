"""The JSON form of the runtime's records, derived from their fields by pydantic.

Records (the job status, control requests and outcomes, handles, task acks, manifest
parts, the query fingerprint, CLI documents) are frozen dataclasses. :func:`to_json`
writes one as a JSON object and :func:`from_json` reads it back, both through a pydantic
``TypeAdapter`` of the record's class (built on first use, then shared): every field
under its own name, enums as their values, tuples as lists, nested records as objects.

Reading follows the field annotations, and the annotated types of this module carry the
wire rules: :data:`Count` is a JSON integer of at least 0 (never a boolean or a float),
:data:`Int` any JSON integer, :data:`Finite` a finite number (an integer reads as a
float), :data:`Text` a string, :data:`Flag` a boolean; an enum field takes one of its
values. Keys a reader does not know are ignored (a newer writer may add fields within a
format version); a missing field takes its default, and a field without one is required.
:func:`json_record` declares the rest per class: fields that must be present although
they have a default, fields whose ``null`` reads as their default, properties written
with the fields (a kind tag, a version, a label), and the record kind errors name.

Errors: :func:`from_json` raises :class:`RecordError` (a ``ValueError``) naming the
record kind and the field (``job status is missing field 'epoch'``, ``job status has an
invalid field: last_checkpoint.id must be an integer, got '41'``); a value that breaks a
record's invariant (its ``__post_init__`` raises
:class:`~gic_runtime.errors.ConfigurationError`) is an invalid field too. pydantic's own
errors never reach callers. :func:`to_json` raises ``ConfigurationError`` for a value
JSON cannot carry (an object in a free-form field).

Thread-safety: adapters are immutable once built; two threads building the same one
build equal adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Annotated, Any, Final, TypeVar, cast, get_args

from pydantic import Field, GetCoreSchemaHandler, TypeAdapter, ValidationError, WrapValidator
from pydantic_core import ErrorDetails, PydanticCustomError, PydanticSerializationError
from pydantic_core import core_schema as cs

from gic_runtime.errors import ConfigurationError, CorruptFileError

__all__ = [
    "Count",
    "Finite",
    "Flag",
    "Int",
    "KeyedList",
    "NonEmptyText",
    "NoneIfInvalid",
    "RecordError",
    "Text",
    "from_json",
    "from_stored_json",
    "json_record",
    "to_json",
    "to_json_bytes",
]

_T = TypeVar("_T")

Count = Annotated[int, Field(strict=True, ge=0)]
"""A JSON integer of at least 0 (a count, an id, a size)."""
Int = Annotated[int, Field(strict=True)]
"""Any JSON integer."""
Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A finite JSON number; an integer reads as a float."""
Text = Annotated[str, Field(strict=True)]
"""A JSON string."""
NonEmptyText = Annotated[str, Field(strict=True, min_length=1)]
"""A JSON string of at least one character."""
Flag = Annotated[bool, Field(strict=True)]
"""A JSON boolean (not 0 or 1)."""

_SPEC: Final = "__gic_json__"
_HOOK: Final = "__get_pydantic_core_schema__"
_MISSING: Final = "gic_missing_field"
_VALUE_CHARS: Final = 60


class RecordError(ValueError):
    """A JSON record is not what its kind requires; the message names the kind and the
    field (``field``, dotted: ``last_checkpoint.id``, ``changelog[1].offset``)."""

    def __init__(self, message: str, *, kind: str, field: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.field = field


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    kind: str
    required: tuple[str, ...]
    null_is_default: tuple[str, ...]
    computed: tuple[str, ...]

    def validate(self, data: Any, handler: cs.ValidatorFunctionWrapHandler) -> Any:
        if isinstance(data, dict) and any(data.get(k, 0) is None for k in self.null_is_default):
            data = {k: v for k, v in data.items() if v is not None or k not in self.null_is_default}
        value = handler(data)
        if isinstance(data, dict):  # not an instance of the record's class
            for name in self.required:
                if name not in data:
                    raise PydanticCustomError(_MISSING, "missing", {"field": name})
        return value

    def serialize(self, value: Any, handler: cs.SerializerFunctionWrapHandler) -> Any:
        out = handler(value)
        for name in self.computed:
            item = getattr(value, name)
            out[name] = item.value if isinstance(item, Enum) else item
        return out


def json_record(
    kind: str,
    *,
    required: Iterable[str] = (),
    null_is_default: Iterable[str] = (),
    computed: Iterable[str] = (),
) -> Callable[[type[_T]], type[_T]]:
    """Class decorator (above ``@dataclass``) declaring a record's JSON form beyond its
    fields: ``kind`` names the record in errors; ``required`` fields must be present
    although they have a default; a ``null`` in a ``null_is_default`` field reads as
    its default; ``computed`` attributes (properties) are written after the fields and
    ignored when read."""
    spec = _Spec(kind, tuple(required), tuple(null_is_default), tuple(computed))

    def hook(cls: type[Any], source: Any, handler: GetCoreSchemaHandler) -> cs.CoreSchema:
        schema = handler(source)
        if spec.computed:
            serialization = cs.wrap_serializer_function_ser_schema(spec.serialize)
            schema = cast("cs.CoreSchema", {**schema, "serialization": serialization})
        if spec.required or spec.null_is_default:
            schema = cs.no_info_wrap_validator_function(spec.validate, schema)
        return schema

    def decorate(cls: type[_T]) -> type[_T]:
        fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = {*spec.required, *spec.null_is_default} - fields
        unknown |= {name for name in spec.computed if not hasattr(cls, name)}
        if unknown:
            raise TypeError(f"{cls.__name__} has no fields or properties {sorted(unknown)}")
        setattr(cls, _SPEC, spec)
        setattr(cls, _HOOK, classmethod(hook))
        return cls

    return decorate


@dataclasses.dataclass(frozen=True, slots=True)
class KeyedList:
    """Annotation of a ``Mapping[K, V]`` field written as the JSON list of its values in
    ascending key order and read back keyed by each value's attribute ``key`` (a later
    value of the same key wins)."""

    key: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> cs.CoreSchema:
        values = handler.generate_schema(list[get_args(source)[1]])  # type: ignore[misc]
        key = self.key

        def keyed(items: list[Any]) -> dict[Any, Any]:
            return {getattr(item, key): item for item in items}

        def listed(mapping: Mapping[Any, Any]) -> list[Any]:
            return [mapping[k] for k in sorted(mapping)]

        return cs.no_info_after_validator_function(
            keyed,
            values,
            serialization=cs.plain_serializer_function_ser_schema(listed, return_schema=values),
        )


def _none_if_invalid(value: Any, handler: cs.ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


NoneIfInvalid: Final = WrapValidator(_none_if_invalid)
"""Annotation of an optional field that reads as ``None`` when it is malformed (a part
a reader can do without)."""


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def _kind(cls: type[Any]) -> str:
    """The record kind of ``cls`` as errors name it."""
    spec: _Spec | None = getattr(cls, _SPEC, None)
    return spec.kind if spec is not None else cls.__name__


def to_json(value: Any) -> dict[str, Any]:
    """``value`` (a record) as a JSON object (plain dicts, lists, strings, numbers).

    Raises :class:`ConfigurationError` when a free-form field holds something JSON
    cannot carry."""
    try:
        out: dict[str, Any] = _adapter(type(value)).dump_python(value, mode="json", warnings=False)
    except PydanticSerializationError as exc:
        raise ConfigurationError(
            f"{_kind(type(value))} is not serializable as JSON: {exc}; use plain JSON "
            "values (strings, finite numbers, booleans, lists, objects)"
        ) from None
    return out


def to_json_bytes(value: Any) -> bytes:
    """:func:`to_json` serialized as compact UTF-8 JSON in one step (no indentation, keys
    in field order): for records on a hot path. Raises ``ConfigurationError`` as
    :func:`to_json` does."""
    try:
        out: bytes = _adapter(type(value)).dump_json(value, warnings=False)
    except PydanticSerializationError as exc:
        raise ConfigurationError(
            f"{_kind(type(value))} is not serializable as JSON: {exc}; use plain JSON "
            "values (strings, finite numbers, booleans, lists, objects)"
        ) from None
    return out


def from_json(cls: type[_T], data: Any) -> _T:
    """The record of class ``cls`` that the parsed JSON ``data`` holds.

    Raises :class:`RecordError` naming the record kind and the first field that is
    missing or invalid."""
    if isinstance(data, Mapping) and not isinstance(data, dict):
        data = dict(data)  # a read-only view (a manifest's free-form parts)
    try:
        value: _T = _adapter(cls).validate_python(data)
    except ValidationError as exc:
        raise _record_error(_kind(cls), exc) from None
    except ConfigurationError as exc:
        raise RecordError(f"{_kind(cls)} has an invalid field: {exc}", kind=_kind(cls)) from exc
    return value


def from_stored_json(cls: type[_T], data: Any, *, uri: str) -> _T:
    """:func:`from_json` for the body of the file at ``uri``: errors are
    :class:`~gic_runtime.errors.CorruptFileError` naming the file."""
    try:
        return from_json(cls, data)
    except RecordError as exc:
        raise CorruptFileError(str(exc), uri=uri) from exc


# --- messages ------------------------------------------------------------------------


def _record_error(kind: str, exc: ValidationError) -> RecordError:
    errors = exc.errors(include_url=False)
    error = errors[0]
    loc = list(error["loc"])
    ctx = error.get("ctx") or {}
    if error["type"] == _MISSING:
        loc.append(ctx["field"])
    field = _path(loc)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if error["type"] in ("missing", _MISSING):
        return RecordError(f"{kind} is missing field {field!r}{more}", kind=kind, field=field)
    if not field:
        return RecordError(f"{kind} {_problem(error)}{more}", kind=kind)
    return RecordError(
        f"{kind} has an invalid field: {field} {_problem(error)}{more}", kind=kind, field=field
    )


def _path(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_EXPECTED: Final = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a finite number",
    "float_parsing": "a finite number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "dataclass_type": "a JSON object",
    "dict_type": "a JSON object",
    "mapping_type": "a JSON object",
    "list_type": "a JSON list",
    "tuple_type": "a JSON list",
}


def _shown(value: Any) -> str:
    if isinstance(value, dict | list):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def _problem(error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error["input"]
    if kind in _EXPECTED:
        return f"must be {_EXPECTED[kind]}, got {_shown(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {_shown(value)}"
    if kind == "enum":
        return f"must be {ctx['expected']}, got {_shown(value)}"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} entries, got {ctx['actual_length']}"
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} entries, got {ctx['actual_length']}"
    if kind == "string_too_short":
        return f"must not be empty, got {_shown(value)}"
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    return f"is invalid ({error['msg']}), got {_shown(value)}"
