"""Invalid GICJob specs: the sparkConf allowlist, bounded numbers, and the one message that
names every invalid field the way the manifest spells it."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from pydantic import ValidationError

from gic_operator.models import GICJobSpec
from gic_operator.validation import (
    ALLOWED_SPARK_CONF,
    MAX_LISTED_PROBLEMS,
    OPERATOR_SPARK_CONF,
    describe_validation_error,
    spark_conf_problem,
)

BASE: dict[str, Any] = {
    "application": {"image": "gic:1", "mainFile": "/opt/app/job.py"},
    "checkpointing": {"storage": "s3://bucket/gic"},
}


def spec_with(path: str, value: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    node = body
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return body


def message(body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        GICJobSpec.model_validate(body)
    return describe_validation_error(caught.value, "spec")


ALLOWED = {
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.streaming.stateStore.providerClass": "x.Y",
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.memoryOverhead": "512m",
    "spark.kubernetes.executor.request.cores": "500m",
    "spark.kubernetes.executor.limit.cores": "2",
    "spark.kubernetes.executor.node.selector.kubernetes.io/arch": "arm64",
    "spark.kubernetes.executor.label.team": "a",
    "spark.kubernetes.executor.annotation.prometheus.io/scrape": "true",
    "spark.locality.wait": "0",
    "spark.network.crypto.enabled": "true",
    "spark.hadoop.fs.s3a.aws.credentials.provider": "x.Provider",
    "spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.0",
}


def test_allowed_settings_pass_through() -> None:
    spec = GICJobSpec.model_validate(spec_with("application.sparkConf", ALLOWED))
    assert spec.application.spark_conf == ALLOWED
    for master in ("local", "local[*]", "local[4,2]", "k8s://https://kubernetes.default.svc"):
        assert spark_conf_problem("spark.master", master) is None


REFUSED = {
    # volumes, pod templates, identity, images, secrets: the pods Spark creates
    "spark.kubernetes.driver.volumes.hostPath.root.mount.path": "not allowed",
    "spark.kubernetes.executor.volumes.hostPath.root.options.path": "not allowed",
    "spark.kubernetes.executor.volumes.persistentVolumeClaim.d.options.claimName": "not allowed",
    "spark.kubernetes.executor.podTemplateFile": "not allowed",
    "spark.kubernetes.driver.podTemplateFile": "not allowed",
    "spark.kubernetes.executor.podTemplateContainerName": "not allowed",
    "spark.kubernetes.authenticate.driver.serviceAccountName": "not allowed",
    "spark.kubernetes.authenticate.executor.serviceAccountName": "not allowed",
    "spark.kubernetes.authenticate.oauthToken": "not allowed",
    "spark.kubernetes.executor.secrets.db": "not allowed",
    "spark.kubernetes.executor.secretKeyRef.TOKEN": "not allowed",
    "spark.kubernetes.executor.securityContext.allowPrivilegeEscalation": "not allowed",
    "spark.kubernetes.executor.pod.featureSteps": "not allowed",
    "spark.kubernetes.executor.label.gic.io/job": "not allowed",
    "spark.kubernetes.executor.annotation.container.apparmor.security.beta.kubernetes.io/x": (
        "not allowed"
    ),
    "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "not allowed",
    "spark.kubernetes.driverEnv.X": "not allowed",
    # Spark's RPC authentication is always on, with the job's secret
    "spark.authenticate": "not allowed",
    "spark.authenticate.secret": "not allowed",
    "spark.authenticate.secret.executor.file": "not allowed",
    # what the operator sets
    "spark.kubernetes.container.image": "set by the operator from spec.application.image",
    "spark.kubernetes.executor.container.image": "set by the operator",
    "spark.executor.instances": "spec.application.executor.instances",
    "spark.driver.memory": "spec.application.driver.memory",
    "spark.driver.host": "set by the operator",
    "spark.kubernetes.namespace": "set by the operator",
    # secrets in plain text
    "spark.hadoop.fs.s3a.secret.key": "looks like it holds a secret",
    "spark.hadoop.fs.s3a.access.key": "looks like it holds a secret",
    "spark.sql.catalog.c.password": "looks like it holds a secret",
    # simply not on the list
    "spark.kubernetes.file.upload.path": "not a Spark setting a GICJob may set",
    "spark.dynamicAllocation.enabled": "not a Spark setting a GICJob may set",
    "spark.kubernetes.container.image.pullSecrets": "not a Spark setting a GICJob may set",
    "hadoop.fs.defaultFS": "is not a Spark setting",
}


@pytest.mark.parametrize(("key", "why"), sorted(REFUSED.items()))
def test_refused_settings(key: str, why: str) -> None:
    problem = spark_conf_problem(key, "x")
    assert problem is not None and why in problem
    text = message(spec_with("application.sparkConf", {key: "x"}))
    assert f'spec.application.sparkConf["{key}"]: ' in text


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("spark.master", "k8s://https://elsewhere.example:6443", "only ever sent to its own"),
        ("spark.master", "spark://master:7077", "must be local"),
        ("spark.master", "yarn", "must be local"),
        ("spark.driver.extraJavaOptions", "-Dspark.authenticate=false", "sets the Spark setting"),
        ("spark.executor.extraJavaOptions", "-D spark.x=1", "-D without a name"),
        ("spark.driver.extraJavaOptions", "-Xmx64g", "sizes the heap"),
    ],
)
def test_refused_values(key: str, value: str, why: str) -> None:
    text = message(spec_with("application.sparkConf", {key: value}))
    assert f'spec.application.sparkConf["{key}"]: ' in text
    assert why in text


def test_one_message_names_every_invalid_field() -> None:
    body = spec_with(
        "application.sparkConf",
        {
            "spark.sql.shuffle.partitions": "8",
            "spark.kubernetes.executor.volumes.hostPath.x.mount.path": "/host",
            "spark.authenticate": "false",
        },
    )
    body["checkpointing"]["buckets"] = 0
    body["restartPolicy"] = {"backoffSeconds": 1e300}
    text = message(body)
    assert text.startswith("invalid spec: ")
    for field in (
        'spec.application.sparkConf["spark.authenticate"]',
        'spec.application.sparkConf["spark.kubernetes.executor.volumes.hostPath.x.mount.path"]',
        "spec.checkpointing.buckets",
        "spec.restartPolicy.backoffSeconds",
    ):
        assert f"{field}: " in text, field
    assert "spark.sql.shuffle.partitions" not in text
    assert text.endswith("Fix the manifest and apply it again.")


def test_long_lists_of_problems_are_cut() -> None:
    conf = {f"spark.kubernetes.executor.volumes.hostPath.v{i}.mount.path": "/" for i in range(30)}
    text = message(spec_with("application.sparkConf", conf))
    assert text.count("is not allowed") == MAX_LISTED_PROBLEMS
    assert f"and {30 - MAX_LISTED_PROBLEMS} more" in text


def test_allowlist_and_refusals_do_not_overlap() -> None:
    for key in OPERATOR_SPARK_CONF:
        assert key not in ALLOWED_SPARK_CONF
        assert spark_conf_problem(key, "x") is not None


# --- bounded numbers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("restartPolicy.backoffSeconds", 1e300),
        ("restartPolicy.backoffSeconds", math.inf),
        ("restartPolicy.backoffSeconds", math.nan),
        ("restartPolicy.maxBackoffSeconds", 1e9),
        ("restartPolicy.resetAfterSeconds", 1e12),
        ("restartPolicy.maxRestarts", 10**6),
        ("savepoints.timeoutSeconds", 10**9),
        ("savepoints.intervalSeconds", 10**10),
        ("savepoints.retention.maxCount", 10**9),
        ("savepoints.retention.maxAgeSeconds", 10**12),
        ("checkpointing.retainedCheckpoints", 10**6),
        ("checkpointing.materializationIntervalSeconds", 1e300),
        ("checkpointing.changelog.preemptiveUploadBytes", 2**40),
        ("checkpointing.changelog.maxHedges", 1000),
        ("checkpointing.buckets", 10**6),
        ("application.executor.instances", 10**6),
        ("application.executor.cores", 10**4),
        ("application.driver.cores", 10**4),
        ("application.driver.memory", "9" * 30 + "t"),
    ],
)
def test_numbers_are_bounded(path: str, value: Any) -> None:
    text = message(spec_with(path, value))
    assert f"spec.{path}: " in text


def test_large_but_sane_values_pass() -> None:
    body = spec_with("restartPolicy", {"backoffSeconds": 3600, "maxBackoffSeconds": 86400})
    body["savepoints"] = {"intervalSeconds": 86400 * 30, "retention": {"maxCount": 1000}}
    GICJobSpec.model_validate(body)


# --- env ---------------------------------------------------------------------------------


def test_env_problems_name_the_entry() -> None:
    text = message(
        spec_with(
            "application.env",
            [{"name": "OK", "value": "1"}, {"name": "X", "valueFrom": {"fieldRef": {}}}],
        )
    )
    assert "spec.application.env[1].valueFrom.fieldRef.fieldPath: is required" in text


def test_operations_guide_lists_the_whole_allowlist() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = guide[guide.index("**The sparkConf allowlist.**") :]
    section = section[: section.index("\n### ")]
    for entry in ALLOWED_SPARK_CONF:
        assert f"`{entry}`" in section, entry


def test_reconciler_marks_a_refused_key_invalid_and_launches_nothing(tmp_path: Any) -> None:
    from gic_operator.jobs.job_controller import JobController
    from gic_operator.models import API_VERSION
    from gic_operator.storage.job_storage import open_job_storage
    from gic_operator.testing.fake_kube import TestingKubeApi

    kube = TestingKubeApi()
    key = "spark.kubernetes.driver.volumes.hostPath.root.mount.path"
    body = spec_with("application.sparkConf", {key: "/host", "spark.sql.shuffle.partitions": "1"})
    body["checkpointing"]["storage"] = f"file://{tmp_path}"
    kube.put_object(
        "gicjobs",
        "team",
        {
            "apiVersion": API_VERSION,
            "kind": "GICJob",
            "metadata": {"name": "wc", "namespace": "team"},
            "spec": body,
        },
    )
    JobController(kube, open_job_storage).reconcile_named("team", "wc")
    job = kube.get_object("gicjobs", "team", "wc")
    assert job is not None
    status = job["status"]
    assert status["phase"] == "Invalid"
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready["status"] == "False" and ready["reason"] == "InvalidSpec"
    assert f'spec.application.sparkConf["{key}"]: is not allowed' in ready["message"]
    assert not kube.pods and not kube.secrets and not kube.config_maps
