"""Orphan sweep benchmark: how fast the operator clears a crashed job's orphans on S3.

Setup: a real S3 server (SeaweedFS, :class:`~tests.support.testing_s3server.TestingS3Server`)
and one job directory ``<root>/jobs/<job>/`` holding ``orphans`` unreferenced changelog
segments (``changelog/<epoch>/<uuid>.seg``, spread over four epochs, uploaded with a pool
of threads) plus one completed checkpoint: a real manifest that references
``referenced`` further segments.

Measured, in this order:

``list``
    a dry run of the runtime's sweep (the same listing and classification, nothing
    deleted): the rate at which the job's directories are listed and classified;
``sweep``
    :meth:`gic_operator.storage.job_storage.JobStorage.sweep_orphans`, exactly what the operator
    runs during crash recovery (retained manifests read, listing, batched deletes).

Invariant checked afterwards (a failure raises :class:`SweepBenchmarkError`): every
orphan is gone, and the manifest and every object it references are still there.

Thread-safety: functions here are called from one thread; :func:`populate` uses its own
pool internally.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from bench.common import quick_mode
from gic_operator.storage.job_storage import JobStorage
from gic_runtime.checkpoint.catalog import load_retained, write_manifest
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.sweep import sweep_orphans
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.layout import manifest_uri
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver

JOB_ID = "bench.sweep"
PREFIX = "gic"
EPOCHS = 4
PAYLOAD_BYTES = 128
FULL_ORPHANS = 100_000
QUICK_ORPHANS = 2_000

Log = Callable[[str], None]


class SweepBenchmarkError(RuntimeError):
    """The sweep did not leave storage as it must (orphans left, references deleted)."""


@dataclasses.dataclass(frozen=True)
class SweepParams:
    """Sizes of one run: orphaned objects, objects the manifest references, upload threads."""

    orphans: int
    referenced: int = 8
    put_threads: int = 16
    quick: bool = False


def params_from_env(environ: Mapping[str, str] | None = None) -> SweepParams:
    """Full size (100,000 orphans), or 2,000 with ``GIC_BENCH_QUICK=1``."""
    quick = quick_mode(environ)
    return SweepParams(orphans=QUICK_ORPHANS if quick else FULL_ORPHANS, quick=quick)


def _payload(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest() * (PAYLOAD_BYTES // 32)


def segment_key(job_id: str, i: int) -> str:
    """Key (under the store root) of the ``i``-th synthetic changelog segment."""
    return f"jobs/{job_id}/changelog/{1 + i % EPOCHS}/{uuid.uuid4().hex}.seg"


def populate(
    store: S3ObjectStore,
    job_id: str,
    count: int,
    *,
    threads: int,
    log: Log = print,
    report_every_s: float = 10.0,
) -> float:
    """PUT ``count`` orphaned segments of job ``job_id`` with ``threads`` threads; return
    the upload rate (objects/s). Prints progress every ``report_every_s`` seconds."""
    done = 0
    lock = threading.Lock()

    def upload(worker: int) -> None:
        nonlocal done
        for i in range(worker, count, threads):
            store.put(segment_key(job_id, i), _payload(i))
            with lock:
                done += 1

    started = time.monotonic()
    with ThreadPoolExecutor(threads, thread_name_prefix="bench-put") as pool:
        futures = [pool.submit(upload, w) for w in range(threads)]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=report_every_s, return_when=FIRST_EXCEPTION)
            elapsed = time.monotonic() - started
            with lock:
                so_far = done
            log(f"  uploaded {so_far:,}/{count:,} orphans in {elapsed:.0f} s")
            for future in futures:
                if future.done() and future.exception() is not None:
                    raise future.exception()  # type: ignore[misc]
    return count / max(time.monotonic() - started, 1e-9)


def write_checkpoint(
    store: S3ObjectStore, resolver: StoreResolver, job_id: str, count: int
) -> tuple[str, frozenset[str]]:
    """Upload ``count`` segments and one checkpoint manifest referencing them (one
    changelog section each, over four buckets); return the manifest URI and their URIs."""
    num_buckets = 4
    per_bucket: dict[int, list[ChangelogHandle]] = {}
    for i in range(count):
        data = _payload(-1 - i)
        key = segment_key(job_id, i)
        store.put(key, data)
        bucket = i % num_buckets
        handles = per_bucket.setdefault(bucket, [])
        seq = len(handles)
        uri = store.uri_for(key)
        handles.append(ChangelogHandle(uri, 0, len(data), bucket, seq, seq + 1, crc32c(data)))
    buckets = {
        b: BucketState(b, len(hs), None, tuple(hs), token=f"t{len(hs)}")
        for b, hs in per_bucket.items()
    }
    manifest = Manifest(
        job_id=job_id,
        checkpoint_id=1,
        epoch=EPOCHS,
        created_at=time.time(),
        num_buckets=num_buckets,
        buckets=buckets,
        engine={"offsets": {"source-0": 1}},
    )
    stored = write_manifest(resolver, manifest_uri(store.root_uri, job_id, 1), manifest)
    return stored.uri, manifest.uris()


def run_sweep(
    settings: S3Settings, bucket: str, params: SweepParams, log: Log = print
) -> dict[str, Any]:
    """Populate a job directory in ``bucket``, sweep it, check the result (module doc)."""
    put_settings = dataclasses.replace(settings, max_pool_connections=params.put_threads)
    store = S3ObjectStore(bucket, PREFIX, settings=put_settings)
    resolver = StoreResolver(settings)
    log(f"  uploading {params.orphans:,} orphans with {params.put_threads} threads")
    put_rate = populate(store, JOB_ID, params.orphans, threads=params.put_threads, log=log)
    manifest, referenced = write_checkpoint(store, resolver, JOB_ID, params.referenced)
    root = store.root_uri
    expected_listed = params.orphans + params.referenced + 1

    t0 = time.perf_counter()
    retained = load_retained(resolver, root, JOB_ID)
    dry = sweep_orphans(resolver, root, JOB_ID, retained, dry_run=True)
    list_s = time.perf_counter() - t0
    log(f"  dry run: listed {dry.listed:,} objects in {list_s:.2f} s")

    storage = JobStorage(resolver, root, JOB_ID)
    t0 = time.perf_counter()
    result = storage.sweep_orphans(None)  # the job was not restored
    sweep_s = time.perf_counter() - t0
    log(f"  sweep: listed {result.listed:,}, deleted {result.deleted:,} in {sweep_s:.2f} s")

    left = {store.uri_for(info.key) for info in store.list(f"jobs/{JOB_ID}/")}
    keep = set(referenced) | {manifest}
    if left != keep or dry.orphaned != params.orphans:
        raise SweepBenchmarkError(
            f"after the sweep {len(left - keep)} orphan(s) are left and "
            f"{len(keep - left)} referenced object(s) are missing (dry run counted "
            f"{dry.orphaned} orphans, expected {params.orphans})"
        )
    if (result.listed, result.deleted, result.referenced) != (
        expected_listed,
        params.orphans,
        params.referenced + 1,
    ):
        raise SweepBenchmarkError(f"unexpected sweep counts: {result}")
    return {
        "orphans": params.orphans,
        "referenced": params.referenced + 1,
        "payload_bytes": PAYLOAD_BYTES,
        "put_threads": params.put_threads,
        "put_objects_per_s": round(put_rate, 1),
        "dry_run_s": round(list_s, 3),
        "dry_run_listed_per_s": round(dry.listed / list_s, 1),
        "sweep_s": round(sweep_s, 3),
        "listed": result.listed,
        "deleted": result.deleted,
        "deleted_bytes": result.deleted_bytes,
        "listed_per_s": round(result.listed / sweep_s, 1),
        "deleted_per_s": round(result.deleted / sweep_s, 1),
        "orphans_left": 0,
        "references_kept": True,
    }


def measure(params: SweepParams, log: Log = print) -> dict[str, Any]:
    """Start SeaweedFS in a temporary directory, run :func:`run_sweep` on a fresh bucket,
    stop the server."""
    from tests.support.testing_s3server import TestingS3Server

    with (
        tempfile.TemporaryDirectory(prefix="gic-bench-sweep-") as tmp,
        TestingS3Server(Path(tmp) / "seaweedfs") as server,
    ):
        log(f"  SeaweedFS ready in {server.startup_seconds:.1f} s")
        bucket = server.create_bucket()
        result = run_sweep(server.settings, bucket, params, log)
        result["server"] = "SeaweedFS (weed mini) on loopback"
        return result
