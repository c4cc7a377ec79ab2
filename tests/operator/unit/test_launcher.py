"""Driver pod and service manifests: command, configuration precedence, environment,
ownership, resources, names, and launch validation."""

from __future__ import annotations

from typing import Any

import pytest

from gic_operator import launcher
from gic_operator.launcher import LaunchPlan
from gic_operator.models import GICJobSpec
from gic_runtime.config import GICSettings
from gic_runtime.errors import ConfigurationError


def make_spec(**changes: Any) -> GICJobSpec:
    body: dict[str, Any] = {
        "application": {
            "image": "registry.example/gic:1",
            "mainFile": "local:///opt/app/job.py",
            "arguments": ["--rate", "100"],
        },
        "checkpointing": {"storage": "s3://bucket/gic"},
    }
    for path, value in changes.items():
        node = body
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return GICJobSpec.model_validate(body)


def make_plan(spec: GICJobSpec | None = None, **changes: Any) -> LaunchPlan:
    values: dict[str, Any] = {
        "namespace": "prod",
        "name": "wordcount",
        "uid": "uid-1",
        "spec": spec or make_spec(),
        "job_id": "prod.wordcount",
        "epoch": 4,
        "generation": 2,
    }
    values.update(changes)
    return LaunchPlan(**values)


def conf_of(command: list[str]) -> dict[str, str]:
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(item.split("=", 1) for item in confs)


def env_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = pod["spec"]["containers"][0]["env"]
    return env


def test_command_on_kubernetes() -> None:
    plan = make_plan()
    command = launcher.driver_command(plan)
    assert command[:8] == [
        "spark-submit",
        "--master",
        "k8s://https://kubernetes.default.svc",
        "--deploy-mode",
        "client",
        "--name",
        "wordcount",
        "--conf",
    ]
    assert command[-3:] == ["/opt/app/job.py", "--rate", "100"]
    keys = [command[i + 1].split("=", 1)[0] for i, arg in enumerate(command) if arg == "--conf"]
    assert keys == sorted(keys)
    conf = conf_of(command)
    assert conf["spark.kubernetes.namespace"] == "prod"
    assert conf["spark.kubernetes.driver.pod.name"] == "wordcount-driver-4"
    assert conf["spark.driver.host"] == "wordcount-driver.prod.svc"
    assert conf["spark.driver.port"] == "7078"
    assert conf["spark.driver.blockManager.port"] == "7079"
    assert conf["spark.kubernetes.container.image"] == "registry.example/gic:1"
    assert conf["spark.executor.instances"] == "1"
    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.executor.memory"] == "1g"
    assert conf["spark.driver.memory"] == "1g"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "gic-spark"
    assert conf["spark.kubernetes.executor.label.gic.io/job"] == "wordcount"
    assert "spark.master" not in conf


def test_operator_conf_wins_over_the_users() -> None:
    spec = make_spec(
        **{
            "application.sparkConf": {
                "spark.driver.host": "elsewhere",
                "spark.sql.shuffle.partitions": "8",
                "spark.executor.memory": "64g",
            },
            "application.executor": {"instances": 3, "cores": 2, "memory": "2g"},
        }
    )
    conf = conf_of(launcher.driver_command(make_plan(spec)))
    assert conf["spark.driver.host"] == "wordcount-driver.prod.svc"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.executor.instances"] == "3"


def test_local_master_gets_only_the_users_conf_and_driver_memory() -> None:
    spec = make_spec(
        **{
            "application.sparkConf": {"spark.master": "local[2]", "spark.ui.enabled": "false"},
            "application.mainFile": "/opt/app/job.py",
        }
    )
    command = launcher.driver_command(make_plan(spec))
    assert command[1:3] == ["--master", "local[2]"]
    assert conf_of(command) == {"spark.ui.enabled": "false", "spark.driver.memory": "1g"}
    assert command[-3] == "/opt/app/job.py"


def test_settings_env_is_accepted_by_the_runtime() -> None:
    plan = make_plan(restore_source="s3://bucket/gic/savepoints/sp-1", restore_mode="claim")
    env = launcher.settings_env(plan)
    settings = GICSettings.from_env(env)
    assert settings.job_id == "prod.wordcount"
    assert settings.storage == "s3://bucket/gic"
    assert settings.epoch == 4
    assert settings.num_buckets == 128
    assert settings.retained_checkpoints == 3
    assert settings.materialization_interval_s == 120.0
    assert settings.metrics_port == 9090
    assert settings.restore_source == "s3://bucket/gic/savepoints/sp-1"
    assert settings.restore_mode.value == "claim"
    assert "GIC_S3_ENDPOINT_URL" not in env
    launcher.validate_launch(plan)


def test_env_order_user_env_and_secret_refs() -> None:
    spec = make_spec(
        **{
            "application.env": [{"name": "TZ", "value": "UTC"}],
            "checkpointing.credentialsSecret": "s3-creds",
            "checkpointing.s3EndpointUrl": "http://seaweed:8333",
        }
    )
    env = env_of(launcher.driver_pod(make_plan(spec)))
    names = [e["name"] for e in env]
    assert names[0] == "GIC_JOB_ID"
    assert names.index("GIC_METRICS_PORT") < names.index("TZ") < names.index("AWS_ACCESS_KEY_ID")
    by_name = {e["name"]: e for e in env}
    assert by_name["GIC_S3_ENDPOINT_URL"]["value"] == "http://seaweed:8333"
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert by_name[var] == {
            "name": var,
            "valueFrom": {"secretKeyRef": {"name": "s3-creds", "key": var}},
        }
    for var in ("AWS_REGION", "AWS_ENDPOINT_URL"):
        ref = by_name[var]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "s3-creds", "key": var, "optional": True}
    # no secret value anywhere: credentials only travel by reference
    assert all("value" not in by_name[v] for v in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"))
    conf = conf_of(launcher.driver_command(make_plan(spec)))
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID"] == (
        "s3-creds:AWS_ACCESS_KEY_ID"
    )
    assert conf["spark.executorEnv.GIC_S3_ENDPOINT_URL"] == "http://seaweed:8333"


def test_no_secret_refs_without_a_credentials_secret() -> None:
    names = [e["name"] for e in env_of(launcher.driver_pod(make_plan()))]
    assert not [n for n in names if n.startswith("AWS_")]


def test_pod_manifest() -> None:
    plan = make_plan()
    pod = launcher.driver_pod(plan)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "wordcount-driver-4"
    assert meta["labels"]["gic.io/epoch"] == "4"
    assert meta["labels"]["gic.io/role"] == "driver"
    assert meta["annotations"]["gic.io/generation"] == "2"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gic.io/v1alpha1",
            "kind": "GICJob",
            "name": "wordcount",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "gic-spark"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["hostname"] == "wordcount-driver-4"
    assert spec["subdomain"] == "wordcount-driver"
    assert spec["securityContext"] == {"runAsNonRoot": True}
    (container,) = spec["containers"]
    assert container["name"] == "driver"
    assert container["image"] == "registry.example/gic:1"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "driver-rpc": 7078,
        "blockmanager": 7079,
        "spark-ui": 4040,
        "metrics": 9090,
    }
    # 1g + 512m overhead
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1536Mi"},
        "limits": {"memory": "1536Mi"},
    }
    assert launcher.driver_pod(plan) == pod  # deterministic


def test_pod_without_generation_has_no_generation_annotation() -> None:
    pod = launcher.driver_pod(make_plan(generation=None))
    assert "gic.io/generation" not in pod["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("memory", "overhead", "expected"),
    [("2g", "512m", "2560Mi"), ("1500m", "1024k", "1501Mi"), ("1t", "0", "1048576Mi")],
)
def test_resources_conversion(memory: str, overhead: str, expected: str) -> None:
    spec = make_spec(
        **{"application.driver": {"cores": 2, "memory": memory, "memoryOverhead": overhead}}
    )
    resources = launcher.driver_pod(make_plan(spec))["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "2", "memory": expected}
    assert resources["limits"] == {"memory": expected}


def test_spark_memory_parsing() -> None:
    assert launcher.spark_memory_mib("1025k") == 2
    assert launcher.spark_memory_mib("300") == 300
    with pytest.raises(ConfigurationError, match="not a Spark memory size"):
        launcher.spark_memory_mib("1.5g")


def test_headless_service() -> None:
    svc = launcher.driver_service("prod", "wordcount", "uid-1")
    assert svc["metadata"]["name"] == "wordcount-driver"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"gic.io/job": "wordcount", "gic.io/role": "driver"}
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "driver-rpc": 7078,
        "blockmanager": 7079,
        "spark-ui": 4040,
        "metrics": 9090,
    }
    pod = launcher.driver_pod(make_plan())
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_long_names_stay_within_limits() -> None:
    name = "a" * 120 + "." + "b" * 120
    plan = make_plan(name=name, job_id="prod.long")
    pod = launcher.driver_pod(plan)
    assert len(pod["metadata"]["name"]) <= 63
    assert pod["spec"]["hostname"] == pod["metadata"]["name"]
    assert len(pod["spec"]["subdomain"]) <= 63
    assert all(len(v) <= 63 for v in pod["metadata"]["labels"].values())
    conf = conf_of(pod["spec"]["containers"][0]["command"])
    assert len(conf["spark.kubernetes.executor.label.gic.io/job"]) <= 63
    assert pod["metadata"]["ownerReferences"][0]["name"] == name


def test_manifests_match_the_kubernetes_schema() -> None:
    """The client's models forbid unknown fields: a misspelt field fails here."""
    from kubernetes.client import ApiClient, V1Pod, V1Service

    spec = make_spec(**{"checkpointing.credentialsSecret": "s3-creds"})
    client = ApiClient()
    for model, manifest in (
        (V1Pod, launcher.driver_pod(make_plan(spec))),
        (V1Service, launcher.driver_service("prod", "wordcount", "uid-1")),
    ):
        as_sent = client.sanitize_for_serialization(model.model_validate(manifest))  # type: ignore[no-untyped-call]
        assert as_sent == manifest


def test_validate_launch_reports_runtime_errors() -> None:
    with pytest.raises(ConfigurationError, match="GIC_EPOCH"):
        launcher.validate_launch(make_plan(epoch=0))
    with pytest.raises(ConfigurationError, match="GIC_JOB_ID"):
        launcher.validate_launch(make_plan(job_id="Not Valid"))
    with pytest.raises(ConfigurationError, match="GIC_RESTORE_MODE"):
        launcher.validate_launch(make_plan(restore_source="s3://b/x", restore_mode="maybe"))


def test_validate_launch_checks_user_gic_variables() -> None:
    ok = make_spec(**{"application.env": [{"name": "GIC_CONTROL_POLL_S", "value": "2"}]})
    launcher.validate_launch(make_plan(ok))
    bad = make_spec(**{"application.env": [{"name": "GIC_CONTROL_POLL_S", "value": "-1"}]})
    with pytest.raises(ConfigurationError, match="GIC_CONTROL_POLL_S"):
        launcher.validate_launch(make_plan(bad))


def test_validate_launch_refuses_user_env_shadowing_the_operators() -> None:
    spec = make_spec(**{"application.env": [{"name": "GIC_EPOCH", "value": "1"}]})
    with pytest.raises(ConfigurationError, match="GIC_EPOCH, which the operator sets"):
        launcher.validate_launch(make_plan(spec))
    spec = make_spec(
        **{
            "application.env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
            "checkpointing.credentialsSecret": "s3-creds",
        }
    )
    with pytest.raises(ConfigurationError, match="AWS_REGION"):
        launcher.validate_launch(make_plan(spec))
