"""What the API server does to an object on its way in: validation, defaults, metadata.

These pure functions turn a client's body into the stored object, the way a real API
server's registry strategies do, for the kinds the emulator serves:

* names: DNS-1123 subdomains; services and namespaces DNS labels (services starting
  with a letter); CRDs exactly ``<plural>.<group>``; labels checked for syntax;
* creation: ``uid``, ``creationTimestamp``, ``generation`` 1; ``status`` is reset where
  it is a subresource (pods start ``Pending``, namespaces ``Active``, CRDs
  ``Established``); secrets fold ``stringData`` into ``data``; services get a cluster IP;
* updates: identity fields, timestamps and deletion marks are the server's; with a status
  subresource the main endpoint keeps the stored status and the ``status`` endpoint
  changes nothing else; ``generation`` grows when anything but metadata (and status,
  where it is a subresource) changes, and when deletion starts; no finalizer may be added
  to an object being deleted;
* empty ``finalizers``, ``labels``, ``annotations`` and ``ownerReferences`` are dropped,
  as a real server omits them.

The ``resourceVersion`` is left to the store.

Thread-safety: pure functions (:func:`new_uid` and the clock aside).
"""

from __future__ import annotations

import base64
import copy
import datetime
import re
import uuid
from typing import Any

from gic_operator.testing.kube_errors import bad_request, invalid
from gic_operator.testing.kube_resources import CRD_STORAGE_KEY, ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_EMPTY_DROPPED = ("finalizers", "labels", "annotations", "ownerReferences")
_SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "name",
    "namespace",
    "managedFields",
    "selfLink",
)


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes timestamps (seconds precision)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_uid() -> str:
    """A fresh object uid."""
    return str(uuid.uuid4())


def render(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored object as served under ``rtype``'s group/version."""
    result = copy.deepcopy(obj)
    result["apiVersion"] = rtype.group_version
    result["kind"] = rtype.kind
    return result


def validate_name(rtype: ResourceType, name: str) -> None:
    """Raise 422 if ``name`` is not acceptable for this kind."""
    kind = rtype.kind
    if rtype.storage_key in (("", "services"), ("", "namespaces")):
        pattern = _LABEL_1035 if rtype.plural == "services" else _LABEL
        if len(name) > 63 or not pattern.match(name):
            why = "a lowercase RFC 1123/1035 label of at most 63 characters is required"
            raise invalid(kind, name, f"metadata.name: Invalid value: {name!r}: {why}")
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        why = "a lowercase RFC 1123 subdomain of at most 253 characters is required"
        raise invalid(kind, name, f"metadata.name: Invalid value: {name!r}: {why}")


def validate_labels(rtype: ResourceType, name: str, labels: Any) -> None:
    """Raise 422 for label keys or values Kubernetes would reject."""
    if labels is None:
        return
    if not isinstance(labels, dict):
        raise invalid(rtype.kind, name, "metadata.labels: must be a map of strings")
    for key, value in labels.items():
        prefix, _, local = str(key).rpartition("/")
        key_ok = len(local) <= 63 and bool(_QUALIFIED.match(local))
        key_ok = key_ok and (not prefix or (len(prefix) <= 253 and bool(_SUBDOMAIN.match(prefix))))
        value_ok = isinstance(value, str) and (
            value == "" or (len(value) <= 63 and bool(_QUALIFIED.match(value)))
        )
        if not key_ok or not value_ok:
            why = f"metadata.labels: Invalid value: {key!r}: {value!r}"
            raise invalid(rtype.kind, name, why)


def normalize_metadata(obj: dict[str, Any]) -> None:
    """Drop empty metadata collections, as a real API server omits them."""
    meta = obj.setdefault("metadata", {})
    for key in _EMPTY_DROPPED:
        if key in meta and not meta[key]:
            del meta[key]


def prepare_create(rtype: ResourceType, namespace: str | None, body: Any) -> dict[str, Any]:
    """The object to store for a POST of ``body`` (name already resolved, no rv yet)."""
    obj: dict[str, Any] = copy.deepcopy(body)
    meta = obj["metadata"]
    name = meta["name"]
    for key in _SERVER_METADATA:
        if key not in ("name", "namespace"):
            meta.pop(key, None)
    if rtype.namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    validate_name(rtype, name)
    validate_labels(rtype, name, meta.get("labels"))
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = now_rfc3339()
    meta["generation"] = 1
    obj["apiVersion"] = rtype.group_version
    obj["kind"] = rtype.kind
    if rtype.has_status:
        obj.pop("status", None)
    _apply_defaults(rtype, obj)
    normalize_metadata(obj)
    return obj


def _apply_defaults(rtype: ResourceType, obj: dict[str, Any]) -> None:
    key = rtype.storage_key
    spec = obj.setdefault("spec", {}) if key in (("", "pods"), ("", "services")) else None
    if key == ("", "pods") and spec is not None:
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", "default")
        if not spec.get("containers"):
            raise invalid("Pod", obj["metadata"]["name"], "spec.containers: Required value")
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif key == ("", "services") and spec is not None:
        spec.setdefault("type", "ClusterIP")
        if "clusterIP" not in spec:
            digest = uuid.UUID(obj["metadata"]["uid"]).int
            spec["clusterIP"] = f"10.96.{digest % 250 + 1}.{digest // 250 % 250 + 1}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        obj["status"] = {"loadBalancer": {}}
    elif key == ("", "namespaces"):
        obj["status"] = {"phase": "Active"}
    elif key == ("", "secrets"):
        obj.setdefault("type", "Opaque")
        fold_string_data(obj)
    elif key == CRD_STORAGE_KEY:
        prepare_crd(obj)


def fold_string_data(secret: dict[str, Any]) -> None:
    """Move a secret's ``stringData`` into ``data``, base64-encoded, as the server does."""
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        data = secret.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def prepare_crd(crd: dict[str, Any]) -> None:
    """Check a CRD's name against its spec and mark it accepted and established."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    name = crd["metadata"]["name"]
    expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
    if name != expected or not names.get("kind") or not spec.get("versions"):
        why = f"metadata.name: must be spec.names.plural+'.'+spec.group ({expected!r})"
        raise invalid("CustomResourceDefinition", name, why)
    now = now_rfc3339()
    stored = [v["name"] for v in spec["versions"] if v.get("storage", True)]
    crd["status"] = {
        "acceptedNames": copy.deepcopy(names),
        "storedVersions": stored[:1],
        "conditions": [
            {"type": t, "status": "True", "reason": reason, "lastTransitionTime": now}
            for t, reason in (("NamesAccepted", "NoConflicts"), ("Established", "InitialNames"))
        ],
    }


def prepare_update(
    rtype: ResourceType, old: dict[str, Any], new: Any, subresource: str | None
) -> dict[str, Any]:
    """The object to store when ``new`` replaces ``old`` (by PUT or after a patch)."""
    name = old["metadata"]["name"]
    if not isinstance(new, dict) or not isinstance(new.get("metadata", {}), dict):
        raise bad_request("the object must be a JSON object with a metadata map")
    if subresource == "status":
        result = copy.deepcopy(old)
        if "status" in new:
            result["status"] = copy.deepcopy(new["status"])
        else:
            result.pop("status", None)
        return result
    result = copy.deepcopy(new)
    meta = result.setdefault("metadata", {})
    old_meta = old["metadata"]
    for key in _SERVER_METADATA:
        if key in old_meta:
            meta[key] = copy.deepcopy(old_meta[key])
        else:
            meta.pop(key, None)
    result["apiVersion"] = rtype.group_version
    result["kind"] = rtype.kind
    if rtype.has_status:
        if "status" in old:
            result["status"] = copy.deepcopy(old["status"])
        else:
            result.pop("status", None)
    validate_labels(rtype, name, meta.get("labels"))
    if old_meta.get("deletionTimestamp"):
        added = set(meta.get("finalizers") or ()) - set(old_meta.get("finalizers") or ())
        if added:
            why = (
                "metadata.finalizers: Forbidden:"
                " no new finalizers can be added if the object is being deleted"
            )
            raise invalid(rtype.kind, name, why)
    if rtype.storage_key == ("", "secrets"):
        fold_string_data(result)
    if rtype.storage_key == CRD_STORAGE_KEY:
        prepare_crd(result)
        if "status" in old:  # conditions keep their transition times
            result["status"]["conditions"] = copy.deepcopy(old["status"].get("conditions", []))
    normalize_metadata(result)
    if spec_part(rtype, result) != spec_part(rtype, old):
        meta["generation"] = int(old_meta.get("generation", 1)) + 1
    return result


def spec_part(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """Everything whose change bumps ``generation``."""
    skipped = {"metadata", "apiVersion", "kind"} | ({"status"} if rtype.has_status else set())
    return {key: value for key, value in obj.items() if key not in skipped}


def same_content(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a write changes nothing (ignoring the resource version)."""
    a = {**old, "metadata": {**old.get("metadata", {}), "resourceVersion": None}}
    b = {**new, "metadata": {**new.get("metadata", {}), "resourceVersion": None}}
    return a == b
