"""What one launch of a job's driver is, and the names, identities and security settings
every object of a launch shares.

A :class:`LaunchPlan` is everything the operator decided for one launch: the GICJob, its
job id in storage, the fencing epoch, the restore source. The constants here are the
operator's own choices (ports, the Spark user, where the RPC secret and the executor pod
template are mounted, which credentials keys travel), read by
:mod:`gic_operator.launch.launch_config` (the driver's configuration) and
:mod:`gic_operator.launch.launcher` (the manifests).

Invariants: object names derived from a GICJob's name are valid DNS subdomains and
distinct for distinct names (a hash shortens long ones); every Spark pod runs as
:data:`SPARK_UID` under the restricted Pod Security Standard's contexts.

Thread-safety: pure functions over immutable values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gic_operator.kube.naming import (
    LABEL_JOB,
    LABEL_ROLE,
    driver_pod_name,
    driver_service_name,
    label_value,
    object_name,
)
from gic_operator.models.base import API_VERSION
from gic_operator.models.gicjob import GICJobSpec
from gic_operator.models.pod_template import RESERVED_MOUNT_DIRS
from gic_operator.validation import IN_CLUSTER_MASTER
from gic_runtime.checkpoint.manifest import RestoreMode as RuntimeRestoreMode
from gic_runtime.errors import ConfigurationError

DEFAULT_MASTER = IN_CLUSTER_MASTER
DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
SPARK_UI_PORT = 4040
METRICS_PORT = 9090
#: ``(name, port)`` of every port of the driver pod.
DRIVER_PORTS: tuple[tuple[str, int], ...] = (
    ("driver-rpc", DRIVER_PORT),
    ("blockmanager", BLOCK_MANAGER_PORT),
    ("spark-ui", SPARK_UI_PORT),
    ("metrics", METRICS_PORT),
)
#: Ports of the driver's headless service: only what executors connect to (the UI and the
#: metrics endpoint stay on the pod; a NetworkPolicy decides who reaches them).
SERVICE_PORTS: tuple[tuple[str, int], ...] = DRIVER_PORTS[:2]
#: The driver container's command runs ``spark-submit`` under the runtime's entry process,
#: which turns the pod's SIGTERM into a clean stop of the query
#: (``gic_runtime.cli.driver_process``; docs/operations.md §14.5.7).
DRIVER_ENTRY: tuple[str, ...] = ("python3", "-m", "gic_runtime.cli.driver_process", "--")
#: A driver pod's termination grace period is the job's ``stop_timeout_s`` (the runtime
#: setting: how long a SIGTERM'd driver waits for its batch) plus this many seconds: room
#: for stopping Spark, recording the stop and exiting before the kubelet's SIGKILL. The
#: runtime's entry process kills the driver 15 s after ``stop_timeout_s`` and needs the
#: rest for its own status record (``gic_runtime.cli.driver_process.GRACE_MARGIN_S``).
STOP_GRACE_MARGIN_S = 20
ANNOTATION_JOB_ID = "gic.io/job-id"
S3_ENDPOINT_ENV = "GIC_S3_ENDPOINT_URL"
#: Keys of the job's credentials Secret: ``(variable, required)``. The driver and the
#: executors get every one of them (by reference, never as values).
SECRET_KEYS: tuple[tuple[str, bool], ...] = (
    ("AWS_ACCESS_KEY_ID", True),
    ("AWS_SECRET_ACCESS_KEY", True),
    ("AWS_SESSION_TOKEN", False),
    ("AWS_REGION", False),
    ("AWS_DEFAULT_REGION", False),
    ("AWS_ENDPOINT_URL", False),
)
#: User and group of every Spark pod: the ``spark`` user of the Spark images (the
#: Dockerfile's spark-runtime target runs as it too).
SPARK_UID = 185
SPARK_GID = 185
#: Role label value of executor pods (drivers: :data:`gic_operator.kube.naming.ROLE_DRIVER`).
ROLE_EXECUTOR = "executor"
#: Name of the executor container in the pod template.
EXECUTOR_CONTAINER = "executor"
#: Where the job's Spark authentication secret is mounted, in the driver and executors.
AUTH_DIR = RESERVED_MOUNT_DIRS[0]
AUTH_KEY = "secret"
AUTH_FILE = f"{AUTH_DIR}/{AUTH_KEY}"
#: The Secret's key with the same secret in the form executors read from
#: ``_SPARK_AUTH_SECRET`` (base64 of the file's bytes, as Spark derives the driver's
#: key from the file).
AUTH_ENV_KEY = "executor-key"
#: Where the executor pod template is mounted in the driver.
TEMPLATE_DIR = RESERVED_MOUNT_DIRS[1]
TEMPLATE_KEY = "executor-pod.json"
TEMPLATE_FILE = f"{TEMPLATE_DIR}/{TEMPLATE_KEY}"
#: Bytes of randomness in a job's Spark authentication secret.
AUTH_SECRET_BYTES = 32

_MEMORY = re.compile(r"^([0-9]+)([kmgtKMGT]?)$")
_MIB_PER_UNIT = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}


@dataclass(frozen=True)
class LaunchPlan:
    """One launch of a job's driver: the GICJob (``namespace``, ``name``, ``uid``,
    ``spec``, ``generation``), its job id in storage, the fencing epoch of this launch,
    where it restores from (``restore_mode`` is the runtime's mode,
    :meth:`gic_operator.models.RestoreMode.to_runtime`), and the job whose output it
    takes over (``output_takeover``). Immutable."""

    namespace: str
    name: str
    uid: str
    spec: GICJobSpec
    job_id: str
    epoch: int
    restore_source: str | None = None
    restore_mode: RuntimeRestoreMode | None = None
    generation: int | None = None
    output_takeover: str | None = None

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


def on_kubernetes(spec: GICJobSpec) -> bool:
    """Whether the driver runs its executors as pods (a ``k8s://`` master); only then
    does a launch need the executor pod template and the authentication secret."""
    return master(spec).startswith("k8s://")


def auth_secret_name(name: str) -> str:
    """The Secret with GICJob ``name``'s Spark authentication secret. (``-spark-rpc``:
    Secrets are immutable, and the earlier ``-spark-auth`` ones lack the executors' key.)"""
    return object_name(name, "-spark-rpc")


def control_secret_name(name: str) -> str:
    """The Secret with GICJob ``name``'s control key (:mod:`gic_operator.control_keys`)."""
    return object_name(name, "-gic-control")


def executor_template_name(name: str) -> str:
    """The ConfigMap with GICJob ``name``'s executor pod template."""
    return object_name(name, "-executor-template")


def executor_labels(name: str) -> dict[str, str]:
    """Labels the operator has Spark put on GICJob ``name``'s executor pods."""
    return {LABEL_JOB: label_value(name), LABEL_ROLE: ROLE_EXECUTOR}


def pod_security_context() -> dict[str, Any]:
    """Pod-level security context of every Spark pod (restricted Pod Security Standard)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": SPARK_UID,
        "runAsGroup": SPARK_GID,
        "fsGroup": SPARK_GID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict[str, Any]:
    """Container-level security context of every Spark container (restricted)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "privileged": False,
    }


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
