"""Pydantic model -> Kubernetes *structural* OpenAPI v3 schema, and the server's defaulting.

A CustomResourceDefinition's ``openAPIV3Schema`` must be structural: every node names its
``type`` (or says ``x-kubernetes-preserve-unknown-fields``), there are no references and no
``anyOf``/``allOf``/``oneOf`` carrying types, and ``properties`` never stands beside
``additionalProperties``. Pydantic's JSON Schema (draft 2020-12) is none of that, so
:func:`structural_schema` rewrites it:

* every ``$ref`` is inlined from ``$defs``;
* ``anyOf: [X, {type: null}]`` becomes ``X`` with ``nullable: true`` (other unions are refused);
* a discriminated union of objects (``oneOf`` with a ``discriminator``) becomes one object
  with every member's properties (a property several members have must be the same in
  each), the discriminator an ``enum`` of the members' tags (required, no default), and
  required what every member requires; other ``oneOf`` are refused;
* ``const`` becomes a one-value ``enum``; enums stay;
* ``title`` and ``additionalProperties: false`` are dropped (the API server prunes unknown
  fields, and kubectl reports them);
* ``exclusiveMinimum: N`` becomes ``minimum: N`` + ``exclusiveMinimum: true`` (OpenAPI 3.0);
* ``default`` is kept for scalars, lists and maps, computed from default factories too; a
  nested object whose default is exactly what its own field defaults produce gets
  ``default: {}`` so the API server fills it in; ``default: null`` is dropped;
* ``x-kubernetes-int-or-string`` (quantities), ``x-kubernetes-list-type`` and
  ``x-kubernetes-list-map-keys`` (from a field's ``json_schema_extra``) are carried over; a
  ``map`` list must key on required scalar fields of its items;
* every property must carry a description (``kubectl explain`` shows it); a missing one is an
  error, as is any JSON Schema keyword this module does not know how to carry over.

:func:`apply_defaults` reproduces the API server's structural defaulting (used to check that
the CRD's defaults agree with the model's) and :func:`schema_errors` is a small validator for
the subset of OpenAPI used here (types, enums, bounds, lengths and sizes, patterns, required,
unknown fields).

Everything here is a pure function over plain dicts: thread-safe, no state.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pydantic_core
from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import core_schema

Schema = dict[str, Any]

#: Keywords copied as they are.
_KEPT = frozenset(
    {
        "type",
        "description",
        "enum",
        "format",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "required",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
    }
)
#: Keywords dropped on purpose.
_DROPPED = frozenset({"title", "$defs", "examples"})
_NULL: Schema = {"type": "null"}
#: Key order in the output (readability of the generated YAML); others keep theirs, after these.
_ORDER = (
    "description",
    "type",
    "nullable",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "required",
    "items",
    "additionalProperties",
    "properties",
)


class CrdSchemaError(ValueError):
    """The model uses something a structural schema cannot express."""


class _KubeJsonSchema(GenerateJsonSchema):
    """Pydantic JSON Schema with defaults from default factories, without null members."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return super().get_default_value(schema)

    def encode_default(self, dft: Any) -> Any:
        if isinstance(dft, BaseModel):
            return dft.model_dump(mode="json", by_alias=True, exclude_none=True)
        return _drop_nulls(pydantic_core.to_jsonable_python(dft, by_alias=True))


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def structural_schema(model: type[BaseModel]) -> Schema:
    """The structural OpenAPI v3 schema of ``model`` (camelCase names)."""
    raw = model.model_json_schema(by_alias=True, schema_generator=_KubeJsonSchema)
    defs: dict[str, Schema] = raw.get("$defs", {})
    return _convert(raw, defs, model.__name__)


def _resolve(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    """``node`` with a ``$ref`` (or a one-element ``allOf``) replaced by its target."""
    if "allOf" in node:
        if len(node["allOf"]) != 1:
            raise CrdSchemaError(f"{path}: allOf with several members is not structural")
        node = {**{k: v for k, v in node.items() if k != "allOf"}, **node["allOf"][0]}
    if "$ref" not in node:
        return node
    ref = node["$ref"]
    prefix = "#/$defs/"
    if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise CrdSchemaError(f"{path}: unresolvable reference {ref!r}")
    target = _resolve(defs[ref[len(prefix) :]], defs, path)
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    return {**target, **siblings}  # the use site's description and default win


def _convert(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    node = _resolve(node, defs, path)
    nullable = False
    if "anyOf" in node:
        members = [m for m in node["anyOf"] if m != _NULL]
        if len(members) != 1:
            raise CrdSchemaError(f"{path}: unions other than X-or-null are not structural")
        nullable = len(members) != len(node["anyOf"])
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(members[0], defs, path), **outer}
    if "oneOf" in node:
        return _union(node, defs, path, nullable)
    out: Schema = {}
    for key, value in node.items():
        if key in _KEPT:
            out[key] = copy.deepcopy(value)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {
                name: _property(sub, defs, f"{path}.{name}") for name, sub in value.items()
            }
        elif key == "items":
            out["items"] = _convert(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if isinstance(value, dict):
                out["additionalProperties"] = _convert(value, defs, f"{path}.*")
            elif value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif key == "default":
            pass  # decided below, once the node's own schema is known
        elif key not in _DROPPED:
            raise CrdSchemaError(f"{path}: JSON Schema keyword {key!r} is not supported")
    untyped = out.get("x-kubernetes-preserve-unknown-fields") or out.get(
        "x-kubernetes-int-or-string"
    )
    if "type" not in out and not untyped:
        raise CrdSchemaError(f"{path}: no type")
    _check_list_map(out, path)
    if "properties" in out and "additionalProperties" in out:
        raise CrdSchemaError(f"{path}: properties and additionalProperties together")
    if nullable:
        out["nullable"] = True
    default = node.get("default")
    if default is not None:
        out["default"] = _kube_default(out, _drop_nulls(default), path)
    return _ordered(out)


def _union(node: Schema, defs: dict[str, Schema], path: str, nullable: bool) -> Schema:
    """One object schema for a discriminated union of objects (module docstring)."""
    tag = (node.get("discriminator") or {}).get("propertyName")
    if not isinstance(tag, str):
        raise CrdSchemaError(f"{path}: a union without a discriminator is not structural")
    members = [_convert(member, defs, path) for member in node["oneOf"]]
    properties: dict[str, Schema] = {}
    tags: list[Any] = []
    required = None
    for member in members:
        if member.get("type") != "object" or tag not in member.get("properties", {}):
            raise CrdSchemaError(f"{path}: union members must be objects with {tag!r}")
        for name, schema in member["properties"].items():
            sub = schema
            if name == tag:
                tags += [t for t in schema.get("enum", ()) if t not in tags]
                sub = {k: v for k, v in schema.items() if k not in ("enum", "default")}
            if properties.setdefault(name, sub) != sub:
                raise CrdSchemaError(f"{path}.{name}: differs between the union's members")
        names = set(member.get("required", ()))
        required = names if required is None else required & names
    properties[tag] = _ordered({**properties[tag], "enum": tags})
    out: Schema = {"type": "object", "properties": properties}
    out["required"] = [tag] + [n for n in properties if n != tag and n in (required or ())]
    for key in ("description",):
        if key in node:
            out[key] = node[key]
    if nullable:
        out["nullable"] = True
    return _ordered(out)


def _check_list_map(schema: Schema, path: str) -> None:
    """A ``map`` list needs object items whose key fields are required scalars (the API
    server merges and validates such lists by those keys)."""
    kind = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys")
    if kind is None and keys is None:
        return
    if kind not in ("atomic", "set", "map"):
        raise CrdSchemaError(f"{path}: x-kubernetes-list-type {kind!r} is not atomic, set or map")
    if schema.get("type") != "array":
        raise CrdSchemaError(f"{path}: x-kubernetes-list-type on a {schema.get('type')}")
    if (kind == "map") != bool(keys):
        raise CrdSchemaError(f"{path}: x-kubernetes-list-map-keys goes with list type map only")
    if kind == "map":
        items = schema.get("items", {})
        required = set(items.get("required", ()))
        for key in keys or ():
            field = items.get("properties", {}).get(key)
            if field is None or key not in required or field.get("type") == "object":
                raise CrdSchemaError(
                    f"{path}: map key {key!r} must be a required scalar field of the items"
                )


def _ordered(schema: Schema) -> Schema:
    rank = {key: index for index, key in enumerate(_ORDER)}
    return dict(sorted(schema.items(), key=lambda item: rank.get(item[0], len(rank))))


def _property(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    out = _convert(node, defs, path)
    if not out.get("description"):
        raise CrdSchemaError(f"{path}: no description (kubectl explain shows it)")
    return out


def _kube_default(schema: Schema, default: Any, path: str) -> Any:
    """The default the CRD states for ``schema``: ``{}`` when the nested defaults suffice."""
    nested = schema.get("type") == "object" and "properties" in schema
    if nested and isinstance(default, dict) and apply_defaults(schema, {}) == default:
        return {}
    errors = schema_errors(schema, default, path)
    if errors:
        raise CrdSchemaError(f"{path}: default {default!r} is invalid: {'; '.join(errors)}")
    return default


def apply_defaults(schema: Schema, value: Any) -> Any:
    """``value`` with the schema's defaults filled in, as the API server does (a new value)."""
    value = copy.deepcopy(value)
    _fill(schema, value)
    return value


def _fill(schema: Schema, value: Any) -> None:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _fill(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for item in value.values():
                _fill(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _fill(schema["items"], item)


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


def schema_errors(schema: Schema, value: Any, path: str = "") -> list[str]:
    """Why ``value`` does not match ``schema`` (empty when it does); unknown fields count."""
    if value is None:
        return [] if schema.get("nullable") else [f"{path}: must not be null"]
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        allowed = _TYPES[kind]
        if not isinstance(value, allowed) or (kind != "boolean" and isinstance(value, bool)):
            return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if schema.get("x-kubernetes-int-or-string") and (
        isinstance(value, bool) or not isinstance(value, int | str)
    ):
        return [f"{path}: expected an integer or a string, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: longer than {schema['maxLength']}")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        errors.extend(_bound_errors(schema, value, path))
    if isinstance(value, list | dict):
        errors.extend(_size_errors(schema, len(value), path, isinstance(value, list)))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(schema_errors(schema["items"], item, f"{path}[{index}]"))
    if isinstance(value, dict):
        errors.extend(_object_errors(schema, value, path))
    return errors


def _size_errors(schema: Schema, size: int, path: str, is_list: bool) -> list[str]:
    low, high = ("minItems", "maxItems") if is_list else ("minProperties", "maxProperties")
    what = "items" if is_list else "entries"
    errors = []
    if size < schema.get(low, 0):
        errors.append(f"{path}: fewer than {schema[low]} {what}")
    if high in schema and size > schema[high]:
        errors.append(f"{path}: more than {schema[high]} {what}")
    return errors


def _bound_errors(schema: Schema, value: float, path: str) -> list[str]:
    errors = []
    if "minimum" in schema:
        low = schema["minimum"]
        if value < low or (schema.get("exclusiveMinimum") and value == low):
            errors.append(f"{path}: {value} is below the minimum {low}")
    if "maximum" in schema:
        high = schema["maximum"]
        if value > high or (schema.get("exclusiveMaximum") and value == high):
            errors.append(f"{path}: {value} is above the maximum {high}")
    return errors


def _object_errors(schema: Schema, value: dict[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}.{name}: required" for name in schema.get("required", ()) if name not in value
    ]
    props: dict[str, Schema] = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        if name in props:
            errors.extend(schema_errors(props[name], item, f"{path}.{name}"))
        elif isinstance(extra, dict):
            errors.extend(schema_errors(extra, item, f"{path}.{name}"))
        elif props and not schema.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(f"{path}.{name}: unknown field")
    return errors
