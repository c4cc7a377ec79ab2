"""Dispose of a deleted Savepoint's files (kopf's ``on.delete`` handler with the finalizer).

With ``disposeOnDelete: true`` the files are deleted — only a Completed savepoint, only
its derived directory (:func:`gic_operator.savepoints.restore_sources.savepoint_place`),
only through storage the allowlist admits, endpoint included
(:func:`gic_operator.storage.storage_access.open_storage`: a refused one keeps the
files with a Warning event ``DisposalRefused`` and sends no request),
never one a job claimed (``status.claimedBy``, or a job restored from it in Claim mode),
and not while a job restored from it NoClaim has not released it (the deletion then
waits: :class:`~gic_operator.operator_errors.SavepointHeldError`). A disposal that keeps
failing gives up after :data:`MAX_DISPOSAL_ATTEMPTS` with a Warning event, so deletion
never hangs on a broken storage.

Thread-safety: one call per deleted savepoint at a time (kopf's handler).
"""

from __future__ import annotations

from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.naming import job_id
from gic_operator.models import RestoreMode, SavepointState
from gic_operator.operator_errors import (
    SavepointHeldError,
    StorageNotAllowedError,
    UntrustedInputError,
)
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.status_pass import SavepointPass
from gic_operator.savepoints.restore_sources import holders, savepoint_place
from gic_operator.storage.storage_access import open_storage

PLURAL = "savepoints"
JOBS = "gicjobs"
MAX_DISPOSAL_ATTEMPTS = 5


def dispose(kube: KubeApi, allowlist: StorageAllowlist, p: SavepointPass, attempt: int) -> str:
    """On deletion of the Savepoint read into ``p``: delete the files when asked to (see
    the module docstring).

    Returns what happened (for the log). Raises
    :class:`~gic_operator.operator_errors.SavepointHeldError` while a job still needs the
    files (the caller retries later, however long), and any other error of a failed
    disposal while attempts remain; after :data:`MAX_DISPOSAL_ATTEMPTS` failures it gives
    up with a Warning event and returns, so the resource can go.
    """
    body = p.body
    spec = p.resource.spec
    if not spec.get("disposeOnDelete"):
        return "kept (disposeOnDelete is false)"
    if p.status.state is not SavepointState.COMPLETED:
        return "nothing to dispose of"
    try:
        place = savepoint_place(kube, allowlist, p.namespace, body)
        # The endpoint and root are admitted before any client for them exists.
        job = job_id(p.namespace, str(spec.get("job")))
        storage = open_storage(allowlist, p.namespace, place.root, job, place.endpoint)
        held = holders(kube.list_objects(JOBS, p.namespace), p.name, place.path)
    except (UntrustedInputError, StorageNotAllowedError) as exc:
        message = f"files kept: {exc}"
        kube.event(body, "Warning", "DisposalRefused", message)
        return message
    except Exception as exc:
        return _disposal_failed(kube, p, attempt, exc)
    claimers = [name for name, mode in held if mode is RestoreMode.CLAIM]
    claimed_by = p.status.claimed_by
    if claimed_by or claimers:
        owner = claimed_by or f"{p.namespace}/{claimers[0]}"
        message = f"files kept: claimed by {owner} (Claim restore)"
        kube.event(body, "Normal", "SavepointKept", message)
        return message
    if held:
        names = ", ".join(name for name, _ in held)
        message = (
            f"deletion waits: GICJob {names} restored from this savepoint and has not "
            "released it yet (condition RestoreSourceReleased); its files are deleted "
            "once no job needs them"
        )
        kube.event(body, "Normal", "SavepointHeld", message)
        raise SavepointHeldError(message)
    try:
        deleted = storage.dispose_savepoint(place.path)
    except Exception as exc:
        return _disposal_failed(kube, p, attempt, exc)
    message = f"deleted {deleted} objects under {place.path}"
    kube.event(body, "Normal", "SavepointDisposed", message)
    return message


def _disposal_failed(kube: KubeApi, p: SavepointPass, attempt: int, exc: Exception) -> str:
    if attempt + 1 >= MAX_DISPOSAL_ATTEMPTS:
        message = (
            f"gave up deleting the files after {attempt + 1} attempts ({exc}); the "
            "resource is deleted, the files are left: delete them by hand"
        )
        kube.event(p.body, "Warning", "DisposalAbandoned", message)
        return message
    kube.patch_status(PLURAL, p.namespace, p.name, {"disposalError": str(exc)})
    raise exc
