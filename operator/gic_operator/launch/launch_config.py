"""The driver's configuration for one launch: its ``GIC_*`` variables, the user's
``env``, the credentials by reference, the executors' variables, ``spark-submit``'s
Spark configuration, and the check that the runtime accepts it all.

Invariants:

* everything the operator decides -- job id, storage, fencing epoch, restore source --
  travels as plain ``GIC_*`` variables the runtime reads (:mod:`gic_runtime.config`);
  S3 credentials, the executors' RPC key and the driver's control key
  (``GIC_CONTROL_KEY``, :mod:`gic_operator.control_keys`) travel only as
  ``secretKeyRef``, never as values; the control key reaches the driver only;
* the operator's Spark configuration is applied after the user's ``sparkConf``, so it
  wins; the user's ``env`` must not set a variable the operator sets
  (:func:`validate_launch` refuses that);
* executors get the same variables as the driver where it makes sense: the user's
  ``env`` (values and ``valueFrom``), the S3 endpoint and every credentials key; on
  Kubernetes Spark's RPC is authenticated with the job's own secret: the driver reads
  it from a mounted file, executors from ``_SPARK_AUTH_SECRET`` by ``secretKeyRef``
  (an executor authenticates before it knows the master, when Spark reads no secret
  file); Spark then adds no plain copy of it to the executor pods' specs.

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

import math
from typing import Any

from gic_operator.control_keys import CONTROL_SECRET_KEY
from gic_operator.launch.launch_plan import (
    AUTH_ENV_KEY,
    AUTH_FILE,
    BLOCK_MANAGER_PORT,
    DRIVER_ENTRY,
    DRIVER_PORT,
    EXECUTOR_CONTAINER,
    METRICS_PORT,
    S3_ENDPOINT_ENV,
    SECRET_KEYS,
    STOP_GRACE_MARGIN_S,
    TEMPLATE_FILE,
    LaunchPlan,
    auth_secret_name,
    control_secret_name,
    executor_labels,
    master,
    spark_memory_mib,
)
from gic_operator.models.env import EnvVar
from gic_operator.models.gicjob import SPARK_SERVICE_ACCOUNT
from gic_runtime.config import GICSettings, env_var
from gic_runtime.control.auth import CONTROL_KEY_ENV
from gic_runtime.errors import ConfigurationError

#: Spark's log level in a driver's log unless the user's ``sparkConf`` sets this key: at
#: WARN the log shows GIC's line per batch and Spark's problems, not Spark's INFO chatter
#: (which includes every micro-batch's progress as JSON).
SPARK_LOG_LEVEL = "spark.log.level"
DEFAULT_SPARK_LOG_LEVEL = "WARN"
#: Variables Spark itself would set for authentication (never from the user's env).
_SPARK_RESERVED_ENV = ("_SPARK_AUTH_SECRET",)


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
        env[env_var("restore_mode")] = str(plan.restore_mode)
    if plan.output_takeover is not None:
        env[env_var("output_takeover")] = plan.output_takeover
    if cp.s3_endpoint_url:
        env[S3_ENDPOINT_ENV] = cp.s3_endpoint_url
    env[env_var("metrics_port")] = str(METRICS_PORT)
    return env


def _secret_names(plan: LaunchPlan) -> list[str]:
    return [name for name, _ in SECRET_KEYS] if plan.spec.checkpointing.credentials_secret else []


def _user_env(var: EnvVar) -> dict[str, Any]:
    """One of the user's variables as a Kubernetes ``EnvVar``."""
    if var.value_from is not None:
        return {"name": var.name, "valueFrom": var.value_from.to_kube()}
    return {"name": var.name, "value": var.value}


def _credential_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The S3 credentials by ``secretKeyRef`` (when ``credentialsSecret`` is set)."""
    secret = plan.spec.checkpointing.credentials_secret
    env: list[dict[str, Any]] = []
    if secret:
        for name, required in SECRET_KEYS:
            ref: dict[str, Any] = {"name": secret, "key": name}
            if not required:
                ref["optional"] = True
            env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return env


#: The driver's metrics endpoint binds its pod's IP (``status.podIP``), as any server
#: of a pod may: alone on its port wherever pods share a network namespace (the project's
#: process kubelet), reachable by Services and Prometheus everywhere
#: (:mod:`gic_runtime.listen`).
METRICS_HOST_ENV = {
    "name": env_var("metrics_host"),
    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
}


def control_key_env(name: str) -> dict[str, Any]:
    """``GIC_CONTROL_KEY`` from GICJob ``name``'s ``<job>-gic-control`` Secret."""
    ref = {"name": control_secret_name(name), "key": CONTROL_SECRET_KEY}
    return {"name": CONTROL_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


def driver_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The driver container's environment: the ``GIC_*`` settings (``GIC_METRICS_HOST``
    from the downward API), the user's ``env``, the S3 credentials by ``secretKeyRef``
    (when ``credentialsSecret`` is set), then the job's control key by
    ``secretKeyRef``."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in settings_env(plan).items()]
    env.append(dict(METRICS_HOST_ENV))
    env += [_user_env(e) for e in plan.spec.application.env]
    return [*env, *_credential_env(plan), control_key_env(plan.name)]


def executor_env(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The executor container's environment (from the pod template; Spark adds its own
    after it): the S3 endpoint, the user's ``env``, then the same credentials as the
    driver's (optional keys stay optional)."""
    env: list[dict[str, Any]] = []
    endpoint = plan.spec.checkpointing.s3_endpoint_url
    if endpoint:
        env.append({"name": S3_ENDPOINT_ENV, "value": endpoint})
    env += [_user_env(e) for e in plan.spec.application.env]
    return env + _credential_env(plan) + [_executor_auth_env(plan.name)]


def _executor_auth_env(name: str) -> dict[str, Any]:
    """``_SPARK_AUTH_SECRET`` from the job's Secret. An executor fetches the driver's
    properties before it knows the master, so it cannot use a secret file (Spark reads
    one only in Kubernetes mode); it falls back to this variable. Spark itself would put
    the key in the pod spec in clear, but not when ``spark.authenticate.secret.executor.file``
    is set, as it is here."""
    ref = {"name": auth_secret_name(name), "key": AUTH_ENV_KEY}
    return {"name": _SPARK_RESERVED_ENV[0], "valueFrom": {"secretKeyRef": ref}}


def spark_conf(plan: LaunchPlan) -> dict[str, str]:
    """The driver's Spark configuration: the user's ``sparkConf`` (without
    ``spark.master``, passed as ``--master``), then the operator's keys. Spark logs at
    :data:`DEFAULT_SPARK_LOG_LEVEL` unless ``sparkConf`` sets ``spark.log.level``."""
    app = plan.spec.application
    conf = {k: v for k, v in app.spark_conf.items() if k != "spark.master"}
    conf["spark.driver.memory"] = app.driver.memory
    conf.setdefault(SPARK_LOG_LEVEL, DEFAULT_SPARK_LOG_LEVEL)
    if not master(plan.spec).startswith("k8s://"):
        return conf
    conf.update(
        {
            "spark.kubernetes.namespace": plan.namespace,
            "spark.kubernetes.driver.pod.name": plan.pod_name,
            "spark.driver.host": f"{plan.service_name}.{plan.namespace}.svc",
            "spark.driver.bindAddress": "0.0.0.0",
            # Executors connect to spark.driver.host (the Service's name). With
            # useDriverPodIP Spark gives them the bind address instead, 0.0.0.0 here,
            # which an executor in another pod cannot reach.
            "spark.kubernetes.executor.useDriverPodIP": "false",
            "spark.driver.port": str(DRIVER_PORT),
            "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
            # Executors' block managers too: the job's NetworkPolicy admits this port.
            "spark.blockManager.port": str(BLOCK_MANAGER_PORT),
            "spark.kubernetes.container.image": app.image,
            "spark.kubernetes.container.image.pullPolicy": app.image_pull_policy.value,
            "spark.executor.instances": str(app.executor.instances),
            "spark.executor.cores": str(app.executor.cores),
            "spark.executor.memory": app.executor.memory,
            "spark.kubernetes.authenticate.driver.serviceAccountName": SPARK_SERVICE_ACCOUNT,
            # Executors: restricted pods from the operator's template (which also gives them
            # the job's variables, credentials and authentication secret).
            "spark.kubernetes.executor.podTemplateFile": TEMPLATE_FILE,
            "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
            "spark.kubernetes.executor.securityContext.allowPrivilegeEscalation": "false",
            # RPC between driver and executors authenticated with the job's own secret.
            "spark.authenticate": "true",
            "spark.authenticate.secret.driver.file": AUTH_FILE,
            "spark.authenticate.secret.executor.file": AUTH_FILE,
            # The driver touches nothing but its executor pods (its RBAC allows no more).
            "spark.kubernetes.executor.disableConfigMap": "true",
            "spark.kubernetes.driver.service.deleteOnTermination": "false",
            "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
            "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        }
    )
    for label, value in executor_labels(plan.name).items():
        conf[f"spark.kubernetes.executor.label.{label}"] = value
    return conf


def driver_command(plan: LaunchPlan) -> list[str]:
    """``spark-submit`` in client mode with the job's configuration and main file, under
    the runtime's entry process (:data:`~gic_operator.launch.launch_plan.DRIVER_ENTRY`)."""
    app = plan.spec.application
    command = [*DRIVER_ENTRY, "spark-submit", "--master", master(plan.spec)]
    command += ["--deploy-mode", "client"]
    command += ["--name", plan.name]
    for key, value in sorted(spark_conf(plan).items()):
        command += ["--conf", f"{key}={value}"]
    command.append(app.main_file.removeprefix("local://"))
    return command + list(app.arguments)


def validate_launch(plan: LaunchPlan) -> None:
    """Raise :class:`~gic_runtime.errors.ConfigurationError` (its message says what to
    change) unless the runtime accepts the plan's settings: the operator's ``GIC_*``
    variables together with any ``GIC_*`` the user's ``env`` adds, which must not set a
    variable the operator sets."""
    reserved = set(settings_env(plan)) | set(_secret_names(plan)) | set(_SPARK_RESERVED_ENV)
    reserved |= {str(METRICS_HOST_ENV["name"]), CONTROL_KEY_ENV}
    clashes = sorted({e.name for e in plan.spec.application.env} & reserved)
    if clashes:
        raise ConfigurationError(
            f"spec.application.env sets {', '.join(clashes)}, which the operator sets "
            "itself for every launch (from spec.checkpointing, the fencing epoch and the "
            "restore source); remove them from env"
        )
    driver_settings(plan)
    for what, text in (
        ("driver memory", plan.spec.application.driver.memory),
        ("driver memoryOverhead", plan.spec.application.driver.memory_overhead),
    ):
        try:
            spark_memory_mib(text)
        except ConfigurationError as exc:
            raise ConfigurationError(f"spec.application.{what}: {exc}") from None


def driver_settings(plan: LaunchPlan) -> GICSettings:
    """The runtime settings the driver of ``plan`` runs with, as far as the operator sees
    them: its ``GIC_*`` variables with the plain ``GIC_*`` values of the user's ``env``
    (a ``valueFrom`` is not read). Raises
    :class:`~gic_runtime.errors.ConfigurationError` when the runtime refuses them."""
    user = {
        e.name: e.value
        for e in plan.spec.application.env
        if e.name.startswith("GIC_") and e.value_from is None
    }
    return GICSettings.from_env({**user, **settings_env(plan)})


def termination_grace_s(plan: LaunchPlan) -> int:
    """The driver pod's ``terminationGracePeriodSeconds``: the driver's ``stop_timeout_s``
    (rounded up) plus :data:`~gic_operator.launch.launch_plan.STOP_GRACE_MARGIN_S`; settings
    the runtime refuses fall back to its default (the launch is refused anyway)."""
    try:
        stop_timeout = driver_settings(plan).stop_timeout_s
    except ConfigurationError:
        stop_timeout = float(GICSettings.model_fields["stop_timeout_s"].default)
    return math.ceil(stop_timeout) + STOP_GRACE_MARGIN_S
