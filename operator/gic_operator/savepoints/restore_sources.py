"""Restore sources: what a GICJob may restore from, where a Savepoint's files are, and
which jobs still need them.

Rules (the operator's trust boundary applied to restores):

* **Claim only from a Savepoint resource** of the job's namespace
  (``spec.restore.savepoint``). A claim hands the source's files to the claiming job;
  only a Savepoint can record that (``status.claimedBy``, set before the launch, with the
  resourceVersion read, so two jobs never both claim it). ``spec.restore.path`` restores
  NoClaim only: a path may name anything, e.g. another job's live checkpoint.
* **A Savepoint's directory is derived**, never read back:
  ``<root>/savepoints/<namespace>.<job>/gsp-<name>-<uid8>``
  (:func:`gic_operator.kube.naming.savepoint_dir`). ``root`` is its job's storage; when the job
  is gone (or its storage changed since), the root of the recorded ``status.path`` is
  used only if that path is exactly the derived directory under a root the allowlist
  admits for the namespace.
* **A restore source is protected until released.** A Savepoint is held while a GICJob
  of its namespace restored from it in Claim mode, restored from it NoClaim and has not
  released it (``status.restoredFrom.released``, which the operator derives from the
  job's manifests), or names it in ``spec.restore`` and has not launched yet. A held
  Savepoint is skipped by retention and its files are kept on deletion.

Thread-safety: pure functions over the :class:`~gic_operator.kube.kube_api.KubeApi`, which is
thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.naming import job_id, savepoint_dir, savepoint_request_id
from gic_operator.models import GICJobSpec, GICJobStatus, RestoreMode, SavepointStatus
from gic_operator.operator_errors import UntrustedInputError
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.storage.job_storage import normalize_uri
from gic_runtime.errors import GICError
from gic_runtime.layout import restore_source_location


def restore_problem(spec: GICJobSpec) -> str | None:
    """Why ``spec.restore`` cannot be honoured whatever the cluster holds, or ``None``."""
    restore = spec.restore
    if restore is not None and restore.path is not None and restore.mode is RestoreMode.CLAIM:
        return (
            "invalid spec: spec.restore.mode: Claim hands the source's files to this job, "
            "which only a Savepoint resource can record: name one in spec.restore.savepoint "
            "(take a Savepoint of the source job first), or restore spec.restore.path with "
            "mode NoClaim"
        )
    return None


@dataclass(frozen=True)
class SavepointPlace:
    """Where a Savepoint's files are: its directory ``path``, the storage ``root`` it
    lies under, and the S3 ``endpoint`` to reach it (``None``: the operator's own)."""

    path: str
    root: str
    endpoint: str | None


def savepoint_place(
    kube: KubeApi, allowlist: StorageAllowlist, namespace: str, body: Mapping[str, Any]
) -> SavepointPlace:
    """The derived place of Savepoint ``body`` (module docstring); raises
    :class:`~gic_operator.operator_errors.UntrustedInputError` when it cannot be derived."""
    sp = Body(body)
    name, uid = sp.name, sp.uid
    job = str(sp.spec.get("job") or "")
    rid = savepoint_request_id(name, uid)
    suffix = f"/savepoints/{job_id(namespace, job)}/{rid}"
    endpoint: str | None = None
    found = kube.get_object("gicjobs", namespace, job) if job else None
    if found is not None and not Body(found).deleting:
        try:
            cp = GICJobSpec.model_validate(Body(found).spec).checkpointing
        except ValidationError:
            cp = None
        if cp is not None and allowlist.storage_allowed(namespace, cp.storage):
            endpoint = cp.s3_endpoint_url
            root = normalize_uri(cp.storage)
            derived = savepoint_dir(root, namespace, job, rid)
            recorded = SavepointStatus.read(sp.status).path
            if not recorded or _normalized(recorded) == derived:
                return SavepointPlace(derived, root, endpoint)
    recorded = _normalized(SavepointStatus.read(sp.status).path or "")
    root = recorded[: -len(suffix)] if recorded.endswith(suffix) else ""
    if not root or not allowlist.storage_allowed(namespace, root):
        raise UntrustedInputError(
            f"Savepoint {name}'s recorded path {recorded or '(none)'} is not its directory "
            f"(<storage>/savepoints/{job_id(namespace, job)}/{rid} under storage allowed in "
            f"namespace {namespace}); the operator neither reads nor deletes there"
        )
    return SavepointPlace(recorded, root, endpoint)


def _normalized(path: str) -> str:
    try:
        return normalize_uri(path) if path else ""
    except GICError:
        return ""


def holders(
    jobs: Sequence[Mapping[str, Any]], savepoint: str, path: str | None
) -> list[tuple[str, RestoreMode]]:
    """``(job name, mode)`` of the GICJobs in ``jobs`` (one namespace) that still need the
    files of Savepoint ``savepoint`` at ``path`` (module docstring), sorted."""
    held = []
    for job in jobs:
        body = Body(job)
        if body.deleting:
            continue
        restored = GICJobStatus.read(body.status).restored_from
        name = body.name
        if restored is not None:
            # the location the runtime opened, however the spec named it
            source = restore_source_location(_normalized(restored.path))
            uses = restored.savepoint == savepoint or (bool(path) and source == path)
            if uses and restored.mode is RestoreMode.CLAIM:
                held.append((name, RestoreMode.CLAIM))
            elif uses and not restored.released:
                held.append((name, RestoreMode.NO_CLAIM))
            continue
        wanted = _wanted_restore(job)
        if wanted is not None and wanted[0] == savepoint:
            held.append((name, wanted[1]))
    return sorted(held)


def _wanted_restore(job: Mapping[str, Any]) -> tuple[str, RestoreMode] | None:
    """``(Savepoint name, mode)`` a GICJob's ``spec.restore`` names (before its launch),
    or ``None``. A spec that does not validate is read field by field, so a job whose
    spec is broken elsewhere still holds the Savepoint it names."""
    restore = Body(job).spec.get("restore")
    if not isinstance(restore, Mapping) or not isinstance(restore.get("savepoint"), str):
        return None
    try:
        mode = RestoreMode(restore.get("mode") or RestoreMode.NO_CLAIM)
    except ValueError:
        mode = RestoreMode.NO_CLAIM
    return restore["savepoint"], mode
