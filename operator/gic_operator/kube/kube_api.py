"""The seam between the operator and the Kubernetes API.

Reconcilers talk to Kubernetes only through :class:`KubeApi`, a small synchronous
protocol over plain JSON dicts: driver pods (read, list, create, delete), the driver's
service, the operator's own custom objects (``gic.io/v1alpha1``: ``gicjobs``,
``savepoints``), their status, and Events. ``list_objects_everywhere`` lists a custom
resource in every namespace (a cluster-wide grant, used only by
:mod:`gic_operator.jobs.unwatched`).
:class:`gic_operator.kube.kube_client.KubernetesApi` implements it on the official
``kubernetes`` client; :class:`gic_operator.testing.fake_kube.TestingKubeApi` in memory,
for unit tests of the reconcilers.

Contract of every implementation:

* creating what already exists and deleting what is gone are not errors (reconcilers
  repeat themselves after crashes): ``create_pod``/``apply_service``/``create_secret``
  leave the existing object (a Secret is never read back), ``apply_config_map`` replaces
  it, ``create_object`` returns ``False``, deletes and ``patch_status`` of a missing
  object do nothing;
* ``patch_status`` is a JSON merge patch of ``status`` (RFC 7386: a ``None`` value
  deletes the key, lists are replaced whole); with ``resource_version`` it applies only
  to that version of the object and raises :class:`~gic_operator.operator_errors.ConflictError`
  when the object changed since (optimistic concurrency: a status derived from a read
  never overwrites a newer one);
* every other failure raises :class:`~gic_operator.operator_errors.KubeError` saying which call
  failed and why; :class:`~gic_operator.operator_errors.TransientKubeError` when a retry may
  succeed (HTTP 429, 409 conflicts, 5xx, connection errors, timeouts);
* ``event`` never raises: an Event that cannot be posted is logged as a warning.

Thread-safety: the helpers here are pure; implementations say their own (the real one
may be shared between threads).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import rfc3339 as format_time
from gic_operator.kube.ownership import controller_uid
from gic_operator.models.base import API_VERSION

_log = logging.getLogger(__name__)

#: Kind of each custom resource plural the operator manages.
KINDS: Mapping[str, str] = {"gicjobs": "GICJob", "savepoints": "Savepoint"}
#: Name of the driver container in a driver pod.
DRIVER_CONTAINER = "driver"


@dataclass(frozen=True)
class PodInfo:
    """What the operator needs to know about a pod. ``phase`` is the pod's phase
    (``Pending``, ``Running``, ``Succeeded``, ``Failed``, ``Unknown``); ``exit_code``,
    ``reason`` and ``message`` describe the driver container's termination (or why it
    waits, or why the pod failed, e.g. ``Evicted``); ``deleting`` is true once deletion
    started; ``created``/``started`` are RFC 3339 times. Immutable."""

    name: str
    phase: str
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    created: str | None = None
    started: str | None = None
    owner_uid: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the pod ran to an end (``Succeeded`` or ``Failed``)."""
        return self.phase in ("Succeeded", "Failed")


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The :class:`PodInfo` of a pod in its JSON form."""
    meta = Body(pod).metadata
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    driver = next((c for c in statuses if c.get("name") == DRIVER_CONTAINER), None)
    if driver is None and statuses:
        driver = statuses[0]
    state = (driver or {}).get("state") or {}
    terminated = state.get("terminated") or {}
    waiting = state.get("waiting") or {}
    exit_code = terminated.get("exitCode")
    return PodInfo(
        name=str(meta.get("name", "")),
        phase=str(status.get("phase") or "Pending"),
        exit_code=int(exit_code) if exit_code is not None else None,
        reason=terminated.get("reason") or waiting.get("reason") or status.get("reason"),
        message=terminated.get("message") or waiting.get("message") or status.get("message"),
        deleting=meta.get("deletionTimestamp") is not None,
        labels=dict(meta.get("labels") or {}),
        created=meta.get("creationTimestamp"),
        started=status.get("startTime"),
        owner_uid=controller_uid(meta),
    )


def label_selector(labels: Mapping[str, str]) -> str:
    """``k1=v1,k2=v2`` (sorted), the API's equality label selector."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def rfc3339(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as an RFC 3339 UTC time with whole seconds."""
    return format_time((moment or datetime.now(UTC)).timestamp())


def with_kind(plural: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with ``apiVersion`` and ``kind`` filled in when missing."""
    out = dict(body)
    out.setdefault("apiVersion", API_VERSION)
    if plural in KINDS:
        out.setdefault("kind", KINDS[plural])
    return out


class KubeApi(Protocol):
    """The operator's view of the Kubernetes API (see the module docstring)."""

    def get_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]: ...

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> None: ...

    def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> None: ...

    def apply_service(self, namespace: str, manifest: Mapping[str, Any]) -> None: ...

    def apply_config_map(self, namespace: str, manifest: Mapping[str, Any]) -> None: ...

    def create_secret(self, namespace: str, manifest: Mapping[str, Any]) -> None: ...

    def apply_network_policy(self, namespace: str, manifest: Mapping[str, Any]) -> None: ...

    def get_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_objects(
        self, plural: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]: ...

    def list_objects_everywhere(self, plural: str) -> list[dict[str, Any]]: ...

    def create_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> bool: ...

    def delete_object(self, plural: str, namespace: str, name: str) -> None: ...

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> str | None:
        """Merge-patch the status (``resource_version``: only if the object is at that
        version, else :class:`~gic_operator.operator_errors.ConflictError`); returns the
        object's resourceVersion after the patch, ``None`` when the object is gone."""
        ...

    def event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None: ...
