"""An in-memory :class:`~gic_operator.kube.kube_api.KubeApi` for unit tests of the reconcilers.

:class:`TestingKubeApi` keeps pods, services, custom objects and Events in dicts and
follows the contract of :mod:`gic_operator.kube.kube_api` exactly: creating what exists
(and the job owns: :mod:`gic_operator.kube.ownership`) and deleting what is gone are
no-ops, ``patch_status`` is a JSON merge patch (``None`` deletes a key, lists are
replaced) that, given a ``resource_version``, raises
:class:`~gic_operator.operator_errors.ConflictError` when the object has another one
(every write of a custom object gives it a new ``metadata.resourceVersion``), reads
return copies (a caller mutating a result never changes the store), and ``event`` never
raises. Pods are read through the same :func:`~gic_operator.kube.kube_api.pod_info` as
the real implementation, so a test drives a pod by setting the fields a kubelet would
(:meth:`TestingKubeApi.set_pod_phase`).

Test controls beyond the protocol:

* :meth:`~TestingKubeApi.set_pod_phase` -- what the kubelet reports for a pod;
* ``hold_deletions`` -- deleted pods stay (``deleting``) until
  :meth:`~TestingKubeApi.finish_deletion`, like a pod in its grace period;
* :meth:`~TestingKubeApi.put_object` / :meth:`~TestingKubeApi.update_object` -- what a
  user applies (spec changes bump ``metadata.generation``);
* :meth:`~TestingKubeApi.fail_next` -- make the next calls of a method raise;
* ``events`` and ``calls`` -- what was posted and called, in order.

Thread-safety: every method takes one lock, so the fake may be shared between threads.
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gic_operator.kube.kube_api import DRIVER_CONTAINER, PodInfo, pod_info, rfc3339, with_kind
from gic_operator.kube.merge_patch import merge_patch
from gic_operator.kube.ownership import check_adoptable
from gic_operator.operator_errors import ConflictError

PodKey = tuple[str, str]
ObjectKey = tuple[str, str, str]


@dataclass(frozen=True)
class RecordedEvent:
    """One Event posted through :meth:`TestingKubeApi.event`."""

    kind: str
    namespace: str
    name: str
    type: str
    reason: str
    message: str


def _matches(obj: Mapping[str, Any], labels: Mapping[str, str] | None) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(key) == value for key, value in (labels or {}).items())


class TestingKubeApi:
    """In-memory Kubernetes API for reconciler tests (see the module docstring).

    ``now`` gives the time stamped on created objects (default: the wall clock).
    Thread-safe (one lock around every method).
    """

    __test__ = False  # not a pytest test class

    def __init__(self, *, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        self._lock = threading.RLock()
        self.pods: dict[PodKey, dict[str, Any]] = {}
        self.services: dict[PodKey, dict[str, Any]] = {}
        self.config_maps: dict[PodKey, dict[str, Any]] = {}
        self.secrets: dict[PodKey, dict[str, Any]] = {}
        self.network_policies: dict[PodKey, dict[str, Any]] = {}
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.events: list[RecordedEvent] = []
        self.calls: list[tuple[str, ...]] = []
        self.hold_deletions = False
        self._failures: dict[str, list[Exception]] = {}
        self._version = 0

    def _bump(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Give ``obj`` a new resource version (every write of a custom object does)."""
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        return obj

    # --- test controls -------------------------------------------------------------------

    def fail_next(self, method: str, error: Exception, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` (e.g. ``"create_pod"``) raise
        ``error`` before doing anything."""
        with self._lock:
            self._failures.setdefault(method, []).extend([error] * times)

    def _enter(self, method: str, *args: str) -> None:
        self.calls.append((method, *args))
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)

    def set_pod_phase(
        self,
        namespace: str,
        name: str,
        phase: str,
        *,
        exit_code: int | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Report ``phase`` for the pod as a kubelet would: ``Running`` sets the start
        time; ``Succeeded``/``Failed`` terminate the driver container with ``exit_code``
        (default 0 / 1); ``Pending`` with a ``reason`` makes the container wait (e.g.
        ``ImagePullBackOff``)."""
        with self._lock:
            pod = self.pods[(namespace, name)]
            status: dict[str, Any] = {"phase": phase}
            started = (pod.get("status") or {}).get("startTime")
            state: dict[str, Any] = {}
            if phase in ("Running", "Succeeded", "Failed"):
                status["startTime"] = started or rfc3339(self._now())
                state = {"running": {"startedAt": status["startTime"]}}
            if phase in ("Succeeded", "Failed"):
                code = exit_code if exit_code is not None else (0 if phase == "Succeeded" else 1)
                terminated = {"exitCode": code, "reason": reason or "Error", "message": message}
                state = {"terminated": {k: v for k, v in terminated.items() if v is not None}}
            elif reason is not None:
                status.update(reason=reason, message=message)
                if phase == "Pending":
                    state = {"waiting": {"reason": reason, "message": message}}
            if state:
                status["containerStatuses"] = [{"name": DRIVER_CONTAINER, "state": state}]
            pod["status"] = status

    def finish_deletion(self, namespace: str, name: str) -> None:
        """Remove a pod held in deletion (``hold_deletions``), as when its grace ends."""
        with self._lock:
            self.pods.pop((namespace, name), None)

    def pod_manifest(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored pod (manifest, metadata and status), or ``None``."""
        with self._lock:
            pod = self.pods.get((namespace, name))
            return copy.deepcopy(pod) if pod is not None else None

    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored service, or ``None``."""
        with self._lock:
            svc = self.services.get((namespace, name))
            return copy.deepcopy(svc) if svc is not None else None

    def put_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create or replace a custom object as ``kubectl apply`` would: a new one gets
        a uid and generation 1; a replaced one keeps its uid and status, and its
        generation goes up when the spec changed. Returns the stored object."""
        with self._lock:
            name = body["metadata"]["name"]
            key = (plural, namespace, name)
            old = self.objects.get(key)
            obj = self._new_object(plural, namespace, body)
            if old is not None:
                obj["metadata"]["uid"] = old["metadata"]["uid"]
                obj["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"]
                generation = old["metadata"]["generation"]
                changed = old.get("spec") != obj.get("spec")
                obj["metadata"]["generation"] = generation + 1 if changed else generation
                if "status" in old:
                    obj["status"] = old["status"]
            self.objects[key] = self._bump(obj)
            return copy.deepcopy(obj)

    def update_object(
        self,
        plural: str,
        namespace: str,
        name: str,
        *,
        spec: Mapping[str, Any] | None = None,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Merge-patch a custom object's spec, labels or annotations as a user would
        (``None`` values delete); a spec change bumps the generation."""
        with self._lock:
            obj = self.objects[(plural, namespace, name)]
            meta = obj["metadata"]
            if spec is not None:
                new_spec = merge_patch(obj.get("spec") or {}, spec)
                if new_spec != obj.get("spec"):
                    meta["generation"] = meta.get("generation", 1) + 1
                obj["spec"] = new_spec
            if labels is not None:
                meta["labels"] = merge_patch(meta.get("labels") or {}, labels)
            if annotations is not None:
                meta["annotations"] = merge_patch(meta.get("annotations") or {}, annotations)
            self._bump(obj)
            return copy.deepcopy(obj)

    def reasons(self, name: str | None = None) -> list[str]:
        """Reasons of the Events posted (on object ``name`` only, when given), in order."""
        with self._lock:
            return [e.reason for e in self.events if name is None or e.name == name]

    def _new_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        obj = with_kind(plural, copy.deepcopy(dict(body)))
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339(self._now()))
        meta.setdefault("generation", 1)
        return obj

    @staticmethod
    def _create_owned(
        store: dict[PodKey, dict[str, Any]], kind: str, namespace: str, manifest: Mapping[str, Any]
    ) -> None:
        key = (namespace, manifest["metadata"]["name"])
        if key in store:
            check_adoptable(kind, namespace, manifest, store[key]["metadata"])
        else:
            store[key] = copy.deepcopy(dict(manifest))
            store[key]["metadata"]["namespace"] = namespace

    # --- KubeApi: pods and services ------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        with self._lock:
            self._enter("get_pod", namespace, name)
            pod = self.pods.get((namespace, name))
            return pod_info(pod) if pod is not None else None

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]:
        with self._lock:
            self._enter("list_pods", namespace)
            return [
                pod_info(pod)
                for (ns, _), pod in sorted(self.pods.items())
                if ns == namespace and _matches(pod, labels)
            ]

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            name = manifest["metadata"]["name"]
            self._enter("create_pod", namespace, name)
            if (namespace, name) in self.pods:
                return check_adoptable(
                    "pod", namespace, manifest, self.pods[(namespace, name)]["metadata"]
                )
            pod = {"apiVersion": "v1", "kind": "Pod", **copy.deepcopy(dict(manifest))}
            meta = pod["metadata"]
            meta.update(namespace=namespace, uid=str(uuid.uuid4()))
            meta["creationTimestamp"] = rfc3339(self._now())
            pod["status"] = {"phase": "Pending"}
            self.pods[(namespace, name)] = pod

    def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> None:
        with self._lock:
            self._enter("delete_pod", namespace, name)
            pod = self.pods.get((namespace, name))
            if pod is None:
                return
            if self.hold_deletions and grace_seconds > 0:
                pod["metadata"].setdefault("deletionTimestamp", rfc3339(self._now()))
                pod["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
            else:
                del self.pods[(namespace, name)]

    def apply_service(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            name = manifest["metadata"]["name"]
            self._enter("apply_service", namespace, name)
            self._create_owned(self.services, "service", namespace, manifest)

    def apply_config_map(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            name = manifest["metadata"]["name"]
            self._enter("apply_config_map", namespace, name)
            self._create_owned(self.config_maps, "configmap", namespace, manifest)
            self.config_maps[(namespace, name)] = copy.deepcopy(dict(manifest))  # replaced
            self.config_maps[(namespace, name)]["metadata"]["namespace"] = namespace

    def create_secret(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            name = manifest["metadata"]["name"]
            self._enter("create_secret", namespace, name)
            self._create_owned(self.secrets, "secret", namespace, manifest)

    def apply_network_policy(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        with self._lock:
            name = manifest["metadata"]["name"]
            self._enter("apply_network_policy", namespace, name)
            self._create_owned(self.network_policies, "networkpolicy", namespace, manifest)

    # --- KubeApi: custom objects ---------------------------------------------------------

    def get_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            self._enter("get_object", plural, namespace, name)
            obj = self.objects.get((plural, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list_objects(
        self, plural: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            self._enter("list_objects", plural, namespace)
            return [
                copy.deepcopy(obj)
                for (p, ns, _), obj in sorted(self.objects.items())
                if p == plural and ns == namespace and _matches(obj, labels)
            ]

    def list_objects_everywhere(self, plural: str) -> list[dict[str, Any]]:
        with self._lock:
            self._enter("list_objects_everywhere", plural)
            return [
                copy.deepcopy(obj) for (p, _, _), obj in sorted(self.objects.items()) if p == plural
            ]

    def create_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> bool:
        with self._lock:
            name = body["metadata"]["name"]
            self._enter("create_object", plural, namespace, name)
            if (plural, namespace, name) in self.objects:
                return False
            obj = self._new_object(plural, namespace, body)
            self.objects[(plural, namespace, name)] = self._bump(obj)
            return True

    def delete_object(self, plural: str, namespace: str, name: str) -> None:
        with self._lock:
            self._enter("delete_object", plural, namespace, name)
            self.objects.pop((plural, namespace, name), None)

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> str | None:
        with self._lock:
            self._enter("patch_status", plural, namespace, name)
            key = (plural, namespace, name)
            if key not in self.objects:
                return None
            current = self.objects[key]["metadata"].get("resourceVersion")
            if resource_version and resource_version != current:
                raise ConflictError(
                    f"patching the status of {plural}/{name} in {namespace} failed: HTTP 409 "
                    "Conflict: the object has been modified",
                    status=409,
                    reason="Conflict",
                )
            patched = merge_patch(self.objects[key], {"status": dict(status)})
            self.objects[key] = self._bump(patched)
            version = self.objects[key]["metadata"].get("resourceVersion")
            return str(version) if version is not None else None

    # --- KubeApi: events -----------------------------------------------------------------

    def event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        with self._lock:
            try:
                self._enter("event", reason)
                meta = obj.get("metadata") or {}
                self.events.append(
                    RecordedEvent(
                        kind=str(obj.get("kind", "")),
                        namespace=str(meta.get("namespace", "")),
                        name=str(meta.get("name", "")),
                        type=type,
                        reason=reason,
                        message=message,
                    )
                )
            except Exception:  # the contract: posting an Event never raises
                return
