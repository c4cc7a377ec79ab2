"""Whether a job still needs a NoClaim restore source, judged from its own manifests.

:func:`source_released` takes the job's manifests newest first, read one at a time
within the operator's :class:`~gic_runtime.checkpoint.manifest_limits.ManifestLimits`
(:func:`gic_operator.storage.release_checks.iter_release_manifests`), and stops at the
first that still references the source: the operator holds one decoded manifest at a
time, whatever a driver wrote. The driver's report is never consulted. A restore source
a manifest names (driver-written) is used only when it is the location the operator
recorded (:func:`same_source`).

Invariants: the answer is ``True`` only when at least one retained manifest exists and
none references the source; a claimed source (the job's own) and a lineage naming
another source are never released; any unreadable manifest raises (the caller treats
that as "not released").

Thread-safety: stateless; safe from any thread (the resolver is thread-safe).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

from gic_operator.storage.bounded_reads import normalize_uri
from gic_runtime.checkpoint.catalog import read_manifest
from gic_runtime.checkpoint.manifest import Manifest, RestoreMode, StoredManifest
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.checkpoint.manifest_limits import ManifestLimits
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.errors import GICError, ObjectNotFoundError
from gic_runtime.layout import restore_source_location
from gic_runtime.storage.uri import StoreResolver

__all__ = ["same_source", "source_released"]


def _inside(uri: str, directory: str) -> bool:
    return uri == directory or uri.startswith(directory.rstrip("/") + "/")


def same_source(named: str, recorded: str) -> bool:
    """Whether restore source ``named`` (read from a manifest a driver wrote) is the
    location ``recorded`` (what the operator itself passed to the driver), both
    normalized as the runtime opens them
    (:func:`~gic_runtime.layout.restore_source_location`); never true for a URI that
    does not parse."""
    try:
        return restore_source_location(normalize_uri(named)) == restore_source_location(
            normalize_uri(recorded)
        )
    except GICError:
        return False


def source_released(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    source: str,
    manifests: Iterable[StoredManifest],
    *,
    limits: ManifestLimits,
) -> bool:
    """Whether none of ``manifests`` (job ``job_id``'s under ``root``, newest first)
    references an object of restore source ``source`` (normalized); see the module
    docstring."""
    references: Callable[[Manifest], bool] | None = None
    for stored in manifests:
        if references is None:
            references = _source_check(resolver, (root, job_id), source, stored.manifest, limits)
            if references is None:
                return False
        if references(stored.manifest):
            return False
    return references is not None


def _source_check(
    resolver: StoreResolver,
    job: tuple[str, str],
    source: str,
    newest: Manifest,
    limits: ManifestLimits,
) -> Callable[[Manifest], bool] | None:
    """Whether a retained manifest of ``job`` (root, job id) references ``source``, as
    the newest retained manifest ``newest`` tells; ``None`` when the source is never
    released (claimed, or the job records another source)."""
    root, job_id = job
    lineage = newest.restored_from
    if lineage is None:
        base = manifest_base_dir(source) if source.endswith(".manifest") else source
        return lambda m: any(_inside(u, base) for u in m.uris())
    if lineage.mode is RestoreMode.CLAIM or not same_source(lineage.source_uri, source):
        return None  # a claimed source is the job's own: never released
    uris: frozenset[str] = frozenset()
    if lineage.source_checkpoint_id >= 0:
        # Deleted by its owner: what lies under its directory still counts.
        with contextlib.suppress(ObjectNotFoundError):
            uris = read_manifest(resolver, lineage.source_uri, limits=limits).uris()
    policy = OwnershipPolicy.for_job(root, job_id, restore=lineage, source=uris)
    return lambda m: bool(policy.source_references(m))
