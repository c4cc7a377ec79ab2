"""Server-side printing (``meta.k8s.io/v1`` Tables) of custom resources, for the emulator.

``kubectl get`` asks the API server for a Table and prints its columns; a server that
answers with a plain object or list makes kubectl fall back to ``NAME AGE``. A real API
server builds the Table of a custom resource from its CRD's
``additionalPrinterColumns``; :func:`install_tables` adds a kmock reaction to a
:class:`~gic_operator.testing.kube_emulator.KubeEmulator` that does the same for every
resource defined by a CRD, so ``kubectl get gj`` shows Phase, Checkpoint, Restarts...

Rendering follows the API server: a ``Name`` column first, then the CRD's columns in
order (``priority`` kept, so ``-o wide`` shows the rest); a ``date`` cell is the age
(``5s``, ``3m10s``), a missing value is ``null``; each row carries the object's metadata
as ``PartialObjectMetadata``. Only simple JSONPaths (``.a.b``, ``.a[0].b``) are
evaluated, which is what this project's CRDs use.

Thread-safety: the reaction runs on the emulator's loop thread, like the rest of it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kmock import Request
from kmock._internal.rendering import Response

from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kube_errors import ApiError
from gic_operator.testing.kube_resources import ResourceType
from gic_operator.testing.kube_selectors import FieldSelector, LabelSelector

_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[(\d+)\]")
_NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}


def human_age(seconds: float) -> str:
    """An age as the API server prints it (``42s``, ``3m10s``, ``5h``, ``2d3h``)."""
    s = int(seconds)
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def evaluate(obj: Any, path: str) -> Any:
    """The value at a simple JSONPath (``.status.phase``, ``.items[0].name``), or None."""
    text = path.strip().removeprefix("{").removesuffix("}").removeprefix("$")
    position, value = 0, obj
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            return None
        key, index = match.group(1), match.group(2)
        if key is not None:
            value = value.get(key) if isinstance(value, Mapping) else None
        else:
            items = value if isinstance(value, list) else []
            value = items[int(index)] if int(index) < len(items) else None
        if value is None:
            return None
        position = match.end()
    return value


def _cell(value: Any, column: Mapping[str, Any], now: float) -> Any:
    if value is None:
        return None
    kind = column.get("type")
    if kind == "date" and isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return value
        return human_age(now - stamp)
    if kind in ("integer", "number") and isinstance(value, int | float):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    return value if isinstance(value, str) else json.dumps(value)


def render_table(
    columns: list[Mapping[str, Any]], items: list[dict[str, Any]], resource_version: str
) -> dict[str, Any]:
    """The ``Table`` of ``items`` with the CRD printer ``columns``."""
    now = time.time()
    definitions: list[dict[str, Any]] = [dict(_NAME_COLUMN)]
    for column in columns:
        definitions.append(
            {
                "name": column.get("name", ""),
                "type": column.get("type", "string"),
                "format": column.get("format", ""),
                "description": column.get("description", ""),
                "priority": int(column.get("priority", 0)),
            }
        )
    rows = []
    for item in items:
        meta = item.get("metadata") or {}
        cells = [meta.get("name")]
        cells += [_cell(evaluate(item, str(c.get("jsonPath", ""))), c, now) for c in columns]
        partial: dict[str, Any] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
        }
        rows.append({"cells": cells, "object": partial})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }


def _json(body: Any, status: int = 200) -> Response:
    return Response(status=status, headers={"Content-Type": "application/json"}, payload=body)


def _wants_table(request: Request) -> bool:
    accept = request.headers.get("Accept", "")
    return (
        request.method.value == "GET"
        and "as=Table" in accept
        and request.resource is not None
        and request.subresource is None
        and request.params.get("watch") not in ("true", "1")
    )


def install_tables(emulator: KubeEmulator) -> None:
    """Serve Tables for ``kubectl get`` of CRD-defined resources (see the module doc)."""
    handler = emulator.handler
    store = handler.store
    registry = store.registry

    def crd_resource(request: Request) -> tuple[ResourceType, list[Mapping[str, Any]]] | None:
        res = request.resource
        if res is None or not (res.group and res.version and res.plural):
            return None
        rtype = registry.get(res.group, res.version, res.plural)
        crds = registry.get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        if rtype is None or not rtype.from_crd or crds is None:
            return None
        try:
            crd = store.get(crds, None, f"{rtype.plural}.{rtype.group}")
        except ApiError:  # the CRD is gone: let the emulation answer
            return None
        for version in (crd.get("spec") or {}).get("versions") or []:
            if version.get("name") == rtype.version:
                return rtype, list(version.get("additionalPrinterColumns") or [])
        return rtype, []

    def matches(request: Request) -> bool:
        return _wants_table(request) and crd_resource(request) is not None

    def serve(request: Request) -> Response:
        found = crd_resource(request)
        assert found is not None
        rtype, columns = found
        if request.name is not None:
            try:
                items = [store.get(rtype, request.namespace, request.name)]
            except ApiError as error:  # NotFound, as the emulation itself would answer
                return _json(error.status(), error.code)
            version = str(store.resource_version)
        else:
            listing = store.list_objects(
                rtype,
                request.namespace,
                LabelSelector.parse(request.params.get("labelSelector")),
                FieldSelector.parse(request.params.get("fieldSelector")),
            )
            items = list(listing["items"])
            version = str(listing["metadata"].get("resourceVersion", store.resource_version))
        return _json(render_table(columns, items, version))

    handler[matches] << serve
