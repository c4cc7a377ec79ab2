"""W1 on S3, as users run it: every system checkpoints to the same SeaweedFS server.

The W1 keyed count (:func:`~bench.streaming.workloads.keyed_count`) in ``local[2]``, with
one SeaweedFS S3 server (:class:`~tests.support.testing_s3server.TestingS3Server`, started
here) and one bucket shared by every system:

``spark_hdfs_s3a`` / ``spark_rocksdb_s3a`` / ``spark_rocksdb_changelog_s3a``
    Spark's own state stores with ``checkpointLocation = s3a://<bucket>/...`` through
    ``hadoop-aws`` (:mod:`bench.streaming.s3a`; ivy fetches it on first use).
``gic_s3``
    GIC with ``storage = s3://<bucket>/...`` (boto3).

The children find the server through ``GIC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` and ``GIC_BENCH_S3_BUCKET``, set here for the
duration of the run. Statistics, ratios and goals are the harness's, with ``gic_s3`` as
the GIC system. ``GIC_BENCH_S3_SYSTEMS`` picks a subset. Writes ``w1_s3.json`` and
``w1_s3.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bench import common
from bench.streaming import harness, s3a
from bench.streaming.records import BenchmarkError
from bench.streaming.runner import SystemFn, in_subprocess
from bench.streaming.workloads import keyed_count

NAME = "w1_s3"
GIC = "gic_s3"
SYSTEMS: dict[str, SystemFn] = {
    **{
        f"{name}{s3a.SUFFIX}": in_subprocess(harness.SPARK_TARGET, f"{name}{s3a.SUFFIX}")
        for name in ("spark_hdfs", "spark_rocksdb", "spark_rocksdb_changelog")
    },
    GIC: in_subprocess(harness.GIC_TARGET, GIC),
}
"""Every system of this benchmark, Spark's stores first."""


@contextmanager
def shared_s3() -> Iterator[str]:
    """Start SeaweedFS, create the bucket, export the S3 environment; yields the endpoint."""
    from tests.support.testing_s3server import TestingS3Server

    data_dir = common.SCRATCH / f"{NAME}-seaweedfs-{uuid.uuid4().hex[:10]}"
    names = ("GIC_S3_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    saved = {n: os.environ.get(n) for n in (*names, s3a.BUCKET_ENV)}
    try:
        with TestingS3Server(data_dir) as server:
            s = server.settings
            values = (server.endpoint_url, s.region, s.access_key_id, s.secret_access_key)
            os.environ.update({n: v or "" for n, v in zip(names, values, strict=True)})
            os.environ[s3a.BUCKET_ENV] = server.create_bucket()
            yield server.endpoint_url
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    params = harness.params_from_env()
    workload = keyed_count(params.quick)
    raw = os.environ.get("GIC_BENCH_S3_SYSTEMS", "")
    names = harness.chosen_systems(SYSTEMS, {"GIC_BENCH_SYSTEMS": raw})
    out_dir = harness.QUICK_RESULTS if params.quick else None
    with shared_s3() as endpoint:
        data = harness.run_benchmark(
            workload,
            params,
            {n: SYSTEMS[n] for n in names},
            out_dir,
            name=NAME,
            gic=GIC,
            registry=SYSTEMS,
            setup={
                "storage": (
                    f"one SeaweedFS S3 server on loopback ({endpoint}) and one bucket for every "
                    "system: Spark through hadoop-aws (s3a://), GIC through boto3 (s3://)"
                ),
                "hadoop_aws": f"{s3a.HADOOP_AWS}:{s3a.hadoop_version()}",
            },
        )
    print(f"goals: {json.dumps(data['goals'])}", flush=True)
    if data["failed"]:
        raise BenchmarkError(
            f"{len(data['failed'])} system(s) failed: {', '.join(data['failed'])}; the result "
            "file lists their errors and the logs are under bench/scratch/logs"
        )


if __name__ == "__main__":
    main()
