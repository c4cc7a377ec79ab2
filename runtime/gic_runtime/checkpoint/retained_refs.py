"""What a job's retained checkpoints reference, collected one manifest at a time.

The orphan sweep (:mod:`gic_runtime.checkpoint.sweep`) needs of the retained manifests
only: the objects they reference, their own files, the oldest retained id and the
newest manifest's lineage (the ownership policy). :class:`RetainedRefs` is that, and
:func:`collect_retained_refs` builds it from the job's manifests read one at a time
(:func:`~gic_runtime.checkpoint.catalog.iter_retained`), so a reader (the operator)
holds one decoded manifest and the set of references, never every manifest at once.

Invariants: ``referenced`` holds at most ``limits.max_references`` objects (a manifest
that would take it past raises :class:`~gic_runtime.errors.CorruptFileError` naming
that manifest, before anything is deleted); with ``within`` set it holds only objects
under that directory (the sweep lists nothing else, so the rest cannot matter);
``newest`` keeps the newest manifest without its bucket states. Immutable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from gic_runtime.checkpoint.catalog import iter_retained
from gic_runtime.checkpoint.manifest import Manifest, StoredManifest
from gic_runtime.checkpoint.manifest_limits import DRIVER_LIMITS, ManifestLimits
from gic_runtime.errors import CorruptFileError
from gic_runtime.storage.uri import StoreResolver


@dataclass(frozen=True, slots=True)
class RetainedRefs:
    """What the retained manifests of a job reference (see the module docstring)."""

    #: Objects the retained manifests reference (under ``within`` when collected so).
    referenced: frozenset[str]
    #: The retained manifest files themselves.
    manifests: frozenset[str]
    #: Id of the oldest retained checkpoint (-1: none retained).
    oldest: int
    #: The newest retained manifest, its bucket states left out (``None``: none).
    newest: Manifest | None

    @classmethod
    def of(cls, retained: Iterable[StoredManifest]) -> RetainedRefs:
        """The references of ``retained`` (oldest first), all of them kept."""
        referenced: set[str] = set()
        files: set[str] = set()
        oldest, newest = -1, None
        for stored in retained:
            referenced |= stored.manifest.uris()
            files.add(stored.uri)
            oldest = stored.checkpoint_id if oldest < 0 else min(oldest, stored.checkpoint_id)
            newest = stored.manifest
        return cls(frozenset(referenced), frozenset(files), oldest, _header(newest))


def collect_retained_refs(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    *,
    within: str | None = None,
    limits: ManifestLimits = DRIVER_LIMITS,
) -> RetainedRefs:
    """The references of the job's retained manifests, read one at a time within
    ``limits`` (any unreadable one raises); only objects under directory ``within`` are
    kept when it is given. More than ``limits.max_references`` objects raise
    :class:`CorruptFileError` naming the manifest that took the set past the bound."""
    prefix = None if within is None else within.rstrip("/") + "/"
    referenced: set[str] = set()
    files: set[str] = set()
    oldest, newest = -1, None
    for stored in iter_retained(resolver, root, job_id, limits=limits):
        for uri in stored.manifest.uris():
            if prefix is None or uri.startswith(prefix):
                referenced.add(uri)
        if len(referenced) > limits.max_references:
            raise CorruptFileError(
                f"with this manifest the retained checkpoints of job {job_id!r} reference "
                f"more than {limits.max_references} objects, more than this reader collects; "
                "a job keeps far fewer: inspect the job's checkpoints/ directory (another "
                "process wrote there, or manifests were never deleted)",
                uri=stored.uri,
            )
        files.add(stored.uri)
        oldest = stored.checkpoint_id if oldest < 0 else oldest
        newest = _header(stored.manifest)
    return RetainedRefs(frozenset(referenced), frozenset(files), oldest, newest)


def _header(manifest: Manifest | None) -> Manifest | None:
    """``manifest`` without its bucket states (what the ownership policy reads)."""
    return None if manifest is None else dataclasses.replace(manifest, buckets={})
