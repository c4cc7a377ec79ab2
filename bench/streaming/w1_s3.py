"""W1 on S3, as users run it: every system checkpoints to one S3 server whose requests
take as long as a remote object store's.

The W1 keyed count (:func:`~bench.streaming.workloads.keyed_count`) with one SeaweedFS S3
server (:class:`~tests.support.testing_s3server.TestingS3Server`, started here) and one
bucket shared by every system, behind a :class:`~bench.streaming.latency_proxy.LatencyProxy`
that holds every request of every system the same time (:data:`LATENCIES_MS`, one
section of the result per latency and mode; ``GIC_BENCH_S3_LATENCY_MS`` changes them, 0
is loopback). The latency the proxy actually added is measured before each section
(HEAD and GET of a small object, direct against proxied) and recorded with the requests
it relayed (``modes.<section>.conditions``).

``spark_hdfs_s3a`` / ``spark_rocksdb_s3a`` / ``spark_rocksdb_changelog_s3a``
    Spark's own state stores with ``checkpointLocation = s3a://<bucket>/...`` through
    ``hadoop-aws`` and the rename-free ``AbortableStreamBasedCheckpointFileManager`` that
    Spark-on-S3 users configure (:mod:`bench.streaming.s3a`; ivy fetches hadoop-aws and
    the jar comes from Maven Central on first use). The baselines.
``gic_s3``
    GIC with ``storage = s3://<bucket>/...`` (boto3). The contender.

Every system writes its output to Parquet on local disk (fingerprinted). The children
find the server through ``GIC_S3_ENDPOINT_URL`` (the proxy), ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` and ``GIC_BENCH_S3_BUCKET``, set here for the
duration of the run. Method, statistics and goals are the repeated comparisons'
(:mod:`bench.streaming.repeats`; modes ``local2`` unless ``GIC_BENCH_MODES`` says);
``GIC_BENCH_S3_SYSTEMS`` (or ``GIC_BENCH_SYSTEMS``) picks a subset. Writes ``w1_s3.json``
and ``w1_s3.png``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from bench import common
from bench.streaming import latency_proxy, modes, s3a, systems
from bench.streaming.records import BenchmarkError
from bench.streaming.repeats import Comparison, Section, run_sections
from bench.streaming.workloads import keyed_count

if TYPE_CHECKING:
    from tests.support.testing_s3server import TestingS3Server

NAME = "w1_s3"
GIC = "gic_s3"
GOAL = 1.5
LATENCIES_MS = (20, 80)
LATENCY_ENV = "GIC_BENCH_S3_LATENCY_MS"
SPARK_STORES = tuple(
    f"{name}{s3a.SUFFIX}" for name in ("spark_hdfs", "spark_rocksdb", "spark_rocksdb_changelog")
)
_S3_ENV = ("GIC_S3_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")

COMPARISON = Comparison(
    name=NAME,
    workload=keyed_count,
    systems={
        **{name: systems.spark_store(name) for name in SPARK_STORES},
        GIC: systems.gic(GIC),
    },
    baselines=SPARK_STORES,
    contenders=(GIC,),
    goal=GOAL,
)


def latencies_from_env(environ: Mapping[str, str] = os.environ) -> list[int]:
    """The per-request latencies (ms) of ``GIC_BENCH_S3_LATENCY_MS`` (default 20,80)."""
    raw = environ.get(LATENCY_ENV, "")
    try:
        values = [int(v) for v in raw.split(",") if v.strip()] or list(LATENCIES_MS)
    except ValueError as exc:
        raise BenchmarkError(f"{LATENCY_ENV}={raw!r}: give whole milliseconds, e.g. 20,80") from exc
    if any(v < 0 for v in values):
        raise BenchmarkError(f"{LATENCY_ENV}={raw!r}: latencies must be >= 0")
    return values


@contextmanager
def shared_s3() -> Iterator[TestingS3Server]:
    """Start SeaweedFS, create the bucket, export the S3 environment; yields the server
    (its ``endpoint_url`` is what a :func:`with_latency` proxy relays to)."""
    from tests.support.testing_s3server import TestingS3Server

    data_dir = common.SCRATCH / f"{NAME}-seaweedfs-{uuid.uuid4().hex[:10]}"
    saved = {n: os.environ.get(n) for n in (*_S3_ENV, s3a.BUCKET_ENV)}
    try:
        with TestingS3Server(data_dir) as server:
            s = server.settings
            values = (server.endpoint_url, s.region, s.access_key_id, s.secret_access_key)
            os.environ.update({n: v or "" for n, v in zip(_S3_ENV, values, strict=True)})
            os.environ[s3a.BUCKET_ENV] = server.create_bucket()
            yield server
    finally:
        _restore(saved)
        shutil.rmtree(data_dir, ignore_errors=True)


def _restore(saved: Mapping[str, str | None]) -> None:
    for name, old in saved.items():
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextmanager
def with_latency(upstream: str, latency_ms: int) -> Iterator[dict[str, Any]]:
    """A :class:`LatencyProxy` in front of ``upstream`` for the block, the children's S3
    endpoint pointing at it; yields what is recorded about it (the added latency
    measured at the start, the requests relayed by the end)."""
    conditions: dict[str, Any] = {
        "latency_ms_per_request": latency_ms,
        "s3_server": f"SeaweedFS on loopback ({upstream})",
        "proxy": (
            "bench.streaming.latency_proxy.LatencyProxy: every request of every system held "
            f"{latency_ms} ms after it arrived, then relayed"
        ),
    }
    saved = {"GIC_S3_ENDPOINT_URL": os.environ.get("GIC_S3_ENDPOINT_URL")}
    with latency_proxy.LatencyProxy(upstream, latency_ms / 1000) as proxy:
        conditions["measured"] = latency_proxy.measure_added_latency(
            upstream, proxy.endpoint_url, s3a.bucket()
        )
        print(f"-- {NAME}: {latency_ms} ms per request, measured {conditions['measured']}")
        os.environ["GIC_S3_ENDPOINT_URL"] = proxy.endpoint_url
        try:
            yield conditions
        finally:
            _restore(saved)
            conditions["requests_relayed"] = proxy.requests_by_method()


def sections(upstream: str, latencies: Sequence[int]) -> list[Section]:
    """One section per mode (default ``local2``) and latency: ``<mode>_<ms>ms``."""
    chosen = modes.modes_from_env(default=("local2",))
    return [
        Section(
            f"{mode.name}_{ms}ms",
            mode,
            around=functools.partial(with_latency, upstream, ms),
            describe={"latency_ms_per_request": ms},
        )
        for mode in chosen
        for ms in latencies
    ]


def main() -> None:
    latencies = latencies_from_env()
    raw = os.environ.get("GIC_BENCH_S3_SYSTEMS", "")
    with contextlib.ExitStack() as stack:
        if raw.strip():
            saved = {"GIC_BENCH_SYSTEMS": os.environ.get("GIC_BENCH_SYSTEMS")}
            stack.callback(_restore, saved)
            os.environ["GIC_BENCH_SYSTEMS"] = raw
        upstream = stack.enter_context(shared_s3()).endpoint_url

        run_sections(
            COMPARISON,
            lambda _base: sections(upstream, latencies),
            {
                "storage": (
                    "one SeaweedFS S3 server on loopback and one bucket for every system, "
                    "behind a proxy adding the section's latency to every request: Spark "
                    "through hadoop-aws (s3a://) with AbortableStreamBasedCheckpointFileManager, "
                    "GIC through boto3 (s3://)"
                ),
                "latencies_ms": latencies,
                "logs": (
                    "Spark's stores write their offset and commit logs to S3 (through the "
                    "proxy); GIC's query keeps Spark's logs on local disk, as GIC runs "
                    "everywhere, and its checkpoint (changelog, snapshots, manifest) goes to S3 "
                    "through the proxy; both commit times include the log writes"
                ),
                "hadoop_aws": f"{s3a.HADOOP_AWS}:{s3a.hadoop_version()}",
                "checkpoint_file_manager": {
                    "class": s3a.ABORTABLE_MANAGER,
                    "jar": f"{s3a.CLOUD_ARTIFACT}:{s3a.CLOUD_JAR_VERSION}",
                    "sha256": s3a.CLOUD_JAR_SHA256,
                    "why_this_version": (
                        "Maven Central has no spark-hadoop-cloud of PySpark's version; the "
                        "newest published one, built against the same CheckpointFileManager API"
                    ),
                },
            },
        )


if __name__ == "__main__":
    main()
