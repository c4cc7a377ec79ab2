"""What judging a restore source's release costs: a narrow listing, only on change.

While a GICJob restored NoClaim has not released its source, every pass asks
:meth:`~gic_operator.storage.job_storage.JobStorage.restore_released`, and the answer
needs the job's checkpoint manifests. Listing the job's ``checkpoints/`` directory on
every pass would make each pass cost as much as whatever the tenant's driver stored
there (99,000 stray files: 99 LIST requests per pass on S3). So:

* **a narrow, derived prefix**: :func:`iter_release_manifests` lists only
  ``jobs/<job>/checkpoints/chk-`` (the manifests' own name prefix,
  :func:`gic_runtime.layout.manifest_uri`), never the job's directory, never
  ``epochs/``; files of any other name cost nothing on S3 (the local store reads the
  directory's entries, without a ``stat`` per entry); the listing is bounded by what the
  job keeps there (:func:`release_limit`: its ``retainedCheckpoints`` plus
  :data:`MANIFEST_SLACK`, never more than :data:`MAX_RELEASE_OBJECTS`), past which the
  release cannot be told (``TooManyObjectsError``) and stays unreported, so a judgment
  reads at most that many manifests;
* **only on change**: :class:`ReleaseChecks` remembers each judgment under a key the
  caller builds from what the operator recorded and what the driver last reported (the
  launch's epoch, the reported epoch and checkpoint id, see
  :meth:`gic_operator.jobs.job_observer.JobObserver.observe`); a pass whose key was
  judged before reuses the judgment and lists nothing. A judgment "not released" is
  made again after :data:`RECHECK_SECONDS` even without a change (a driver that stopped
  reporting still gets its release noticed); "released" is final.

The same narrow prefix answers whether a job has a checkpoint at all
(:func:`has_manifest`), which a launch that waits for its restore source asks on every
pass: it stops at the first manifest name, so stray files of other names cost nothing
there either.

The key only decides *when* the manifests are looked at again, never *what* they say:
the release is judged from the manifests (a driver's report naming a new checkpoint
makes the operator list again, at most once per change and with the bound above).
Superseded manifests (:mod:`gic_runtime.checkpoint.claims`) count here too, so that no
listing of ``epochs/`` is needed: they can only hold a source longer, never release it
early.

Thread-safety: :class:`ReleaseChecks` is guarded by a lock; the functions are
stateless.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Final

from gic_runtime.checkpoint.catalog import (
    MAX_CHECKPOINT_OBJECTS,
    CheckpointRef,
    read_checkpoint,
    resolve_prefix,
)
from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.manifest_limits import ManifestLimits
from gic_runtime.errors import ObjectNotFoundError
from gic_runtime.layout import checkpoints_dir, parse_checkpoint_id
from gic_runtime.storage.listing import list_bounded
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "MANIFEST_PREFIX",
    "MANIFEST_SLACK",
    "MAX_RELEASE_OBJECTS",
    "RECHECK_SECONDS",
    "ReleaseChecks",
    "has_manifest",
    "iter_release_manifests",
    "list_release_manifests",
    "release_limit",
]

#: The name prefix every checkpoint manifest has (``chk-<id:012d>[.e<epoch>].manifest``).
MANIFEST_PREFIX: Final = "chk-"
#: Objects beyond ``retainedCheckpoints`` a judgment accepts under ``checkpoints/chk-``:
#: superseded manifests, alternate names, what a crash left for the next sweep.
MANIFEST_SLACK: Final = 64
#: Most objects under ``checkpoints/chk-`` a judgment ever lists (two S3 pages), whatever
#: the limit asked for (``retainedCheckpoints`` is at most 1000).
MAX_RELEASE_OBJECTS: Final = 2000
#: Seconds after which a judgment "not released" is made again without any change.
RECHECK_SECONDS: Final = 300.0
_CACHE_SIZE: Final = 1024
_HINT: Final = (
    "a job keeps its retainedCheckpoints manifests there and a few more, so whether it "
    "released its restore source cannot be told (the source stays protected): move out "
    "what does not belong there"
)


def release_limit(retained: int) -> int:
    """The most objects a judgment lists under ``checkpoints/chk-`` of a job keeping
    ``retained`` checkpoints (``spec.checkpointing.retainedCheckpoints``)."""
    return min(max(retained, 1) + MANIFEST_SLACK, MAX_RELEASE_OBJECTS)


def list_release_manifests(
    resolver: StoreResolver, root: str, job_id: str, limit: int
) -> tuple[CheckpointRef, ...]:
    """The checkpoint manifests of ``job_id`` under ``root``, oldest first (unread), from
    one listing of ``checkpoints/chk-`` bounded by ``limit`` objects (see the module
    docstring)."""
    store, directory = resolve_prefix(resolver, checkpoints_dir(root, job_id))
    prefix = directory + MANIFEST_PREFIX
    refs = []
    for info in list_bounded(store, prefix, limit, what="manifests", hint=_HINT):
        checkpoint_id = parse_checkpoint_id(info.key)
        if checkpoint_id is not None and "/" not in info.key[len(directory) :]:
            refs.append(CheckpointRef(checkpoint_id, store.uri_for(info.key)))
    refs.sort(key=lambda ref: (ref.checkpoint_id, ref.uri))
    return tuple(refs)


def has_manifest(resolver: StoreResolver, root: str, job_id: str) -> bool:
    """Whether ``job_id`` under ``root`` has a checkpoint manifest: one listing of
    ``checkpoints/chk-`` (bounded like the runtime's listing of ``checkpoints/``,
    :data:`~gic_runtime.checkpoint.catalog.MAX_CHECKPOINT_OBJECTS`), stopped at the first
    manifest name (no manifest is read)."""
    store, directory = resolve_prefix(resolver, checkpoints_dir(root, job_id))
    prefix = directory + MANIFEST_PREFIX
    listing = list_bounded(store, prefix, MAX_CHECKPOINT_OBJECTS, what="manifests", hint=_HINT)
    try:
        for info in listing:
            if parse_checkpoint_id(info.key) is not None and "/" not in info.key[len(directory) :]:
                return True
        return False
    finally:
        close = getattr(listing, "close", None)  # stop the listing: no further page
        if close is not None:
            close()


def iter_release_manifests(
    resolver: StoreResolver, root: str, job_id: str, limit: int, *, limits: ManifestLimits
) -> Iterator[StoredManifest]:
    """Every checkpoint manifest of the job (superseded ones included, see the module
    docstring), newest first, each read only when reached and within ``limits``, from a
    listing bounded by ``limit`` objects. An unreadable one raises; one deleted between
    the listing and its read is passed over."""
    for ref in reversed(list_release_manifests(resolver, root, job_id, limit)):
        try:
            yield read_checkpoint(resolver, ref.uri, limits=limits)
        except ObjectNotFoundError:
            continue


class ReleaseChecks:
    """Release judgments by key (see the module docstring): at most ``size`` kept, least
    recently used dropped. Thread-safe."""

    def __init__(
        self, *, size: int = _CACHE_SIZE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._judged: OrderedDict[Hashable, tuple[bool, float]] = OrderedDict()
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> bool | None:
        """The judgment made under ``key``; ``None`` when there is none, or it was "not
        released" and is older than :data:`RECHECK_SECONDS`."""
        with self._lock:
            found = self._judged.get(key)
            if found is None:
                return None
            released, at = found
            if not released and self._clock() - at >= RECHECK_SECONDS:
                return None
            self._judged.move_to_end(key)
            return released

    def remember(self, key: Hashable, released: bool) -> None:
        """Keep the judgment ``released`` made under ``key`` now."""
        with self._lock:
            self._judged[key] = (released, self._clock())
            self._judged.move_to_end(key)
            while len(self._judged) > self._size:
                self._judged.popitem(last=False)
