"""Who owns an object, and the one guard every deletion by a job passes through.

Ownership classes (first match wins, in this order):

1. :attr:`Owner.CLAIMED_SOURCE` -- an object referenced by the restore source's manifest
   when the job was restored in claim mode. The job owns it from the claim on and
   deletes it when no retained checkpoint references it any more. (The source manifest
   itself is not claimed: it stays, so ``restoredFrom`` keeps pointing at something.)
2. :attr:`Owner.NO_CLAIM_SOURCE` -- an object referenced by the source manifest of a
   no-claim restore, or anything under the source's directory (unless that directory is
   the job's own). Never deleted; no manifest references it after the new job's first
   completed checkpoint (docs/architecture.md I6).
3. :attr:`Owner.SAVEPOINT` -- anything under ``<root>/savepoints/`` or a known savepoint
   directory. Deleted only by explicit disposal, never by a job.
4. :attr:`Owner.JOB` -- anything else under ``<root>/jobs/<job_id>/``: the job's
   timeline, deleted when no retained checkpoint references it.
5. :attr:`Owner.FOREIGN` -- everything else (other jobs, unknown places). Never deleted.

What a job may delete (docs/architecture.md I9), enforced only by
:meth:`OwnershipPolicy.check_delete` and used by :func:`delete_keys` / :func:`delete_uris`,
the only functions in this package that call ``delete_many``: objects classified
:attr:`Owner.JOB` or :attr:`Owner.CLAIMED_SOURCE`, nothing else. Callers decide *whether*
an object is unreferenced; the guard decides whether the job is *allowed* to delete it
and raises :class:`OwnershipError` before deleting anything of a batch that contains a
forbidden object.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gic_runtime.checkpoint.manifest import Manifest, RestoreLineage, RestoreMode
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.errors import OwnershipError
from gic_runtime.layout import job_dir
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectStore
from gic_runtime.storage.uri import StoreResolver, join


class Owner(StrEnum):
    """The owner of one object, as seen by one job (see the module docstring)."""

    JOB = "job"
    CLAIMED_SOURCE = "claimed-source"
    NO_CLAIM_SOURCE = "no-claim-source"
    SAVEPOINT = "savepoint"
    FOREIGN = "foreign"


#: Classes a job may delete once nothing references them.
DELETABLE: frozenset[Owner] = frozenset({Owner.JOB, Owner.CLAIMED_SOURCE})


def _dir(uri: str) -> str:
    return uri.rstrip("/") + "/"


@dataclass(frozen=True, slots=True)
class OwnershipPolicy:
    """Classifies object URIs for one job. Immutable, hence thread-safe.

    ``job_dir`` is ``<root>/jobs/<job_id>``; ``savepoint_dirs`` are directories whose
    contents belong to savepoints; ``restore`` and ``source_uris`` (the objects the
    restore source's manifest references) describe the source the job was restored
    from, if any.
    """

    job_dir: str
    savepoint_dirs: frozenset[str] = frozenset()
    restore: RestoreLineage | None = None
    source_uris: frozenset[str] = frozenset()
    _source_prefix: str | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "job_dir", _dir(self.job_dir))
        object.__setattr__(self, "savepoint_dirs", frozenset(_dir(d) for d in self.savepoint_dirs))
        prefix = None
        if self.restore is not None and self.restore.mode is RestoreMode.NO_CLAIM:
            source_dir = _dir(manifest_base_dir(self.restore.source_uri))
            # A source directory overlapping the job's own would protect the whole job
            # timeline; there only the exact source objects are protected.
            if not (self.job_dir.startswith(source_dir) or source_dir.startswith(self.job_dir)):
                prefix = source_dir
        object.__setattr__(self, "_source_prefix", prefix)

    @classmethod
    def for_job(
        cls,
        root: str,
        job_id: str,
        *,
        restore: RestoreLineage | None = None,
        source: Manifest | Iterable[str] = (),
        savepoint_dirs: Iterable[str] = (),
    ) -> OwnershipPolicy:
        """Policy for ``job_id`` under ``root``; ``<root>/savepoints`` is always a
        savepoint directory. ``source`` is the restore source's manifest (or its URIs)."""
        uris = source.uris() if isinstance(source, Manifest) else frozenset(source)
        return cls(
            job_dir=job_dir(root, job_id),
            savepoint_dirs=frozenset({join(root, "savepoints"), *savepoint_dirs}),
            restore=restore,
            source_uris=frozenset(uris),
        )

    def classify(self, uri: str) -> Owner:
        """The owner of ``uri`` (see the module docstring for the rules)."""
        if self.restore is not None and uri in self.source_uris:
            if self.restore.mode is RestoreMode.CLAIM:
                return Owner.CLAIMED_SOURCE
            return Owner.NO_CLAIM_SOURCE
        if self._source_prefix is not None and uri.startswith(self._source_prefix):
            return Owner.NO_CLAIM_SOURCE
        if any(uri.startswith(d) for d in self.savepoint_dirs):
            return Owner.SAVEPOINT
        if uri.startswith(self.job_dir):
            return Owner.JOB
        return Owner.FOREIGN

    def may_delete(self, uri: str) -> bool:
        """Whether the job may delete ``uri`` once nothing references it."""
        return self.classify(uri) in DELETABLE

    def check_delete(self, uri: str) -> None:
        """Raise :class:`OwnershipError` unless the job may delete ``uri``."""
        owner = self.classify(uri)
        if owner not in DELETABLE:
            raise OwnershipError(
                f"refusing to delete {uri}: it is owned by {owner.value}, and a job deletes "
                f"only objects under its own directory {self.job_dir} or claimed from its "
                "restore source (docs/architecture.md I9); nothing of this batch was deleted"
            )

    def source_references(self, manifest: Manifest) -> frozenset[str]:
        """The objects of the restore source that ``manifest`` references (empty means
        the source is released by this manifest)."""
        if self.restore is None:
            return frozenset()
        owners = (Owner.CLAIMED_SOURCE, Owner.NO_CLAIM_SOURCE)
        return frozenset(u for u in manifest.uris() if self.classify(u) in owners)


def delete_keys(
    policy: OwnershipPolicy,
    store: ObjectStore,
    keys: Sequence[str],
    *,
    batch_size: int = MAX_DELETE_BATCH,
) -> int:
    """Delete ``keys`` of ``store`` in batches, after checking every one against
    ``policy`` (nothing is deleted if any is forbidden). Returns the number requested."""
    for key in keys:
        policy.check_delete(store.uri_for(key))
    size = max(1, min(batch_size, MAX_DELETE_BATCH))
    for start in range(0, len(keys), size):
        store.delete_many(keys[start : start + size])
    return len(keys)


def delete_uris(
    policy: OwnershipPolicy,
    resolver: StoreResolver,
    uris: Iterable[str],
    *,
    batch_size: int = MAX_DELETE_BATCH,
) -> int:
    """Like :func:`delete_keys` for full URIs, possibly spread over several stores."""
    wanted = list(uris)
    for uri in wanted:
        policy.check_delete(uri)
    groups: dict[int, tuple[ObjectStore, list[str]]] = {}
    for uri in wanted:
        store, key = resolver.resolve(uri)
        groups.setdefault(id(store), (store, []))[1].append(key)
    return sum(
        delete_keys(policy, store, keys, batch_size=batch_size) for store, keys in groups.values()
    )
