"""Manifests of a job's driver: the pod and its headless service (pure functions).

The driver runs ``spark-submit`` in client mode inside its own pod; Spark then creates
the executor pods itself (on a ``k8s://`` master). The executors reach the driver through
a headless service whose DNS name is ``spark.driver.host``. The GIC runtime in the driver
reads its settings from ``GIC_*`` environment variables (:mod:`gic_runtime.config`), so
everything the operator decides -- job id, storage, fencing epoch, restore source --
travels as plain variables; S3 credentials travel only as ``secretKeyRef`` to the
job's Secret, never as values.

Invariants:

* the same :class:`LaunchPlan` always gives the same manifests (a relaunch after an
  operator crash creates the very pod it meant to create);
* Spark configuration the operator sets is applied after the user's ``sparkConf``, so it
  wins; the user's ``env`` must not set a variable the operator sets
  (:func:`validate_launch` refuses that);
* the pod and the service are owned by the GICJob (controller reference), so deleting
  the job deletes them; executors are owned by the driver pod (Spark does that when
  ``spark.kubernetes.driver.pod.name`` is set).

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gic_operator.kube import DRIVER_CONTAINER
from gic_operator.models.base import API_VERSION
from gic_operator.models.gicjob import GICJobSpec
from gic_operator.naming import (
    ANNOTATION_GENERATION,
    LABEL_JOB,
    MANAGED_BY,
    driver_labels,
    driver_pod_name,
    driver_service_name,
    job_selector,
    label_value,
)
from gic_runtime.config import GICSettings, env_var
from gic_runtime.errors import ConfigurationError

DEFAULT_MASTER = "k8s://https://kubernetes.default.svc"
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
SPARK_UI_PORT = 4040
METRICS_PORT = 9090
#: ``(name, port)`` of every port of the driver pod and its service.
DRIVER_PORTS: tuple[tuple[str, int], ...] = (
    ("driver-rpc", DRIVER_PORT),
    ("blockmanager", BLOCK_MANAGER_PORT),
    ("spark-ui", SPARK_UI_PORT),
    ("metrics", METRICS_PORT),
)
TERMINATION_GRACE_S = 30
ANNOTATION_JOB_ID = "gic.io/job-id"
S3_ENDPOINT_ENV = "GIC_S3_ENDPOINT_URL"
#: Keys of the job's credentials Secret: ``(variable, required)``.
SECRET_KEYS: tuple[tuple[str, bool], ...] = (
    ("AWS_ACCESS_KEY_ID", True),
    ("AWS_SECRET_ACCESS_KEY", True),
    ("AWS_REGION", False),
    ("AWS_ENDPOINT_URL", False),
)

_MEMORY = re.compile(r"^([0-9]+)([kmgtKMGT]?)$")
_MIB_PER_UNIT = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}


@dataclass(frozen=True)
class LaunchPlan:
    """One launch of a job's driver: the GICJob (``namespace``, ``name``, ``uid``,
    ``spec``, ``generation``), its job id in storage, the fencing epoch of this launch,
    and where it restores from (``restore_mode`` in the runtime's words: ``claim`` or
    ``no-claim``). Immutable."""

    namespace: str
    name: str
    uid: str
    spec: GICJobSpec
    job_id: str
    epoch: int
    restore_source: str | None = None
    restore_mode: str | None = None
    generation: int | None = None

    @property
    def pod_name(self) -> str:
        return driver_pod_name(self.name, self.epoch)

    @property
    def service_name(self) -> str:
        return driver_service_name(self.name)


def spark_memory_mib(text: str) -> int:
    """MiB in a Spark memory string (``512m``, ``2g``, ``1024``: no unit means MiB),
    rounded up."""
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ConfigurationError(
            f"memory {text!r} is not a Spark memory size: use a number with an optional "
            "unit k, m, g or t (512m, 2g)"
        )
    return math.ceil(int(match.group(1)) * _MIB_PER_UNIT[match.group(2).lower()])


def master(spec: GICJobSpec) -> str:
    """The Spark master the driver uses (``spark.master`` from sparkConf, else the
    cluster's API server)."""
    return spec.application.spark_conf.get("spark.master") or DEFAULT_MASTER


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    """The controller owner reference to GICJob ``name``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "GICJob",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def settings_env(plan: LaunchPlan) -> dict[str, str]:
    """The plain ``GIC_*`` variables of the driver (the runtime's settings)."""
    cp = plan.spec.checkpointing
    env = {
        env_var("job_id"): plan.job_id,
        env_var("storage"): cp.storage,
        env_var("num_buckets"): str(cp.buckets),
        env_var("retained_checkpoints"): str(cp.retained_checkpoints),
        env_var("materialization_interval_s"): repr(float(cp.materialization_interval_seconds)),
        env_var("changelog_preemptive_upload_bytes"): str(cp.changelog.preemptive_upload_bytes),
        env_var("max_hedges"): str(cp.changelog.max_hedges),
        env_var("epoch"): str(plan.epoch),
    }
    if plan.restore_source is not None:
        env[env_var("restore_source")] = plan.restore_source
    if plan.restore_mode is not None:
        env[env_var("restore_mode")] = plan.restore_mode
    if cp.s3_endpoint_url:
        env[S3_ENDPOINT_ENV] = cp.s3_endpoint_url
    env[env_var("metrics_port")] = str(METRICS_PORT)
    return env


def _secret_names(plan: LaunchPlan) -> list[str]:
    return [name for name, _ in SECRET_KEYS] if plan.spec.checkpointing.credentials_secret else []


def driver_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The driver container's environment: the ``GIC_*`` settings, the user's ``env``,
    then the S3 credentials by ``secretKeyRef`` (when ``credentialsSecret`` is set)."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in settings_env(plan).items()]
    env += [{"name": e.name, "value": e.value} for e in plan.spec.application.env]
    secret = plan.spec.checkpointing.credentials_secret
    if secret:
        for name, required in SECRET_KEYS:
            ref: dict[str, Any] = {"name": secret, "key": name}
            if not required:
                ref["optional"] = True
            env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return env


def spark_conf(plan: LaunchPlan) -> dict[str, str]:
    """The driver's Spark configuration: the user's ``sparkConf`` (without
    ``spark.master``, passed as ``--master``), then the operator's keys."""
    app = plan.spec.application
    conf = {k: v for k, v in app.spark_conf.items() if k != "spark.master"}
    conf["spark.driver.memory"] = app.driver.memory
    if not master(plan.spec).startswith("k8s://"):
        return conf
    conf.update(
        {
            "spark.kubernetes.namespace": plan.namespace,
            "spark.kubernetes.driver.pod.name": plan.pod_name,
            "spark.driver.host": f"{plan.service_name}.{plan.namespace}.svc",
            "spark.driver.bindAddress": "0.0.0.0",
            "spark.driver.port": str(DRIVER_PORT),
            "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
            "spark.kubernetes.container.image": app.image,
            "spark.kubernetes.container.image.pullPolicy": app.image_pull_policy.value,
            "spark.executor.instances": str(app.executor.instances),
            "spark.executor.cores": str(app.executor.cores),
            "spark.executor.memory": app.executor.memory,
            "spark.kubernetes.authenticate.driver.serviceAccountName": app.service_account,
            f"spark.kubernetes.executor.label.{LABEL_JOB}": label_value(plan.name),
        }
    )
    # Executors upload state to the same storage: same endpoint, same credentials.
    cp = plan.spec.checkpointing
    if cp.s3_endpoint_url:
        conf[f"spark.executorEnv.{S3_ENDPOINT_ENV}"] = cp.s3_endpoint_url
    if cp.credentials_secret:
        for name, required in SECRET_KEYS:
            if required:
                key = f"spark.kubernetes.executor.secretKeyRef.{name}"
                conf[key] = f"{cp.credentials_secret}:{name}"
    return conf


def driver_command(plan: LaunchPlan) -> list[str]:
    """``spark-submit`` in client mode with the job's configuration and main file."""
    app = plan.spec.application
    command = ["spark-submit", "--master", master(plan.spec), "--deploy-mode", "client"]
    command += ["--name", plan.name]
    for key, value in sorted(spark_conf(plan).items()):
        command += ["--conf", f"{key}={value}"]
    command.append(app.main_file.removeprefix("local://"))
    return command + list(app.arguments)


def _ports(container: bool) -> list[dict[str, Any]]:
    if container:
        return [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in DRIVER_PORTS]
    return [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in DRIVER_PORTS]


def driver_pod(plan: LaunchPlan) -> dict[str, Any]:
    """The driver pod of ``plan`` (see the module docstring)."""
    app = plan.spec.application
    memory = spark_memory_mib(app.driver.memory) + spark_memory_mib(app.driver.memory_overhead)
    annotations = {ANNOTATION_JOB_ID: plan.job_id}
    if plan.generation is not None:
        annotations[ANNOTATION_GENERATION] = str(plan.generation)
    container = {
        "name": DRIVER_CONTAINER,
        "image": app.image,
        "imagePullPolicy": app.image_pull_policy.value,
        "command": driver_command(plan),
        "env": driver_env(plan),
        "ports": _ports(container=True),
        "resources": {
            "requests": {"cpu": str(app.driver.cores), "memory": f"{memory}Mi"},
            "limits": {"memory": f"{memory}Mi"},
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": plan.pod_name,
            "namespace": plan.namespace,
            "labels": driver_labels(plan.name, plan.epoch),
            "annotations": annotations,
            "ownerReferences": [owner_reference(plan.name, plan.uid)],
        },
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": app.service_account,
            "terminationGracePeriodSeconds": TERMINATION_GRACE_S,
            "hostname": plan.pod_name,
            "subdomain": plan.service_name,
            # Service links would inject variables such as SPARK_PORT, which Spark
            # reads as its own configuration.
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True},
            "containers": [container],
        },
    }


def driver_service(namespace: str, name: str, uid: str) -> dict[str, Any]:
    """The headless service of GICJob ``name``'s driver: its DNS name is the
    ``spark.driver.host`` executors connect to (addresses published before the pod is
    ready, so the driver can bind and executors connect while it starts)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": driver_service_name(name),
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "gic-job",
                "app.kubernetes.io/instance": label_value(name),
                "app.kubernetes.io/managed-by": MANAGED_BY,
                LABEL_JOB: label_value(name),
            },
            "ownerReferences": [owner_reference(name, uid)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": job_selector(name),
            "publishNotReadyAddresses": True,
            "ports": _ports(container=False),
        },
    }


def validate_launch(plan: LaunchPlan) -> None:
    """Raise :class:`~gic_runtime.errors.ConfigurationError` (its message says what to
    change) unless the runtime accepts the plan's settings: the operator's ``GIC_*``
    variables together with any ``GIC_*`` the user's ``env`` adds, which must not set a
    variable the operator sets."""
    reserved = set(settings_env(plan)) | set(_secret_names(plan))
    clashes = sorted({e.name for e in plan.spec.application.env} & reserved)
    if clashes:
        raise ConfigurationError(
            f"spec.application.env sets {', '.join(clashes)}, which the operator sets "
            "itself for every launch (from spec.checkpointing, the fencing epoch and the "
            "restore source); remove them from env"
        )
    user = {e.name: e.value for e in plan.spec.application.env if e.name.startswith("GIC_")}
    GICSettings.from_env({**user, **settings_env(plan)})
    for what, text in (
        ("driver memory", plan.spec.application.driver.memory),
        ("driver memoryOverhead", plan.spec.application.driver.memory_overhead),
    ):
        try:
            spark_memory_mib(text)
        except ConfigurationError as exc:
            raise ConfigurationError(f"spec.application.{what}: {exc}") from None
