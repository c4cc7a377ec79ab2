"""Misspelled Spark settings in a GICJob: refused with the closest real key suggested, while
every setting Spark defines, and the open-ended families, pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from gic_operator import spark_settings
from gic_operator.jobs.job_controller import JobController
from gic_operator.models import API_VERSION
from gic_operator.storage.job_storage import open_job_storage
from gic_operator.testing.fake_kube import TestingKubeApi
from gic_operator.validation import ALLOWED_SPARK_CONF, spark_conf_problem


def apply_and_reconcile(tmp_path: Path, spark_conf: dict[str, str]) -> dict[str, object]:
    """What a user does: apply a GICJob, let the operator reconcile it; its status."""
    kube = TestingKubeApi()
    kube.put_object(
        "gicjobs",
        "team",
        {
            "apiVersion": API_VERSION,
            "kind": "GICJob",
            "metadata": {"name": "wc", "namespace": "team"},
            "spec": {
                "application": {
                    "image": "gic:1",
                    "mainFile": "/opt/app/job.py",
                    "sparkConf": spark_conf,
                },
                "checkpointing": {"storage": f"file://{tmp_path}"},
            },
        },
    )
    JobController(kube, open_job_storage).reconcile_named("team", "wc")
    job = kube.get_object("gicjobs", "team", "wc")
    assert job is not None
    status: dict[str, object] = job["status"]
    return status


def test_a_misspelled_sql_setting_makes_the_spec_invalid_and_names_the_real_one(
    tmp_path: Path,
) -> None:
    status = apply_and_reconcile(tmp_path, {"spark.sql.shufle.partitions": "8"})
    assert status["phase"] == "Invalid"
    conditions = status["conditions"]
    assert isinstance(conditions, list)
    [ready] = [c for c in conditions if c["type"] == "Ready"]
    assert ready["reason"] == "InvalidSpec"
    assert 'spec.application.sparkConf["spark.sql.shufle.partitions"]: ' in ready["message"]
    assert "did you mean spark.sql.shuffle.partitions?" in ready["message"]


def test_the_correct_spelling_launches(tmp_path: Path) -> None:
    status = apply_and_reconcile(tmp_path, {"spark.sql.shuffle.partitions": "8"})
    assert status["phase"] != "Invalid"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        (
            "spark.sql.streaming.stateStor.providerClass",
            "spark.sql.streaming.stateStore.providerClass",
        ),
        ("spark.ui.enabeld", "spark.ui.enabled"),
        ("spark.shuffle.compres", "spark.shuffle.compress"),
        ("spark.speculation.multipler", "spark.speculation.multiplier"),
    ],
)
def test_misspellings_under_allowed_prefixes_are_refused_with_a_suggestion(
    key: str, suggestion: str
) -> None:
    problem = spark_conf_problem(key, "1")
    assert problem is not None
    assert f"did you mean {suggestion}?" in problem


def test_an_unknown_key_without_a_close_match_says_to_check_the_spelling() -> None:
    problem = spark_conf_problem("spark.sql.completelyMadeUp.thing", "1")
    assert problem is not None
    assert "is not a setting Spark" in problem and "check the spelling" in problem


@pytest.mark.parametrize(
    "key",
    [
        # defined by Spark: SQL, streaming, core, Hive, the network layer
        "spark.sql.shuffle.partitions",
        "spark.sql.streaming.stateStore.providerClass",
        "spark.sql.adaptive.enabled",
        "spark.sql.hive.convertMetastoreParquet",
        "spark.shuffle.io.maxRetries",
        "spark.rpc.io.serverThreads",
        "spark.network.crypto.enabled",
        "spark.io.compression.zstd.level",
        # open-ended families
        "spark.hadoop.fs.s3a.endpoint",
        "spark.hadoop.fs.gs.project.id",
        "spark.sql.catalog.lake",
        "spark.sql.catalog.lake.warehouse",
        "spark.sql.streaming.stateStore.rocksdb.compactOnCommit",
        "spark.kubernetes.executor.label.team",
        "spark.kubernetes.executor.node.selector.kubernetes.io/arch",
        "spark.metrics.conf.driver.sink.prometheusServlet.class",
        "spark.task.resource.gpu.amount",
    ],
)
def test_real_and_open_ended_keys_pass(key: str) -> None:
    assert spark_conf_problem(key, "1") is None


def test_a_secret_looking_hadoop_key_is_still_refused() -> None:
    problem = spark_conf_problem("spark.hadoop.fs.s3a.secret.key", "x")
    assert problem is not None and "looks like it holds a secret" in problem


def test_the_list_is_spark_s_own() -> None:
    known = spark_settings.known_settings()
    assert len(known) > 1000
    assert all(key.startswith("spark.") for key in known)
    assert "spark.sql.shufle.partitions" not in known


def test_every_exact_allowlist_entry_is_a_setting_of_the_locked_spark() -> None:
    # spark.master is read by name (SparkConf), not a registered entry
    stale = [
        key
        for key in ALLOWED_SPARK_CONF
        if not key.endswith(".")
        and key != "spark.master"
        and key not in spark_settings.known_settings()
    ]
    assert stale == []
