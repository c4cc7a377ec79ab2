"""Spark's own state stores checkpointing to S3 (``s3a://``), as users run them.

Spark checkpoints through Hadoop's S3A filesystem from ``hadoop-aws``, which pip's
PySpark does not ship: :func:`spark_conf` asks for
``org.apache.hadoop:hadoop-aws:<Hadoop version of pyspark's jars>`` through
``spark.jars.packages`` (ivy fetches it and the matching AWS SDK bundle from Maven
Central into its cache on first use) and points S3A at the S3 server named by the
environment (``GIC_S3_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``; path-style requests, plain HTTP). :data:`BUCKET_ENV` names the bucket.

Spark-on-S3 users also set the rename-free checkpoint file manager,
``AbortableStreamBasedCheckpointFileManager`` from ``spark-hadoop-cloud`` (a checkpoint
file is written straight to its name and aborted on failure, instead of written to a
temporary name and renamed, which S3A does as a copy and a delete): :func:`spark_conf`
sets it, with the jar :func:`cloud_jar` downloads once from Maven Central into
``~/.cache/gic/jars`` and checks against :data:`CLOUD_JAR_SHA256`. Maven Central has no
``spark-hadoop-cloud`` of PySpark's own version (4.3.0), so the newest published one,
:data:`CLOUD_JAR_VERSION`, is used: its one class compiles against the same
``CheckpointFileManager`` API, and a run that cannot load it fails at its first batch.

:func:`entries` lists what a checkpoint holds (for
:func:`bench.streaming.checkpoint_bytes.attribute_entries`) through boto3.

Stateless functions; safe from any thread.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from bench.streaming import checkpoint_bytes
from bench.streaming.records import BenchmarkError

BUCKET_ENV = "GIC_BENCH_S3_BUCKET"
"""The bucket every system of the benchmark checkpoints into."""
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
SUFFIX = "_s3a"
"""Suffix of a Spark system name that checkpoints to S3 (``spark_hdfs_s3a``)."""
CHECKPOINT_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
ABORTABLE_MANAGER = "org.apache.spark.internal.io.cloud.AbortableStreamBasedCheckpointFileManager"
CLOUD_ARTIFACT = "org.apache.spark:spark-hadoop-cloud_2.13"
CLOUD_JAR_VERSION = "4.1.2"
CLOUD_JAR_SHA256 = "672d7d872f434cb7fe1c90f7edcd19b1e8c67a335a578288426fbd4db5096915"
"""sha256 of ``spark-hadoop-cloud_2.13-4.1.2.jar`` (Maven Central's sha1:
4aa61bdd33f4e2b1fe348840559e4a0d8567bc33)."""
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
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


def cloud_jar_url(version: str = CLOUD_JAR_VERSION) -> str:
    group, artifact = CLOUD_ARTIFACT.split(":")
    path = f"{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"
    return f"{MAVEN_CENTRAL}/{path}"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gic" / "jars"


def cloud_jar(cache: Path | None = None) -> Path:
    """The pinned ``spark-hadoop-cloud`` jar, downloaded on first use and checked."""
    folder = cache or _cache_dir()
    target = folder / f"spark-hadoop-cloud_2.13-{CLOUD_JAR_VERSION}.jar"
    if target.is_file() and _sha256(target.read_bytes()) == CLOUD_JAR_SHA256:
        return target
    url = cloud_jar_url()
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            data = response.read()
    except OSError as exc:
        raise BenchmarkError(f"cannot download {url}: {exc}") from exc
    got = _sha256(data)
    if got != CLOUD_JAR_SHA256:
        raise BenchmarkError(f"{url} has sha256 {got}, expected {CLOUD_JAR_SHA256}; not used")
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, target)
    return target


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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


def spark_conf(
    environ: Mapping[str, str] = os.environ, *, checkpoint_manager: bool = True
) -> dict[str, str]:
    """Session settings that give Spark S3A pointed at the benchmark's S3 server, and
    (``checkpoint_manager``) the rename-free checkpoint file manager."""
    endpoint = _require(environ, "GIC_S3_ENDPOINT_URL")
    s3a = "spark.hadoop.fs.s3a."
    manager = (
        {"spark.jars": str(cloud_jar()), CHECKPOINT_FILE_MANAGER: ABORTABLE_MANAGER}
        if checkpoint_manager
        else {}
    )
    return {
        **manager,
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


REPORTED = (
    "spark.jars.packages",
    "spark.jars",
    "spark.hadoop.fs.s3a.endpoint",
    CHECKPOINT_FILE_MANAGER,
)
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
