"""Just enough of the Kubernetes protobuf encoding to read kubectl's ``create`` requests.

kubectl 1.32 sends the objects of its ``create namespace|configmap|secret|serviceaccount``
generators as ``application/vnd.kubernetes.protobuf`` and does not retry with JSON when
the server refuses them. Such a body is the magic ``k8s\\0`` followed by a
``runtime.Unknown`` message (``typeMeta`` = 1: apiVersion 1, kind 2; ``raw`` = 2: the
object's own message). :func:`decode_object` turns that into the equivalent JSON object
for the kinds listed in ``_DECODERS`` (metadata name, generateName, namespace, labels,
annotations, finalizers; configmap and secret data; secret type). Other kinds, and
anything malformed, raise :class:`ValueError`.

Thread-safety: pure functions.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

MAGIC = b"k8s\x00"
_Fields = dict[int, list[Any]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> _Fields:
    """Field number -> values (ints for varints and fixed, bytes for length-delimited)."""
    fields: _Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
            if pos > len(data):
                raise ValueError("truncated field")
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = int.from_bytes(data[pos : pos + size], "little"), pos + size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def _string(fields: _Fields, number: int) -> str:
    values = fields.get(number)
    return bytes(values[-1]).decode() if values else ""


def _map(fields: _Fields, number: int, *, binary: bool = False) -> dict[str, str]:
    result = {}
    for entry in fields.get(number, []):
        item = _fields(entry)
        value = bytes(item.get(2, [b""])[-1])
        key = _string(item, 1)
        result[key] = base64.b64encode(value).decode() if binary else value.decode()
    return result


def _metadata(raw: bytes) -> dict[str, Any]:
    fields = _fields(raw)
    meta: dict[str, Any] = {}
    for number, key in ((1, "name"), (2, "generateName"), (3, "namespace")):
        if text := _string(fields, number):
            meta[key] = text
    for number, key in ((11, "labels"), (12, "annotations")):
        if mapping := _map(fields, number):
            meta[key] = mapping
    if finalizers := [bytes(f).decode() for f in fields.get(14, [])]:
        meta["finalizers"] = finalizers
    return meta


def _plain(fields: _Fields) -> dict[str, Any]:
    return {}


def _configmap(fields: _Fields) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if data := _map(fields, 2):
        body["data"] = data
    if binary := _map(fields, 3, binary=True):
        body["binaryData"] = binary
    return body


def _secret(fields: _Fields) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if data := _map(fields, 2, binary=True):
        body["data"] = data
    if secret_type := _string(fields, 3):
        body["type"] = secret_type
    if string_data := _map(fields, 4):
        body["stringData"] = string_data
    return body


_DECODERS: dict[tuple[str, str], Callable[[_Fields], dict[str, Any]]] = {
    ("v1", "Namespace"): _plain,
    ("v1", "ServiceAccount"): _plain,
    ("v1", "ConfigMap"): _configmap,
    ("v1", "Secret"): _secret,
}


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object of a supported kind."""
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf message")
    envelope = _fields(body[len(MAGIC) :])
    type_meta = _fields(bytes(envelope.get(1, [b""])[-1]))
    api_version, kind = _string(type_meta, 1), _string(type_meta, 2)
    decoder = _DECODERS.get((api_version, kind))
    if decoder is None:
        raise ValueError(f"protobuf bodies of {api_version}/{kind} are not supported")
    fields = _fields(bytes(envelope.get(2, [b""])[-1]))
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind}
    obj["metadata"] = _metadata(bytes(fields.get(1, [b""])[-1]))
    obj.update(decoder(fields))
    return obj
