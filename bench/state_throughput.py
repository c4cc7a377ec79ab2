"""State backend throughput: changes per second per store, with and without the changelog.

Workload (a keyed count, the shape of a streaming aggregation): ``UPDATES`` read-modify-
write updates of a value state over ``KEYS`` distinct keys in ``BUCKETS`` buckets, plus a
map state put per update; then one checkpoint (``persist``). Stores: in-memory, LMDB
(the shipped on-disk store) and rocksdict (RocksDB, the measured alternative, driven
through a minimal adapter below). "without changelog" uses a writer that only counts
sequence numbers; "with changelog" uses the real BatchingChangelogWriter uploading to a
LocalObjectStore under /tmp (falls back to the TestingChangelogWriter if the real one is
missing, and says so in the JSON). Also measures raw store access (point puts/gets,
prefix scans) for LMDB vs rocksdict, and whether a second process can open each store.

Run: ``.venv/bin/python -m bench.state_throughput``. Writes
``bench/results/state_throughput.json`` and ``.png``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.common import SeqOnlyWriter, bar_plot, write_result
from gic_runtime.changelog.records import Op
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore, prefix_end
from gic_runtime.state.stores import BucketMeta, KVStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

BUCKETS = 8
KEYS = 20_000
UPDATES = 100_000
RAW_OPS = 100_000
REPEATS = 3


class RocksDictStore:
    """Minimal KVStore on rocksdict (one RocksDB per bucket, WAL off), for comparison."""

    def __init__(self, directory: Path) -> None:
        import rocksdict

        self._rd = rocksdict
        self._dir = directory
        self._dbs: dict[int, Any] = {}
        self._meta: dict[int, BucketMeta | None] = {}

    def _db(self, bucket: int) -> Any:
        db = self._dbs.get(bucket)
        if db is None:
            db = self._rd.Rdict(
                str(self._dir / f"bucket-{bucket:05d}"), options=self._rd.Options(raw_mode=True)
            )
            wo = self._rd.WriteOptions()
            # A property at run time; rocksdict's stub declares a method.
            wo.disable_wal = True  # type: ignore[method-assign,assignment]
            db.set_write_options(wo)
            self._dbs[bucket] = db
        return db

    def get(self, bucket: int, key: bytes) -> bytes | None:
        return self._db(bucket).get(key)  # type: ignore[no-any-return]

    def put(self, bucket: int, key: bytes, value: bytes) -> None:
        self._meta[bucket] = None
        self._db(bucket)[key] = value

    def delete(self, bucket: int, key: bytes) -> None:
        self._meta[bucket] = None
        del self._db(bucket)[key]

    def append(self, bucket: int, key: bytes, value: bytes) -> None:
        db = self._db(bucket)
        old = db.get(key)
        self.put(bucket, key, value if old is None else old + value)

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:
        for key, _ in self.scan(bucket, prefix):
            self.delete(bucket, key)

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:
        out = []
        end = prefix_end(prefix)
        for key, value in self._db(bucket).items(from_key=prefix):
            if end is not None and key >= end:
                break
            out.append((key, value))
        return out

    def scan_range(self, bucket: int, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        out = []
        for key, value in self._db(bucket).items(from_key=start):
            if key >= stop:
                break
            out.append((key, value))
        return out

    def apply(self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]) -> int:
        raise NotImplementedError

    def snapshot_items(self, bucket: int) -> Any:
        raise NotImplementedError

    def clear_bucket(self, bucket: int) -> None:
        raise NotImplementedError

    def get_meta(self, bucket: int) -> BucketMeta | None:
        return self._meta.get(bucket)

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        self._meta[bucket] = meta

    def flush(self) -> None:
        pass

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()
        self._dbs.clear()


def _real_writer(root: Path) -> tuple[Any, Callable[[], None], str]:
    try:
        from gic_runtime import layout
        from gic_runtime.changelog.uploader import HedgingUploader
        from gic_runtime.changelog.writer import BatchingChangelogWriter
    except ImportError:
        from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

        return TestingChangelogWriter(), lambda: None, "TestingChangelogWriter (real one missing)"
    objects = LocalObjectStore(root)
    resolver = StoreResolver()
    resolver.register(objects)
    uploader = HedgingUploader(
        resolver, lambda: layout.new_segment_uri(objects.root_uri, "bench", 1)
    )
    writer = BatchingChangelogWriter(range(BUCKETS), uploader)

    def close() -> None:
        writer.close()
        uploader.close()

    return writer, close, "BatchingChangelogWriter + HedgingUploader -> LocalObjectStore"


def _keyed_count(make_store: Callable[[Path], KVStore], with_changelog: bool, tmp: Path) -> float:
    """Changes per second of the keyed-count workload (best of REPEATS)."""
    keys = [f"user-{i % KEYS}" for i in range(UPDATES)]
    best = 0.0
    for r in range(REPEATS):
        work = tmp / f"run-{r}-{with_changelog}"
        store = make_store(work / "store")
        if with_changelog:
            writer, close, _ = _real_writer(work / "objects")
        else:
            writer, close = SeqOnlyWriter(), (lambda: None)
        backend = KeyedStateBackend(range(BUCKETS), BUCKETS, store, writer)
        counts = backend.value_state("count")
        last = backend.map_state("last")
        t0 = time.perf_counter()
        for i, key in enumerate(keys):
            counts.set(key, counts.get(key, 0) + 1)
            last.put(key, i % 4, i)
        if with_changelog:
            backend.checkpoint().result(timeout=120)
        store.flush()
        elapsed = time.perf_counter() - t0
        best = max(best, 2 * UPDATES / elapsed)
        close()
        store.close()
        shutil.rmtree(work, ignore_errors=True)
    return best


def _raw_access(make_store: Callable[[Path], KVStore], tmp: Path) -> dict[str, float]:
    store = make_store(tmp / "raw")
    keys = [b"\x6d\xa1m" + f"{i * 7919 % RAW_OPS:08d}".encode() for i in range(RAW_OPS)]
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    for k in keys:
        store.put(0, k, b"v" * 20)
    store.flush()
    out["put/s"] = RAW_OPS / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for k in keys:
        store.get(0, k)
    out["get/s"] = RAW_OPS / (time.perf_counter() - t0)
    prefixes = [b"\x6d\xa1m" + f"{i:06d}".encode() for i in range(0, RAW_OPS // 100, 7)]
    t0 = time.perf_counter()
    for p in prefixes:
        store.scan(0, p)  # 100 entries each
    out["scan100/s"] = len(prefixes) / (time.perf_counter() - t0)
    store.close()
    return out


_OPEN_TWICE = """
import sys
kind, path = sys.argv[1], sys.argv[2]
if kind == "lmdb":
    from gic_runtime.state.lmdb_store import LmdbStore
    s = LmdbStore(path, map_size=1 << 26)
    s.put(0, b"other", b"1")
    s.close()
else:
    import rocksdict
    db = rocksdict.Rdict(path + "/bucket-00000", options=rocksdict.Options(raw_mode=True))
    db[b"other"] = b"1"
    db.close()
"""


def _second_process_can_write(kind: str, make_store: Callable[[Path], KVStore], tmp: Path) -> bool:
    path = tmp / f"shared-{kind}"
    store = make_store(path)
    store.put(0, b"mine", b"1")
    store.flush()
    proc = subprocess.run(
        [sys.executable, "-c", _OPEN_TWICE, kind, str(path)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    store.close()
    return proc.returncode == 0


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="gic-bench-state-"))
    stores: dict[str, Callable[[Path], KVStore]] = {
        "in-memory": lambda p: InMemoryStore(),
        "lmdb": lambda p: LmdbStore(p, map_size=1 << 30),
        "rocksdict": RocksDictStore,  # type: ignore[dict-item]
    }
    try:
        _, close, changelog_kind = _real_writer(tmp / "probe")
        close()
        results: dict[str, dict[str, float]] = {}
        for name, make in stores.items():
            without = _keyed_count(make, False, tmp)
            with_cl = _keyed_count(make, True, tmp)
            results[name] = {
                "changes/s without changelog": round(without),
                "changes/s with changelog": round(with_cl),
                "dual-write overhead ratio": round(without / with_cl, 3),
            }
            print(name, results[name], flush=True)
        raw = {name: _raw_access(stores[name], tmp / name) for name in ("lmdb", "rocksdict")}
        multi = {
            name: _second_process_can_write(name, stores[name], tmp)
            for name in ("lmdb", "rocksdict")
        }
        print("raw", raw, "second process can write", multi, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_result(
        "state_throughput",
        {
            "workload": {
                "buckets": BUCKETS,
                "keys": KEYS,
                "updates": UPDATES,
                "changes": 2 * UPDATES,
                "per_update": "value get+set (read-modify-write) and one map put",
                "best_of": REPEATS,
            },
            "changelog": changelog_kind,
            "results": results,
            "raw_store_access": raw,
            "second_process_can_open_and_write_while_first_is_open": multi,
        },
    )
    bar_plot(
        "state_throughput",
        "Keyed-count state changes per second",
        {
            "without changelog": {n: r["changes/s without changelog"] for n, r in results.items()},
            "with changelog": {n: r["changes/s with changelog"] for n, r in results.items()},
        },
        "changes / s",
    )


if __name__ == "__main__":
    main()
