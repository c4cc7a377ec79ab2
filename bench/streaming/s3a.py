"""Spark's own state stores checkpointing to S3 (``s3a://``), as users run them.

Spark checkpoints through Hadoop's S3A filesystem from ``hadoop-aws``, which pip's
PySpark does not ship: :func:`spark_conf` asks for
``org.apache.hadoop:hadoop-aws:<Hadoop version of pyspark's jars>`` through
``spark.jars.packages`` (ivy fetches it and the matching AWS SDK bundle from Maven
Central into its cache on first use) and points S3A at the S3 server named by the
environment (``GIC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``; path-style requests, plain HTTP). :data:`BUCKET_ENV` names the bucket.

:func:`entries` lists what a checkpoint holds (for
:func:`bench.streaming.checkpoint_bytes.attribute_entries`) through boto3.

Stateless functions; safe from any thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench.streaming import checkpoint_bytes
from bench.streaming.records import BenchmarkError

BUCKET_ENV = "GIC_BENCH_S3_BUCKET"
"""The bucket every system of the benchmark checkpoints into."""
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
SUFFIX = "_s3a"
"""Suffix of a Spark system name that checkpoints to S3 (``spark_hdfs_s3a``)."""
_HADOOP_JAR = re.compile(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar$")


def hadoop_version(jars: Path | None = None) -> str:
    """Hadoop version of pyspark's jars, from the ``hadoop-client-api-<v>.jar`` name."""
    if jars is None:
        import pyspark

        jars = Path(pyspark.__file__).resolve().parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        match = _HADOOP_JAR.search(jar.name)
        if match:
            return match.group(1)
    raise BenchmarkError(f"no hadoop-client-api-<version>.jar in {jars}; cannot pick hadoop-aws")


def _require(environ: Mapping[str, str], name: str) -> str:
    value = environ.get(name)
    if not value:
        raise BenchmarkError(
            f"{name} is not set; S3 systems run inside a benchmark that starts SeaweedFS "
            "(python -m bench w1_s3)"
        )
    return value


def bucket(environ: Mapping[str, str] = os.environ) -> str:
    return _require(environ, BUCKET_ENV)


def spark_conf(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Session settings that give Spark S3A pointed at the benchmark's S3 server."""
    endpoint = _require(environ, "GIC_S3_ENDPOINT_URL")
    s3a = "spark.hadoop.fs.s3a."
    return {
        "spark.jars.packages": f"{HADOOP_AWS}:{hadoop_version()}",
        f"{s3a}endpoint": endpoint,
        f"{s3a}endpoint.region": environ.get("AWS_REGION") or "us-east-1",
        f"{s3a}path.style.access": "true",
        f"{s3a}connection.ssl.enabled": str(endpoint.startswith("https:")).lower(),
        f"{s3a}access.key": _require(environ, "AWS_ACCESS_KEY_ID"),
        f"{s3a}secret.key": _require(environ, "AWS_SECRET_ACCESS_KEY"),
        f"{s3a}aws.credentials.provider": ("org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"),
        f"{s3a}impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }


REPORTED = ("spark.jars.packages", "spark.hadoop.fs.s3a.endpoint")
"""The settings of :func:`spark_conf` a result may show (not the credentials)."""


def entries(bucket_name: str, prefix: str) -> Iterator[checkpoint_bytes.Entry]:
    """Every object under ``s3://bucket_name/prefix/``."""
    from gic_runtime.storage.s3 import create_s3_client
    from gic_runtime.storage.s3_settings import S3Settings

    client = create_s3_client(S3Settings.from_env())
    try:
        yield from checkpoint_bytes.s3_entries(client, bucket_name, prefix)
    finally:
        client.close()
