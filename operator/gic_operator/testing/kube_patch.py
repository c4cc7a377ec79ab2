"""The three PATCH dialects of the Kubernetes API, applied to plain JSON documents.

* JSON merge patch (RFC 7386, ``application/merge-patch+json``): dicts merge
  recursively, ``null`` deletes a key, anything else (lists too) replaces.
* JSON patch (RFC 6902, ``application/json-patch+json``): a list of ``add``, ``remove``,
  ``replace``, ``move``, ``copy`` and ``test`` operations on JSON pointers, all or
  nothing; any failing operation (a failed ``test`` included) raises :class:`PatchError`.
* Strategic merge patch (``application/strategic-merge-patch+json``): a merge patch,
  except that lists of dicts that all carry a ``name`` are merged item by item by name
  (``$patch: delete`` in an item removes it, ``$setElementOrder/<field>`` orders them);
  other ``$``-directives are dropped. This is what kubectl sends for built-in kinds, and
  enough of it for containers, env and volumes; other merge keys are not known.

Every function returns a new document and never mutates its arguments.

Thread-safety: pure functions.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied to the document (the API answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Apply a strategic merge patch, as far as this module knows the strategies."""
    if not isinstance(patch, dict):
        return _strip_directives(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    orders = {
        key.split("/", 1)[1]: value
        for key, value in patch.items()
        if key.startswith("$setElementOrder/") and isinstance(value, list)
    }
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif _named_list(value) and _named_list(result.get(key)):
            result[key] = _merge_named(result[key], value, orders.get(key))
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _named_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "name" in item for item in value)
    )


def _merge_named(
    current: list[dict[str, Any]], patch: list[dict[str, Any]], order: list[Any] | None
) -> list[Any]:
    merged: dict[Any, Any] = {item["name"]: copy.deepcopy(item) for item in current}
    for item in patch:
        name = item["name"]
        if item.get("$patch") == "delete":
            merged.pop(name, None)
        else:
            merged[name] = strategic_merge_patch(merged.get(name), item)
    if order:
        names = [entry.get("name") for entry in order if isinstance(entry, dict)]
        ranked = {name: i for i, name in enumerate(names)}
        return sorted(merged.values(), key=lambda item: ranked.get(item["name"], len(ranked)))
    return list(merged.values())


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip_directives(item) for item in value]
    return copy.deepcopy(value)


# -- RFC 6902 -----------------------------------------------------------------------------


def json_patch(document: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch; all operations or none."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    result = copy.deepcopy(document)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"malformed JSON patch operation: {operation!r}")
        result = _apply_operation(result, operation)
    return result


def _apply_operation(doc: Any, operation: dict[str, Any]) -> Any:
    op = operation["op"]
    path = _parse_pointer(operation["path"])
    if op == "test":
        actual = _get(doc, path, operation["path"])
        if actual != operation.get("value"):
            raise PatchError(f"testing value {operation['path']} failed: test failed")
        return doc
    if op == "add":
        return _add(doc, path, copy.deepcopy(_value(operation)))
    if op == "remove":
        return _remove(doc, path, operation["path"])[0]
    if op == "replace":
        doc, _ = _remove(doc, path, operation["path"])
        return _add(doc, path, copy.deepcopy(_value(operation)))
    if op in ("move", "copy"):
        source = operation.get("from")
        if not isinstance(source, str):
            raise PatchError(f"{op} operation without 'from': {operation!r}")
        from_path = _parse_pointer(source)
        if op == "move":
            doc, value = _remove(doc, from_path, source)
        else:
            value = copy.deepcopy(_get(doc, from_path, source))
        return _add(doc, path, value)
    raise PatchError(f"unknown JSON patch operation: {op!r}")


def _value(operation: dict[str, Any]) -> Any:
    if "value" not in operation:
        raise PatchError(f"{operation['op']} operation without a value: {operation!r}")
    return operation["value"]


def _parse_pointer(pointer: Any) -> list[str]:
    if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
        raise PatchError(f"invalid JSON pointer: {pointer!r}")
    if not pointer:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _index(container: list[Any], token: str, pointer: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid list index in {pointer}")
    index = int(token)
    limit = len(container) if for_add else len(container) - 1
    if index > limit:
        raise PatchError(f"list index out of range in {pointer}")
    return index


def _get(doc: Any, path: list[str], pointer: str) -> Any:
    node = doc
    for token in path:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"{pointer}: missing value")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, pointer, for_add=False)]
        else:
            raise PatchError(f"{pointer}: missing value")
    return node


def _add(doc: Any, path: list[str], value: Any) -> Any:
    if not path:
        return value
    parent = _get(doc, path[:-1], "/" + "/".join(path))
    token = path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, token, "/" + "/".join(path), for_add=True), value)
    else:
        raise PatchError(f"cannot add to a scalar at /{'/'.join(path)}")
    return doc


def _remove(doc: Any, path: list[str], pointer: str) -> tuple[Any, Any]:
    if not path:
        return None, doc
    parent = _get(doc, path[:-1], pointer)
    token = path[-1]
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"{pointer}: missing value")
        return doc, parent.pop(token)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, token, pointer, for_add=False))
    raise PatchError(f"{pointer}: missing value")
