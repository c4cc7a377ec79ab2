"""Driver pod and service manifests: command, configuration precedence, environment,
ownership, resources, names, and launch validation."""

from __future__ import annotations

from typing import Any

import pytest

from gic_operator.launch import launch_config, launch_plan, launcher
from gic_operator.launch.launch_plan import LaunchPlan
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
    command = launch_config.driver_command(plan)
    assert command[:12] == [
        "python3",
        "-m",
        "gic_runtime.cli.driver_process",
        "--",
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


def test_users_conf_passes_and_the_spec_sizes_executors() -> None:
    spec = make_spec(
        **{
            "application.sparkConf": {
                "spark.sql.shuffle.partitions": "8",
                "spark.kubernetes.executor.request.cores": "500m",
            },
            "application.executor": {"instances": 3, "cores": 2, "memory": "2g"},
        }
    )
    conf = conf_of(launch_config.driver_command(make_plan(spec)))
    assert conf["spark.driver.host"] == "wordcount-driver.prod.svc"
    assert conf["spark.sql.shuffle.partitions"] == "8"
    assert conf["spark.kubernetes.executor.request.cores"] == "500m"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.executor.instances"] == "3"
    # what the operator sets cannot come from sparkConf at all (see test_validation.py)
    for key in ("spark.driver.host", "spark.executor.memory"):
        with pytest.raises(ValueError, match="set by the operator"):
            make_spec(**{"application.sparkConf": {key: "x"}})


def test_kubernetes_conf_locks_down_executors_and_authenticates_rpc() -> None:
    conf = conf_of(launch_config.driver_command(make_plan()))
    assert conf["spark.kubernetes.executor.podTemplateFile"] == launch_plan.TEMPLATE_FILE
    assert conf["spark.kubernetes.executor.podTemplateContainerName"] == "executor"
    assert conf["spark.kubernetes.executor.securityContext.allowPrivilegeEscalation"] == "false"
    assert conf["spark.authenticate"] == "true"
    assert conf["spark.authenticate.secret.driver.file"] == launch_plan.AUTH_FILE
    assert conf["spark.authenticate.secret.executor.file"] == launch_plan.AUTH_FILE
    assert "spark.authenticate.secret" not in conf  # never a value on the command line
    assert conf["spark.kubernetes.executor.label.gic.io/role"] == "executor"
    # executors reach the driver by its Service's name, not by the bind address 0.0.0.0
    assert conf["spark.kubernetes.executor.useDriverPodIP"] == "false"
    # the driver needs no ConfigMaps, services or volume claims of its own
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    # no executor settings that bypass the template
    assert not [
        k
        for k in conf
        if k.startswith(("spark.executorEnv.", "spark.kubernetes.executor.secretKeyRef."))
    ]


def test_local_master_gets_only_the_users_conf_and_driver_memory() -> None:
    spec = make_spec(
        **{
            "application.sparkConf": {"spark.master": "local[2]", "spark.ui.enabled": "false"},
            "application.mainFile": "/opt/app/job.py",
        }
    )
    command = launch_config.driver_command(make_plan(spec))
    assert command[5:7] == ["--master", "local[2]"]
    assert conf_of(command) == {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "1g",
        "spark.log.level": "WARN",
    }
    assert command[-3] == "/opt/app/job.py"


def test_spark_logs_at_warn_unless_spark_conf_says() -> None:
    assert conf_of(launch_config.driver_command(make_plan()))["spark.log.level"] == "WARN"
    spec = make_spec(**{"application.sparkConf": {"spark.log.level": "INFO"}})
    assert conf_of(launch_config.driver_command(make_plan(spec)))["spark.log.level"] == "INFO"


def test_settings_env_is_accepted_by_the_runtime() -> None:
    plan = make_plan(restore_source="s3://bucket/gic/savepoints/sp-1", restore_mode="claim")
    env = launch_config.settings_env(plan)
    settings = GICSettings.from_env(env)
    assert settings.job_id == "prod.wordcount"
    assert settings.storage == "s3://bucket/gic"
    assert settings.epoch == 4
    assert settings.num_buckets == 128
    assert settings.retained_checkpoints == 2
    assert settings.materialization_interval_s == 120.0
    assert settings.metrics_port == 9090
    assert settings.restore_source == "s3://bucket/gic/savepoints/sp-1"
    assert settings.restore_mode.value == "claim"
    assert "GIC_S3_ENDPOINT_URL" not in env
    launch_config.validate_launch(plan)


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
    # The driver's metrics endpoint binds its pod's IP (the downward API).
    assert by_name["GIC_METRICS_HOST"] == {
        "name": "GIC_METRICS_HOST",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }
    assert names.index("GIC_METRICS_HOST") < names.index("TZ")
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


def test_executors_get_every_credentials_key_the_driver_gets() -> None:
    spec = make_spec(
        **{
            "application.env": [{"name": "TZ", "value": "UTC"}],
            "checkpointing.credentialsSecret": "s3-creds",
            "checkpointing.s3EndpointUrl": "http://seaweed:8333",
        }
    )
    plan = make_plan(spec)
    driver = {e["name"]: e for e in env_of(launcher.driver_pod(plan))}
    template = launcher.executor_pod_template(plan)
    executor = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
    keys = [name for name, _ in launch_plan.SECRET_KEYS]
    assert {"AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL"} <= set(keys)
    for name in keys:
        assert executor[name] == driver[name], name
    assert executor["GIC_S3_ENDPOINT_URL"] == {
        "name": "GIC_S3_ENDPOINT_URL",
        "value": "http://seaweed:8333",
    }
    assert executor["TZ"] == {"name": "TZ", "value": "UTC"}
    # the runtime's settings (job id, epoch ...) are the driver's alone
    assert not [
        name for name in executor if name.startswith("GIC_") and name != "GIC_S3_ENDPOINT_URL"
    ]


def test_env_value_from_reaches_driver_and_executors() -> None:
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}},
        {
            "name": "LEVEL",
            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level", "optional": True}},
        },
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "PLAIN", "value": "1"},
    ]
    plan = make_plan(make_spec(**{"application.env": env}))
    expected = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}},
        {
            "name": "LEVEL",
            "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "level", "optional": True}},
        },
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "PLAIN", "value": "1"},
    ]
    driver = [e for e in env_of(launcher.driver_pod(plan)) if not e["name"].startswith("GIC_")]
    assert driver == expected
    auth = {
        "secretKeyRef": {"name": launch_plan.auth_secret_name("wordcount"), "key": "executor-key"}
    }
    assert launch_config.executor_env(plan) == [
        *expected,
        {"name": "_SPARK_AUTH_SECRET", "valueFrom": auth},
    ]
    launch_config.validate_launch(plan)


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "X", "valueFrom": {}},
        {
            "name": "X",
            "valueFrom": {
                "secretKeyRef": {"name": "a", "key": "b"},
                "configMapKeyRef": {"name": "a", "key": "b"},
            },
        },
        {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers[0].image"}}},
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "a"}}},
        {"name": "1X", "value": "1"},
    ],
)
def test_env_entries_that_are_refused(entry: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="env"):
        make_spec(**{"application.env": [entry]})


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
    assert spec["automountServiceAccountToken"] is True  # it manages executor pods
    assert spec["terminationGracePeriodSeconds"] == 40  # stop_timeout_s 20 s + 20 s
    assert spec["hostname"] == "wordcount-driver-4"
    assert spec["subdomain"] == "wordcount-driver"
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 185,
        "runAsGroup": 185,
        "fsGroup": 185,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert {v["name"]: next(k for k in v if k != "name") for v in spec["volumes"]} == {
        "spark-auth": "secret",
        "executor-template": "configMap",
    }
    (container,) = spec["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "privileged": False,
    }
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[launch_plan.AUTH_DIR]["readOnly"] is True
    assert mounts[launch_plan.TEMPLATE_DIR]["readOnly"] is True
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
    assert launch_plan.spark_memory_mib("1025k") == 2
    assert launch_plan.spark_memory_mib("300") == 300
    with pytest.raises(ConfigurationError, match="not a Spark memory size"):
        launch_plan.spark_memory_mib("1.5g")


def test_headless_service() -> None:
    svc = launcher.driver_service("prod", "wordcount", "uid-1")
    assert svc["metadata"]["name"] == "wordcount-driver"
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == {"gic.io/job": "wordcount", "gic.io/role": "driver"}
    # executors' connections only: neither the UI nor the metrics endpoint
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {
        "driver-rpc": 7078,
        "blockmanager": 7079,
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
    from kubernetes.client import ApiClient, V1ConfigMap, V1Pod, V1Secret, V1Service

    spec = make_spec(
        **{
            "checkpointing.credentialsSecret": "s3-creds",
            "application.env": [
                {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}},
                {"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
        }
    )
    plan = make_plan(spec)
    client = ApiClient()
    for model, manifest in (
        (V1Pod, launcher.driver_pod(plan)),
        (V1Pod, launcher.executor_pod_template(plan)),
        (V1Service, launcher.driver_service("prod", "wordcount", "uid-1")),
        (V1ConfigMap, launcher.executor_template_config_map(plan)),
        (V1Secret, launcher.auth_secret("prod", "wordcount", "uid-1")),
    ):
        as_sent = client.sanitize_for_serialization(model.model_validate(manifest))  # type: ignore[no-untyped-call]
        assert as_sent == manifest


def test_validate_launch_reports_runtime_errors() -> None:
    with pytest.raises(ConfigurationError, match="GIC_EPOCH"):
        launch_config.validate_launch(make_plan(epoch=0))
    with pytest.raises(ConfigurationError, match="GIC_JOB_ID"):
        launch_config.validate_launch(make_plan(job_id="Not Valid"))
    with pytest.raises(ConfigurationError, match="GIC_RESTORE_MODE"):
        launch_config.validate_launch(make_plan(restore_source="s3://b/x", restore_mode="maybe"))


def test_validate_launch_checks_user_gic_variables() -> None:
    ok = make_spec(**{"application.env": [{"name": "GIC_CONTROL_POLL_S", "value": "2"}]})
    launch_config.validate_launch(make_plan(ok))
    bad = make_spec(**{"application.env": [{"name": "GIC_CONTROL_POLL_S", "value": "-1"}]})
    with pytest.raises(ConfigurationError, match="GIC_CONTROL_POLL_S"):
        launch_config.validate_launch(make_plan(bad))


def test_validate_launch_refuses_user_env_shadowing_the_operators() -> None:
    spec = make_spec(**{"application.env": [{"name": "GIC_EPOCH", "value": "1"}]})
    with pytest.raises(ConfigurationError, match="GIC_EPOCH, which the operator sets"):
        launch_config.validate_launch(make_plan(spec))
    spec = make_spec(
        **{
            "application.env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
            "checkpointing.credentialsSecret": "s3-creds",
        }
    )
    with pytest.raises(ConfigurationError, match="AWS_REGION"):
        launch_config.validate_launch(make_plan(spec))


def test_the_grace_period_follows_the_drivers_stop_timeout() -> None:
    env = [{"name": "GIC_STOP_TIMEOUT_S", "value": "42.5"}]
    pod = launcher.driver_pod(make_plan(make_spec(**{"application.env": env})))
    assert pod["spec"]["terminationGracePeriodSeconds"] == 43 + 20


def test_the_grace_margin_leaves_the_entry_process_room() -> None:
    from gic_runtime.cli import driver_process

    assert launch_plan.STOP_GRACE_MARGIN_S == driver_process.GRACE_MARGIN_S
    assert driver_process.GRACE_MARGIN_S > driver_process.MARGIN_S
    assert launch_plan.DRIVER_ENTRY[2] == driver_process.__name__
