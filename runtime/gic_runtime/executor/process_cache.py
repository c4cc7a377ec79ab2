"""What one executor process keeps between the state tasks it runs.

Spark reuses Python worker processes across tasks, and any worker of an executor may
get any task. This module is the per-process cache :func:`run_task
<gic_runtime.executor.core.run_task>` builds on:

* one :class:`~gic_runtime.storage.uri.StoreResolver` per storage root;
* one :class:`~gic_runtime.changelog.uploader.HedgingUploader` per attempt
  ``(root, job, epoch)`` (its segment names go under that epoch), shared by every task
  of the attempt this process runs;
* one :class:`~gic_runtime.state.lmdb_store.LmdbStore` instance per
  ``(<local_dir>/<job_id>/state, bucket range)``, kept for the life of the process so a
  background view never outlives its environment; instances on one directory share
  the LMDB environments (each bucket's environment is opened once per process), and
  an instance's ``flush`` only touches its own range;
* one :class:`~gic_runtime.executor.state_stack.ExecutorEntry` per ``(local_dir, root,
  job, epoch, bucket range)``: a changelog writer and keyed state backend over the shared
  uploader and store, assembled by :func:`~gic_runtime.executor.state_stack.build_entry`
  and restored to the barrier's lineage by every task (so state left by a failed or
  foreign history is never trusted).

Invariants: an attempt older than the newest one this process has seen for the same
``(root, job)`` gets :class:`~gic_runtime.errors.FencedError`; when a newer attempt
appears, the older attempt's entries are dropped and its uploader closed in the
background. A process created by ``fork`` starts with an empty cache.

Thread-safety: the cache is guarded by one lock; an entry's ``lock`` serializes the
tasks that use it (one at a time per process, as Spark runs them).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable

from gic_runtime.changelog.uploader import HedgingUploader
from gic_runtime.coordination.barrier import Barrier
from gic_runtime.errors import FencedError
from gic_runtime.executor import allocator
from gic_runtime.executor.state_stack import (
    EntryKey,
    ExecutorEntry,
    LocalPaths,
    attempt_uploader,
    build_entry,
    entry_key,
    local_paths,
)
from gic_runtime.materialization.pool import (
    shutdown_local_materializations,
    wait_local_materializations,
)
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.storage.uri import StoreResolver, open_store

__all__ = ["close_local_executor", "discard", "entry_for"]


class _Cache:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.resolvers: dict[str, StoreResolver] = {}
        self.uploaders: dict[tuple[str, str, int], HedgingUploader] = {}
        self.stores: dict[tuple[str, int, int], LmdbStore] = {}
        self.entries: dict[EntryKey, ExecutorEntry] = {}
        self.newest_epoch: dict[tuple[str, str], int] = {}


_CACHE = [_Cache()]
_LOCK = threading.Lock()


def _cache() -> _Cache:
    """The cache of this process (call with ``_LOCK`` held)."""
    if _CACHE[0].pid != os.getpid():  # forked: inherited threads and handles are unusable
        _CACHE[0] = _Cache()
    return _CACHE[0]


def entry_for(barrier: Barrier, task_index: int) -> ExecutorEntry:
    """The cached entry for task ``task_index`` of ``barrier`` (created on first use)."""
    allocator.tune()  # once per process, before the state's threads exist
    owned = barrier.bucket_range(task_index)
    paths = local_paths(barrier)
    key = entry_key(barrier, paths, owned)
    retired: list[Callable[[], None]] = []
    try:
        with _LOCK:
            cache = _cache()
            _fence(cache, barrier, retired)
            entry = cache.entries.get(key)
            if entry is not None and entry.settings == barrier.settings:
                return entry
            entry = _build(cache, barrier, paths, owned)
            cache.entries[key] = entry
            return entry
    finally:
        for close in retired:
            close()


def discard(entry: ExecutorEntry) -> None:
    """Forget ``entry`` (after a failed task): the next task builds a fresh one."""
    with _LOCK:
        cache = _cache()
        if cache.entries.get(entry.key) is entry:
            del cache.entries[entry.key]
    entry.abandon()


def close_local_executor(*, wait: bool = True, timeout: float | None = None) -> None:
    """Release everything this process cached: background materializations (awaited up
    to ``timeout`` when ``wait``), writers, uploaders and LMDB stores (``wait=False``
    abandons uploads in flight and leaves the stores to process exit). For shutdown and
    tests; the next task starts from scratch (its state restores from the local copy)."""
    if wait:
        wait_local_materializations(timeout)
    shutdown_local_materializations(wait=wait)
    with _LOCK:
        cache = _cache()
        _CACHE[0] = _Cache()
    for entry in cache.entries.values():
        entry.abandon()
        if wait:
            entry.writer.close()
    for uploader in cache.uploaders.values():
        if wait:
            uploader.close()
        else:
            _close_in_background(uploader)
    if wait:  # without waiting, background views may still read the environments
        for store in cache.stores.values():
            store.close()


# --- internals ---------------------------------------------------------------------------


def _fence(cache: _Cache, barrier: Barrier, retired: list[Callable[[], None]]) -> None:
    job = (barrier.root, barrier.job_id)
    newest = cache.newest_epoch.get(job)
    if newest is not None and barrier.epoch < newest:
        raise FencedError(
            f"job {barrier.job_id} attempt (epoch {barrier.epoch}) is older than attempt "
            f"{newest}, which already ran tasks on this executor; this driver was replaced "
            "and must stop"
        )
    if newest is not None and barrier.epoch > newest:
        for key in [k for k in cache.entries if k[1:3] == job and k[3] < barrier.epoch]:
            # abandoned: its uploads settle on their own; its background restore stops
            # (after the bucket in progress) and gives the range's locks back
            retired.append(cache.entries.pop(key).abandon)
        for ukey in [k for k in cache.uploaders if k[:2] == job and k[2] < barrier.epoch]:
            uploader = cache.uploaders.pop(ukey)
            retired.append(functools.partial(_close_in_background, uploader))
    cache.newest_epoch[job] = max(barrier.epoch, newest or barrier.epoch)


def _close_in_background(uploader: HedgingUploader) -> None:
    """Close an abandoned uploader without waiting for its uploads in flight."""
    threading.Thread(target=uploader.close, name="gic-uploader-close", daemon=True).start()


def _resolver(cache: _Cache, root: str) -> StoreResolver:
    resolver = cache.resolvers.get(root)
    if resolver is None:
        resolver = StoreResolver()
        resolver.register(open_store(root))
        cache.resolvers[root] = resolver
    return resolver


def _uploader(cache: _Cache, barrier: Barrier, resolver: StoreResolver) -> HedgingUploader:
    key = (barrier.root, barrier.job_id, barrier.epoch)
    uploader = cache.uploaders.get(key)
    if uploader is None:
        uploader = attempt_uploader(resolver, barrier, barrier.settings.uploader)
        cache.uploaders[key] = uploader
    return uploader


def _store(cache: _Cache, paths: LocalPaths, owned: range) -> LmdbStore:
    store_key = (str(paths.state), owned.start, owned.stop)
    store = cache.stores.get(store_key)
    if store is None:
        store = cache.stores[store_key] = LmdbStore(paths.state)
    return store


def _build(cache: _Cache, barrier: Barrier, paths: LocalPaths, owned: range) -> ExecutorEntry:
    resolver = _resolver(cache, barrier.root)
    return build_entry(
        barrier,
        owned,
        paths=paths,
        resolver=resolver,
        uploader=_uploader(cache, barrier, resolver),
        store=_store(cache, paths, owned),
    )
