"""Which existing objects the operator adopts: only those its GICJob owns.

The operator creates a job's driver pods, headless service, RPC Secret, executor
template ConfigMap and NetworkPolicy under names derived from the GICJob's name
(:mod:`gic_operator.kube.naming`). Creating one that already exists (HTTP 409) is
success only when the existing object's controller owner reference carries the UID of
the GICJob the operator creates it for; anything else -- an object someone planted
under that name (a Secret whose key the planter knows, a Service or pod that would
receive the job's traffic), one left by a deleted GICJob of the same name, one of another
GICJob -- is :class:`~gic_operator.operator_errors.ObjectNotOwnedError`, whose message
names the object, its owner and the fix. The job records it as a condition and
creates nothing more until the object is gone.

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gic_operator.operator_errors import ObjectNotOwnedError

#: ``Accept`` header of a read that returns an object's metadata only (no Secret data).
METADATA_ONLY: Mapping[str, str] = {
    "Accept": "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
}


def controller_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The controller owner reference in ``metadata`` (``controller: true``), or ``None``."""
    refs = metadata.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def controller_uid(metadata: Mapping[str, Any]) -> str | None:
    """The UID of the controller owner in ``metadata``, or ``None``."""
    ref = controller_of(metadata)
    uid = None if ref is None else ref.get("uid")
    return uid if isinstance(uid, str) and uid else None


def _owner_text(metadata: Mapping[str, Any]) -> str:
    ref = controller_of(metadata)
    if ref is None:
        return "no controller (nothing owns it)"
    kind, name, uid = (str(ref.get(key, "?"))[:253] for key in ("kind", "name", "uid"))
    return f"{kind} {name} (uid {uid})"


def check_adoptable(
    kind: str, namespace: str, manifest: Mapping[str, Any], existing: Mapping[str, Any]
) -> None:
    """Nothing when ``existing`` (the metadata of the object found under the name of
    ``manifest``) is owned by the controller ``manifest`` names; else
    :class:`ObjectNotOwnedError`. A manifest without a controller owner adopts nothing
    but an object without one either."""
    meta = manifest.get("metadata") or {}
    want, have = controller_uid(meta), controller_uid(existing)
    if want == have:
        return
    name = meta.get("name")
    ref = controller_of(meta) or {}
    job = f"{ref.get('kind', 'owner')} {namespace}/{ref.get('name', '?')} (uid {want})"
    raise ObjectNotOwnedError(
        f"{kind} {namespace}/{name} already exists and is not owned by {job}: its owner is "
        f"{_owner_text(existing)}. The operator creates a job's pods, service, Secret, "
        f"ConfigMap and NetworkPolicy itself and never adopts one it did not create for "
        f"this GICJob; check who made it (it may be an attempt to choose or read the job's "
        f"keys or traffic), delete it, or rename the GICJob; the job goes on once it is gone"
    )
