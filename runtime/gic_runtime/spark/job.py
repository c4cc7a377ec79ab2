"""The job author's API: keyed state over a streaming DataFrame, with GIC checkpoints.

::

    job = GICJob.create("word-count")                  # settings from env / file
    words = job.spark.readStream.text(src).select(F.explode(F.split("value", " ")).alias("word"))
    query = job.keyed(words, key="word").aggregate(count=count()).to_parquet(out)
    summary = query.run(trigger="available-now")

:meth:`GICJob.keyed` starts a :class:`~gic_runtime.spark.streams.KeyedStream` (the
processing styles, then a sink: :mod:`gic_runtime.spark.streams`), whose
:class:`~gic_runtime.spark.query_run.GICQuery` runs it
(:mod:`gic_runtime.spark.query_run`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gic_runtime.config import GICSettings, env_var
from gic_runtime.errors import ConfigurationError, GICError
from gic_runtime.spark.placement import key_expression
from gic_runtime.spark.query_run import GICQuery, RunSummary
from gic_runtime.spark.schemas import event_time_spec
from gic_runtime.spark.session import REQUIRED_CONF, local_spark, submitted_spark
from gic_runtime.spark.streams import KeyedStream, StatefulStream, to_uri
from gic_runtime.spark.telemetry import record_failure
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver

__all__ = ["GICJob", "GICQuery", "KeyedStream", "RunSummary", "StatefulStream", "to_uri"]

_log = logging.getLogger(__name__)


class GICJob:
    """One GIC job: a Spark session, its settings and the storage they name."""

    def __init__(self, spark: SparkSession, settings: GICSettings) -> None:
        for key, value in REQUIRED_CONF.items():
            spark.conf.set(key, value)
        self.spark = spark
        self.settings = settings
        self.resolver = StoreResolver(S3Settings.from_env())

    @classmethod
    def create(cls, app_name: str = "gic-job", *, settings: GICSettings | None = None) -> GICJob:
        """Settings from the environment / ``GIC_CONFIG_FILE`` unless given; the active
        Spark session, else the one ``spark-submit`` configured, else a local one.

        ``app_name`` is also the job id unless the settings name one (``GIC_JOB_ID``,
        the settings file, ``gic run --job-id``), so two example apps run from the same
        directory keep separate checkpoints; it must then be a valid job id."""
        defaults = {"job_id": (app_name, "the app name given to GICJob.create")}
        try:
            resolved = settings or GICSettings.load(defaults=defaults)
        except ConfigurationError as exc:
            _record_settings_failure(defaults, exc)
            raise
        spark = SparkSession.getActiveSession()
        if spark is None:
            # spark-submit hands a Python app its JVM gateway through these variables.
            submitted = "PYSPARK_GATEWAY_PORT" in os.environ
            spark = submitted_spark(app_name) if submitted else local_spark(app_name)
        return cls(spark, resolved)

    def keyed(
        self,
        df: DataFrame,
        key: str,
        *,
        event_time: str | None = None,
        watermark: str | float | None = None,
        keep_late: bool = False,
    ) -> KeyedStream:
        """Key ``df`` (a streaming DataFrame) by the string or integer column ``key``.

        ``event_time`` names a timestamp column; ``watermark`` is the lateness bound
        (``"10 seconds"``, ``"5 minutes"``, or seconds as a number; 0 when left out).
        Each batch runs with the watermark the batches before it set (the largest
        event time seen minus the bound); its rows older than that are late: dropped
        and counted in ``BatchReport.late_rows``, or kept with ``keep_late=True``. The
        watermark is part of every checkpoint and savepoint."""
        if not df.isStreaming:
            raise ConfigurationError(
                "keyed() needs a streaming DataFrame (spark.readStream...); for a batch "
                "DataFrame use plain Spark"
            )
        key_expression(df, key)
        return KeyedStream(self, df, key, event_time_spec(df, event_time, watermark, keep_late))


def _record_settings_failure(defaults: Mapping[str, tuple[Any, str]], error: GICError) -> None:
    """Record settings the driver cannot load as its launch's failure, when the
    environment still names the job's storage, id and fencing epoch (a launch by the
    operator always does; the refusal is then shown on its GICJob). Best effort."""
    names = (env_var("storage"), env_var("job_id"), env_var("epoch"))
    env = {name: os.environ[name] for name in names if name in os.environ}
    if env_var("epoch") not in env:
        return
    try:
        identity = GICSettings.load(env=env, defaults=defaults)
        if identity.epoch is not None:
            resolver = StoreResolver(S3Settings.from_env())
            record_failure(resolver, identity.storage, identity.job_id, identity.epoch, error)
    except Exception as exc:  # the settings error is what the user must see
        _log.warning("could not record the settings error in the job's status: %r", exc)
