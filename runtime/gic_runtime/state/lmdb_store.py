"""On-disk :class:`~gic_runtime.state.stores.KVStore` on LMDB, shared by the processes of
one machine (the executor-local copy of bucket state).

Why LMDB (measured on this machine, 2 cores; ``bench/state_throughput.py``):

* Multi-process: every Python worker of an executor opens the same directory and sees
  the others' committed writes. RocksDB (rocksdict) takes a ``LOCK`` per database: a
  second process cannot open it for writing at all (measured: it fails), only as a
  read-only secondary that has to catch up.
* MVCC read transactions are consistent snapshots for free and may move to another
  thread, which is what materialization needs.
* Speed, through this adapter, 100k keys, 20-byte values: puts 1.02M/s (LMDB) vs 0.89M/s
  (rocksdict, WAL off), point gets 0.98M/s vs 0.99M/s, 100-entry prefix scans 41.6k/s vs
  35.4k/s; keyed count through the backend 230k vs 198k changes/s (in-memory: 261k).
  That needs batching: one write transaction per change runs only ~150k puts/s, so the
  store keeps one write transaction open per bucket and commits it on :meth:`flush`,
  before a view, or every ``commit_every`` changes. ``get_many`` / ``put_many`` (one
  C-level ``putmulti`` per call) halve the per-key cost again for sorted runs of keys.

Layout: one LMDB environment per bucket (``<dir>/bucket-<nnnnn>``, the bucket number
zero-padded to five digits, e.g. ``bucket-00042``), so the writer lock is per bucket
and tasks owning different buckets never wait on each other. Each holds a ``data``
database and a ``meta`` database with the bucket's :class:`BucketMeta`.
Environments are opened with ``sync=False``: a committed transaction survives a process
crash (it is in the page cache) but not necessarily a machine crash, which is fine for
a cache that is validated against the checkpoint lineage before use.

They are opened with ``writemap=True``: a write transaction changes the pages of the
memory map itself. Without it LMDB copies every page a transaction dirties into memory
of its own and, after the commit, keeps those copies on a free list of the environment
until it is closed; with one environment per bucket, every bucket's list grows to its
largest transaction, so a worker that restored or loaded a bucket range kept about the
range's whole data file in anonymous memory (measured: about 1.5 GB per worker after
restoring 1 GB of state, docs/architecture.md §13.3). With the writable map the pages
are the file's, which the kernel writes back and reclaims. Two consequences: the data
file's apparent size is the map size (a sparse file; only written pages take disk), and
a write into the map on a full disk would kill the process with ``SIGBUS`` instead of
failing a call, so a write transaction only begins while the directory's filesystem has
at least :data:`MIN_FREE_BYTES` free (:class:`~gic_runtime.errors.StateError` naming
the directory otherwise).

Every page a process reads or writes stays mapped into it until the kernel reclaims it,
so after enough batches each worker maps most of the local copy. After every task the
executor's task core calls :func:`bound_mapped_pages` with the job's
``local_state_mapped_limit``: once the worker's resident file-backed memory has grown by
more than that since it last did, it unmaps this process's pages of its environments'
data files (:func:`release_mapped_pages`, :mod:`gic_runtime.state.mapped_pages`; the
data stays in the page cache and is mapped again on the next access), so a worker's
resident size is bounded by the setting, not by the state's size.

Invariants and thread-safety: the metadata is removed in the same transaction as the
first data change after it was set, so other processes never see metadata that does not
describe the data. A bucket's pending write transaction belongs to the thread that
started it; any other thread touching that bucket gets a :class:`StateError`. Views may
be iterated on any thread; :meth:`flush` commits the calling thread's transactions,
so threads that own different buckets (a background restore beside the task thread)
never commit each other's. One process opens each directory once (instances on the same
directory share environments); never use a store across ``fork``.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import lmdb
import msgpack  # type: ignore[import-untyped, unused-ignore]

from gic_runtime.changelog.records import Op
from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.state import mapped_pages
from gic_runtime.state.stores import BucketMeta

_META_KEY: Final = b"lineage"
_DEFAULT_MAP_SIZE: Final = 64 << 30
MIN_FREE_BYTES: Final = 256 << 20
"""Free bytes the local filesystem must have for a write transaction to begin: well
above what one task writes between two checks (one bucket's changes of a batch)."""


class _BucketEnv:
    """One bucket's environment, shared by every store instance of this process."""

    def __init__(self, path: Path, map_size: int) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            self.env: Any = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=2,
                sync=False,
                metasync=False,
                readahead=False,
                writemap=True,
                lock=True,
            )
        except (OSError, lmdb.Error) as exc:
            raise ConfigurationError(
                f"cannot open LMDB state store at {path}: {exc}; check the directory is "
                "writable and on a local filesystem"
            ) from exc
        self.path = path
        self.data_file = str(path.resolve() / "data.mdb")
        self.data: Any = self.env.open_db(b"data")
        self.meta: Any = self.env.open_db(b"meta")
        self.txn: Any = None
        self.owner = 0
        self.ops = 0
        self.meta_present: bool | None = None
        self.refs = 0


_REGISTRY: dict[str, _BucketEnv] = {}
_REGISTRY_LOCK = threading.Lock()
_REGISTRY_PID = [os.getpid()]


def _acquire(path: Path, map_size: int) -> _BucketEnv:
    with _REGISTRY_LOCK:
        if _REGISTRY_PID[0] != os.getpid():  # forked: inherited environments are unusable
            _REGISTRY.clear()
            _REGISTRY_PID[0] = os.getpid()
        key = str(path.resolve())
        benv = _REGISTRY.get(key)
        if benv is None:
            benv = _REGISTRY[key] = _BucketEnv(path, map_size)
        benv.refs += 1
        return benv


def _release(benv: _BucketEnv) -> None:
    with _REGISTRY_LOCK:
        benv.refs -= 1
        if benv.refs == 0:
            if benv.txn is not None:
                benv.txn.commit()
                benv.txn = None
            benv.env.close()
            _REGISTRY.pop(str(benv.path.resolve()), None)


def release_mapped_pages() -> mapped_pages.Released:
    """Unmap this process's pages of every bucket environment it has open, keeping their
    data (:mod:`gic_runtime.state.mapped_pages`): a worker's resident size then follows
    what it touched since, not the local copy's size."""
    with _REGISTRY_LOCK:
        if _REGISTRY_PID[0] != os.getpid():
            return mapped_pages.Released(supported=True)
        files = {benv.data_file for benv in _REGISTRY.values()}
    return mapped_pages.release(files)


@functools.cache
def _gate(limit: int) -> mapped_pages.GrowthGate:
    """This process's gate for ``limit`` (a forked child inherits its parent's level,
    which only moves its first release earlier or later)."""
    return mapped_pages.GrowthGate(limit)


def bound_mapped_pages(limit: int) -> mapped_pages.Released | None:
    """:func:`release_mapped_pages` when this process's resident file-backed memory has
    grown by more than ``limit`` bytes since the last time this released (the first
    time: since zero); None when it has not, or ``limit`` is 0 (no bound). The
    executor's task core calls it after every task with the job's
    ``local_state_mapped_limit``; one caller at a time."""
    if limit <= 0:
        return None
    gate = _gate(limit)
    if not gate.should_release():
        return None
    released = release_mapped_pages()
    gate.released()
    return released


def _check_free_space(path: Path) -> None:
    """Refuse to begin writing into ``path``'s memory map on a nearly full filesystem
    (see the module docstring: a full disk would kill the process)."""
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        raise StateError(
            f"cannot check the free space of the LMDB state store {path}: {exc}"
        ) from exc
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE_BYTES:
        raise StateError(
            f"the local state directory {path} has {free >> 20} MiB free, below the "
            f"{MIN_FREE_BYTES >> 20} MiB a write needs; give the executors' local_dir more "
            "disk (an emptyDir sizeLimit or a larger volume) or fewer buckets per executor"
        )


class _LmdbView:
    """A read transaction over one bucket; iterable on any thread."""

    def __init__(self, benv: _BucketEnv) -> None:
        self._txn: Any = benv.env.begin(db=benv.data, buffers=False)
        self._iterated = False

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        if self._txn is None or self._iterated:
            raise StateError("bucket view was already closed or iterated")
        self._iterated = True
        try:
            cursor = self._txn.cursor()
            yield from cursor.iternext(keys=True, values=True)
        finally:
            self.close()

    def close(self) -> None:
        if self._txn is not None:
            self._txn.abort()
            self._txn = None

    def __enter__(self) -> _LmdbView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LmdbStore:
    """:class:`~gic_runtime.state.stores.KVStore` in ``directory`` (see module docstring).

    ``map_size`` is the per-bucket size limit in bytes (address space, not disk: files
    grow as needed); ``commit_every`` bounds the changes in one write transaction.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        map_size: int = _DEFAULT_MAP_SIZE,
        commit_every: int = 100_000,
    ) -> None:
        self._dir = Path(directory).absolute()
        self._map_size = map_size
        self._commit_every = commit_every
        self._envs: dict[int, _BucketEnv] = {}
        self._closed = False

    @property
    def directory(self) -> Path:
        return self._dir

    # --- environments and transactions --------------------------------------------------

    def _env(self, bucket: int) -> _BucketEnv:
        benv = self._envs.get(bucket)
        if benv is None:
            if self._closed:
                raise StateError(f"LMDB state store {self._dir} is closed")
            benv = self._envs[bucket] = _acquire(self._dir / f"bucket-{bucket:05d}", self._map_size)
        if benv.txn is not None and benv.owner != threading.get_ident():
            raise StateError(
                f"bucket {bucket} of {self._dir} has a write transaction open on another "
                "thread; a bucket's state must be used from one thread"
            )
        return benv

    def _wtxn(self, benv: _BucketEnv, *, data_change: bool = True) -> Any:
        txn = benv.txn
        if txn is None:
            _check_free_space(benv.path)
            txn = benv.txn = benv.env.begin(write=True)
            benv.owner = threading.get_ident()
            benv.ops = 0
            benv.meta_present = None  # another process may have set it since
        if data_change and benv.meta_present is not False:
            txn.delete(_META_KEY, db=benv.meta)
            benv.meta_present = False
        return txn

    def _done(self, benv: _BucketEnv, n: int = 1) -> None:
        benv.ops += n
        if benv.ops >= self._commit_every:
            self._commit(benv)

    @staticmethod
    def _commit(benv: _BucketEnv) -> None:
        if benv.txn is not None:
            txn, benv.txn = benv.txn, None
            try:
                txn.commit()
            except lmdb.MapFullError as exc:
                raise StateError(
                    f"LMDB state store {benv.path} is full; raise map_size of LmdbStore"
                ) from exc

    # --- KVStore -------------------------------------------------------------------------

    def get(self, bucket: int, key: bytes) -> bytes | None:
        benv = self._env(bucket)
        if benv.txn is not None:
            return benv.txn.get(key, db=benv.data)  # type: ignore[no-any-return]
        with benv.env.begin(db=benv.data, buffers=False) as txn:
            return txn.get(key)  # type: ignore[no-any-return]

    def put(self, bucket: int, key: bytes, value: bytes) -> None:
        benv = self._env(bucket)
        self._wtxn(benv).put(key, value, db=benv.data)
        self._done(benv)

    def get_many(self, bucket: int, keys: Sequence[bytes]) -> list[bytes | None]:
        benv = self._env(bucket)
        db = benv.data
        if benv.txn is not None:
            get = benv.txn.get
            return [get(key, None, db) for key in keys]
        with benv.env.begin(db=db, buffers=False) as txn:
            get = txn.get
            return [get(key) for key in keys]

    def put_many(self, bucket: int, items: Sequence[tuple[bytes, bytes]]) -> None:
        if not items:
            return
        benv = self._env(bucket)
        self._wtxn(benv).cursor(db=benv.data).putmulti(items)
        self._done(benv, len(items))

    def load_sorted(self, bucket: int, items: Iterable[tuple[bytes, bytes]]) -> int:
        """MDB_APPEND (``putmulti(append=True)``): no search, and pages filled whole
        (values of 2 KB took one 4 KiB page each when put one by one, half a page each
        appended); LMDB refuses a key that does not ascend, which raises."""
        benv = self._env(bucket)
        items = list(items)
        if not items:
            return 0
        consumed, added = self._wtxn(benv).cursor(db=benv.data).putmulti(items, append=True)
        self._done(benv, max(added, 1))
        if added != consumed or consumed != len(items):
            raise StateError(
                f"bucket {bucket}: {consumed - added} of {consumed} keys of a sorted load "
                f"did not ascend above the bucket's keys ({self._dir})"
            )
        return int(added)

    def delete(self, bucket: int, key: bytes) -> None:
        benv = self._env(bucket)
        self._wtxn(benv).delete(key, db=benv.data)
        self._done(benv)

    def append(self, bucket: int, key: bytes, value: bytes) -> None:
        benv = self._env(bucket)
        txn = self._wtxn(benv)
        old = txn.get(key, db=benv.data)
        txn.put(key, value if old is None else old + value, db=benv.data)
        self._done(benv)

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:
        benv = self._env(bucket)
        cursor = self._wtxn(benv).cursor(db=benv.data)
        n = 0
        if cursor.set_range(prefix):
            while cursor.key().startswith(prefix) and cursor.delete():
                n += 1
        self._done(benv, max(n, 1))

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:
        benv = self._env(bucket)
        if benv.txn is not None:
            return self._scan(benv.txn.cursor(db=benv.data), prefix)
        with benv.env.begin(db=benv.data, buffers=False) as txn:
            return self._scan(txn.cursor(), prefix)

    def scan_range(self, bucket: int, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        benv = self._env(bucket)
        if benv.txn is not None:
            return self._scan_range(benv.txn.cursor(db=benv.data), start, stop)
        with benv.env.begin(db=benv.data, buffers=False) as txn:
            return self._scan_range(txn.cursor(), start, stop)

    @staticmethod
    def _scan_range(cursor: Any, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        if cursor.set_range(start):
            for key, value in cursor.iternext(keys=True, values=True):
                if key >= stop:
                    break
                out.append((key, value))
        return out

    @staticmethod
    def _scan(cursor: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        if cursor.set_range(prefix):
            for key, value in cursor.iternext(keys=True, values=True):
                if not key.startswith(prefix):
                    break
                out.append((key, value))
        return out

    def apply(self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]) -> int:
        """Each change in order, as :meth:`put`, :meth:`delete`, :meth:`append` or
        :meth:`delete_prefix` would apply it, in the bucket's write transaction (committed
        every ``commit_every`` changes, as one by one)."""
        benv = self._env(bucket)
        db = benv.data
        txn: Any = None
        n = 0
        for op, key, value in changes:
            if txn is None:
                txn = self._wtxn(benv)
            if op is Op.DELETE:
                txn.delete(key, db=db)
            elif op is Op.PUT:
                txn.put(key, value, db=db)
            elif op is Op.APPEND:
                old = txn.get(key, db=db)
                txn.put(key, value if old is None else old + value, db=db)
            else:
                cursor = txn.cursor(db=db)
                if cursor.set_range(key):
                    while cursor.key().startswith(key) and cursor.delete():
                        pass
            n += 1
            benv.ops += 1
            if benv.ops >= self._commit_every:
                self._commit(benv)
                txn = None
        return n

    def snapshot_items(self, bucket: int) -> _LmdbView:
        benv = self._env(bucket)
        self._commit(benv)
        return _LmdbView(benv)

    def clear_bucket(self, bucket: int) -> None:
        benv = self._env(bucket)
        txn = self._wtxn(benv, data_change=False)
        txn.drop(benv.data, delete=False)
        txn.delete(_META_KEY, db=benv.meta)
        benv.meta_present = False
        self._commit(benv)

    def get_meta(self, bucket: int) -> BucketMeta | None:
        benv = self._env(bucket)
        if benv.txn is not None:
            raw = benv.txn.get(_META_KEY, db=benv.meta)
        else:
            with benv.env.begin(db=benv.meta, buffers=False) as txn:
                raw = txn.get(_META_KEY)
        if raw is None:
            return None
        seq, token = msgpack.unpackb(raw)
        return BucketMeta(int(seq), str(token))

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        benv = self._env(bucket)
        txn = self._wtxn(benv, data_change=False)
        txn.put(_META_KEY, msgpack.packb([meta.seq, meta.token]), db=benv.meta)
        benv.meta_present = True

    def flush(self) -> None:
        """Commit the write transactions the calling thread has open (each bucket's
        pending writes belong to the thread that made them; a bucket being restored on
        a background thread is committed by that thread)."""
        me = threading.get_ident()
        for benv in list(self._envs.values()):
            if benv.txn is not None and benv.owner == me:
                self._commit(benv)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        envs, self._envs = self._envs, {}
        for benv in envs.values():
            _release(benv)

    def buckets(self) -> list[int]:
        """Buckets that have an environment in the directory (from any process)."""
        if not self._dir.exists():
            return []
        return sorted(
            int(p.name.split("-", 1)[1])
            for p in self._dir.iterdir()
            if p.name.startswith("bucket-") and p.is_dir()
        )
