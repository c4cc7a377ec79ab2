"""What a GICJob may add to its driver and executor pods: ``podTemplate``.

``spec.application.driver.podTemplate`` and ``spec.application.executor.podTemplate``
take the pod fields users of the Spark and Flink operators expect to shape -- labels,
annotations, node selector, tolerations, affinity, image pull secrets, priority class,
extra volumes and volume mounts, container resources -- in a flat form (no
``containers`` list: mounts and resources go to the Spark container). The launcher
(:mod:`gic_operator.launch.launcher`) merges a template *under* its own fields: every label,
annotation, resource, volume and setting the operator sets wins, and the security
settings are the operator's alone.

Invariants checked at validation (an invalid template makes the GICJob ``Invalid`` with a
message naming the field):

* nothing in a template weakens the restricted Pod Security Standard the operator's pods
  meet: ``securityContext``, ``hostNetwork``, ``hostPID``, ``hostIPC`` and ``privileged``
  are refused by name, volumes only of the types that standard allows
  (:data:`ALLOWED_VOLUME_TYPES`; ``hostPath`` and the rest are refused), no mount
  propagation, and no annotation under ``kubernetes.io`` / ``k8s.io`` (AppArmor and
  seccomp annotations live there);
* nothing in a template gives a pod an API credential: a ``projected`` volume projects no
  ``serviceAccountToken`` (nor anything but Secrets, ConfigMaps, the downward API and
  trust bundles; :mod:`gic_operator.models.volume_sources`);
* nothing in a template takes over what the operator's own objects rely on: labels and
  annotations under ``gic.io/`` and ``app.kubernetes.io/managed-by`` (they select the
  job's pods), the volume names and mount paths of :data:`RESERVED_VOLUMES` and
  :data:`RESERVED_MOUNT_DIRS`;
* every volume has a unique name, and every mount names a volume of the same template.
"""

from __future__ import annotations

import posixpath
import re
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from gic_operator.models.base import KubeModel
from gic_operator.models.volume_sources import projected_problem
from gic_operator.secret_references import check_secret_reference, check_volume_secrets

#: Volume types a template may add: those the restricted Pod Security Standard allows.
ALLOWED_VOLUME_TYPES: Final = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
#: Names of the volumes the operator mounts itself (the job's Spark authentication secret,
#: the executor pod template).
RESERVED_VOLUMES: Final = ("spark-auth", "executor-template")
#: Directories the operator mounts into (a template mount may not be at, above or below).
RESERVED_MOUNT_DIRS: Final = ("/opt/gic/spark-auth", "/opt/gic/executor-template")
#: Most labels, annotations, node selector entries, tolerations, volumes, mounts.
MAX_ENTRIES = 64

_FORBIDDEN_PREFIXES = ("gic.io/",)
_FORBIDDEN_KEYS = ("app.kubernetes.io/managed-by",)
_QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_RESOURCE_NAME = re.compile(r"^([a-z0-9.-]{1,253}/)?[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[mkMGTPE]i?|Ki|n|u)?$")

#: A resource quantity: a number or a string (``500m``, ``2Gi``), as Kubernetes takes it.
Quantity = Annotated[
    int | str,
    WithJsonSchema({"x-kubernetes-int-or-string": True, "description": "Quantity: 2, 500m, 1Gi."}),
]
#: A free-form Kubernetes object (kept as given; Kubernetes validates it).
FreeObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


def _key_problem(key: str, kind: str) -> str | None:
    if not _QUALIFIED_NAME.match(key) or len(key) > 317:
        return f"{kind} key {key!r} is not a Kubernetes qualified name ([prefix/]name)"
    if key.startswith(_FORBIDDEN_PREFIXES) or key in _FORBIDDEN_KEYS:
        return (
            f"{kind} {key!r} is the operator's: labels and annotations under gic.io/ and "
            "app.kubernetes.io/managed-by select and describe the job's pods"
        )
    return None


class TolerationOperator(StrEnum):
    """How a toleration matches a taint."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """Taint effects a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(KubeModel):
    """A Kubernetes toleration."""

    key: str | None = Field(None, max_length=317, description="Taint key; empty: any key.")
    operator: TolerationOperator | None = Field(
        None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(None, max_length=63, description="Taint value (Equal).")
    effect: TaintEffect | None = Field(
        None, description="NoSchedule, PreferNoSchedule or NoExecute; empty: all effects."
    )
    toleration_seconds: int | None = Field(
        None,
        ge=0,
        le=10 * 366 * 86_400,
        description="NoExecute: how long the pod stays bound after the taint appears.",
    )


class LocalObjectReference(KubeModel):
    """An object in the job's namespace, by name."""

    name: str = Field(min_length=1, max_length=253, description="Name of the object.")


class VolumeMount(KubeModel):
    """Where a template volume is mounted in the Spark container."""

    name: str = Field(pattern=_DNS_LABEL, description="Name of a volume of this template.")
    mount_path: str = Field(
        min_length=2, max_length=1024, description="Absolute path in the container."
    )
    read_only: bool | None = Field(None, description="Mount read-only.")
    sub_path: str | None = Field(
        None, max_length=1024, description="Path within the volume (default: its root)."
    )

    @field_validator("mount_path")
    @classmethod
    def _mount_path(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"mountPath {value!r} must be an absolute path")
        normal = posixpath.normpath(value)
        for reserved in RESERVED_MOUNT_DIRS:
            if (
                normal == reserved
                or reserved.startswith(normal + "/")
                or (normal.startswith(reserved + "/"))
            ):
                raise ValueError(
                    f"mountPath {value!r} overlaps {reserved}, where the operator mounts "
                    "the job's own files"
                )
        return value

    @field_validator("sub_path")
    @classmethod
    def _sub_path(cls, value: str | None) -> str | None:
        if value is not None and (value.startswith("/") or ".." in value.split("/")):
            raise ValueError(f"subPath {value!r} must be a relative path without '..'")
        return value


class PodVolume(KubeModel):
    """A Kubernetes volume: a name and one source of a type the restricted Pod Security
    Standard allows (see ALLOWED_VOLUME_TYPES)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True
    )

    name: str = Field(pattern=_DNS_LABEL, description="Volume name (unique in the pod).")
    host_path: FreeObject | None = Field(
        None,
        description="Refused: a host path reaches the node's file system, which the "
        "restricted Pod Security Standard forbids.",
    )

    @field_validator("host_path")
    @classmethod
    def _no_host_path(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError(
                "is not allowed: a hostPath volume reaches the node's file system; use "
                "a persistentVolumeClaim, emptyDir, configMap or secret volume"
            )

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_VOLUMES:
            raise ValueError(f"volume name {value!r} is the operator's own; choose another")
        return value

    @model_validator(mode="after")
    def _one_allowed_source(self) -> PodVolume:
        sources = sorted((self.model_extra or {}).keys())
        refused = [s for s in sources if s not in ALLOWED_VOLUME_TYPES]
        if refused:
            raise ValueError(
                f"volume {self.name!r}: {', '.join(refused)} is not allowed (volumes may be "
                f"{', '.join(ALLOWED_VOLUME_TYPES)}: the types the restricted Pod Security "
                "Standard allows)"
            )
        if len(sources) != 1:
            raise ValueError(
                f"volume {self.name!r} needs exactly one volume source "
                f"({', '.join(ALLOWED_VOLUME_TYPES)}), got {len(sources)}"
            )
        source = (self.model_extra or {})[sources[0]]
        if not isinstance(source, dict):
            raise ValueError(f"volume {self.name!r}: {sources[0]} must be an object")
        problem = projected_problem(self.name, source) if sources[0] == "projected" else None
        if problem is not None:
            raise ValueError(problem)
        check_volume_secrets(self.name, sources[0], source)
        return self


class ResourceRequirements(KubeModel):
    """Extra requests and limits of the Spark container (the operator's CPU and memory
    for the driver, and Spark's for executors, win)."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, max_length=16, description="Resource requests."
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, max_length=16, description="Resource limits."
    )

    @field_validator("requests", "limits")
    @classmethod
    def _quantities(cls, value: dict[str, int | str]) -> dict[str, int | str]:
        for name, amount in value.items():
            if not _RESOURCE_NAME.match(name):
                raise ValueError(f"{name!r} is not a resource name (cpu, memory, vendor/gpu)")
            if isinstance(amount, bool) or not _QUANTITY.match(str(amount)):
                raise ValueError(f"{name}: {amount!r} is not a quantity (2, 500m, 1Gi)")
        return value


def _refuse(why: str) -> str:
    return f"is not allowed: {why} (the operator keeps every Spark pod restricted)"


class PodTemplate(KubeModel):
    """Fields merged into the pods the operator (driver) or Spark (executors) creates,
    under the operator's own fields (see the module docstring)."""

    labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        max_length=MAX_ENTRIES,
        description="Extra pod labels (not under gic.io/, not app.kubernetes.io/managed-by; "
        "the operator's labels win).",
    )
    annotations: dict[str, Annotated[str, Field(max_length=65536)]] = Field(
        default_factory=dict,
        max_length=MAX_ENTRIES,
        description="Extra pod annotations (not under gic.io/, kubernetes.io or k8s.io).",
    )
    node_selector: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict, max_length=MAX_ENTRIES, description="Node labels the pod needs."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=MAX_ENTRIES, description="Tolerations of node taints."
    )
    affinity: FreeObject | None = Field(
        None, description="Kubernetes affinity (node, pod and anti-affinity), as given."
    )
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets in the job's namespace for pulling the image.",
    )
    priority_class_name: str | None = Field(
        None, min_length=1, max_length=253, description="PriorityClass of the pod."
    )
    volumes: list[PodVolume] = Field(
        default_factory=list,
        max_length=MAX_ENTRIES,
        description="Extra volumes: configMap, csi, downwardAPI, emptyDir, ephemeral, "
        "persistentVolumeClaim, projected or secret (hostPath and other types are refused).",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list,
        max_length=MAX_ENTRIES,
        description="Mounts of this template's volumes in the Spark container.",
    )
    resources: ResourceRequirements | None = Field(
        None,
        description="Extra requests and limits of the Spark container (ephemeral-storage, "
        "GPUs, a CPU limit); the CPU and memory the spec sets win.",
    )
    security_context: FreeObject | None = Field(
        None, description="Refused: pod and container security contexts are the operator's."
    )
    host_network: bool | None = Field(None, description="Refused: no host namespaces.")
    host_pid: bool | None = Field(None, alias="hostPID", description="Refused: no host namespaces.")
    host_ipc: bool | None = Field(None, alias="hostIPC", description="Refused: no host namespaces.")
    privileged: bool | None = Field(None, description="Refused: no privileged containers.")

    @field_validator("security_context")
    @classmethod
    def _no_security_context(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                _refuse(
                    "security contexts are the operator's: pods run as non-root user 185, "
                    "without privilege escalation or capabilities, with the RuntimeDefault "
                    "seccomp profile, as the restricted Pod Security Standard requires"
                )
            )

    @field_validator("image_pull_secrets")
    @classmethod
    def _no_rpc_pull_secret(cls, value: list[LocalObjectReference]) -> list[LocalObjectReference]:
        for ref in value:
            check_secret_reference(ref.name)
        return value

    @field_validator("host_network", "host_pid", "host_ipc")
    @classmethod
    def _no_host_namespaces(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(_refuse("pods never share the node's namespaces"))

    @field_validator("privileged")
    @classmethod
    def _no_privileged(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(_refuse("containers never run privileged"))

    @field_validator("labels", "node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        selector = info.field_name == "node_selector"
        kind = "nodeSelector" if selector else "label"
        for key, text in value.items():
            if selector:  # names node labels: only the syntax matters
                problem = None if _QUALIFIED_NAME.match(key) else _key_problem(key, kind)
            else:
                problem = _key_problem(key, kind)
            if problem is None and not _LABEL_VALUE.match(text):
                problem = f"{kind} {key}={text!r}: not a label value"
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("annotations")
    @classmethod
    def _annotations(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            problem = _key_problem(key, "annotation")
            domain = key.split("/", 1)[0] if "/" in key else ""
            if problem is None and domain.endswith(("kubernetes.io", "k8s.io")):
                problem = (
                    f"annotation {key!r} is not allowed: annotations under kubernetes.io "
                    "and k8s.io change how Kubernetes runs the pod (AppArmor, seccomp)"
                )
            if problem is not None:
                raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> PodTemplate:
        names = [v.name for v in self.volumes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"volume names must be unique: {', '.join(duplicates)}")
        unknown = sorted({m.name for m in self.volume_mounts} - set(names))
        if unknown:
            raise ValueError(
                f"volumeMounts name {', '.join(unknown)}, which is not a volume of this "
                f"template (volumes: {', '.join(names) or 'none'})"
            )
        paths = [posixpath.normpath(m.mount_path) for m in self.volume_mounts]
        twice = sorted({p for p in paths if paths.count(p) > 1})
        if twice:
            raise ValueError(f"two volumeMounts share the mountPath {', '.join(twice)}")
        return self
