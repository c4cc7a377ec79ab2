"""The seam between the operator and the Kubernetes API.

Reconcilers talk to Kubernetes only through :class:`KubeApi`, a small synchronous
protocol over plain JSON dicts: driver pods (read, list, create, delete), the driver's
service, the operator's own custom objects (``gic.io/v1alpha1``: ``gicjobs``,
``savepoints``), their status, and Events. :class:`KubernetesApi` implements it on the
official ``kubernetes`` client; :class:`gic_operator.testing.fake_kube.TestingKubeApi`
in memory, for unit tests of the reconcilers.

Contract of every implementation:

* creating what already exists and deleting what is gone are not errors (reconcilers
  repeat themselves after crashes): ``create_pod``/``apply_service``/``create_secret``
  leave the existing object (a Secret is never read back), ``apply_config_map`` replaces
  it, ``create_object`` returns ``False``, deletes and ``patch_status`` of a missing
  object do nothing;
* ``patch_status`` is a JSON merge patch of ``status`` (RFC 7386: a ``None`` value
  deletes the key, lists are replaced whole); with ``resource_version`` it applies only
  to that version of the object and raises :class:`~gic_operator.errors.ConflictError`
  when the object changed since (optimistic concurrency: a status derived from a read
  never overwrites a newer one);
* every other failure raises :class:`~gic_operator.errors.KubeError` saying which call
  failed and why; :class:`~gic_operator.errors.TransientKubeError` when a retry may
  succeed (HTTP 429, 409 conflicts, 5xx, connection errors, timeouts);
* ``event`` never raises: an Event that cannot be posted is logged as a warning.

Thread-safety: :class:`KubernetesApi` may be shared between threads (the client's
connection pool is thread-safe; so is the Event aggregation cache of
:mod:`gic_operator.kube_events`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gic_operator.conditions import rfc3339 as format_time
from gic_operator.errors import ConflictError, KubeError, TransientKubeError
from gic_operator.kube_events import EventCache, event_body, event_key
from gic_operator.models.base import API_VERSION, GROUP, VERSION
from gic_operator.naming import MANAGED_BY

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

    @property
    def finished(self) -> bool:
        """Whether the pod ran to an end (``Succeeded`` or ``Failed``)."""
        return self.phase in ("Succeeded", "Failed")


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The :class:`PodInfo` of a pod in its JSON form."""
    meta = pod.get("metadata") or {}
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

    def get_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None: ...

    def list_objects(
        self, plural: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]: ...

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
    ) -> None: ...

    def event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None: ...


# --- the real implementation ---------------------------------------------------------


def _status_details(body: Any) -> tuple[str | None, str | None]:
    """``(reason, message)`` of a ``kind: Status`` error body, when it is one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str) or not body:
        return None, None
    try:
        data = json.loads(body)
    except ValueError:
        return None, body[:300]
    if not isinstance(data, dict):
        return None, None
    return data.get("reason"), data.get("message")


def translate_error(what: str, exc: Exception) -> KubeError:
    """The :class:`KubeError` for client exception ``exc`` raised by call ``what``."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        status = int(exc.status) if exc.status is not None else None
        reason, message = _status_details(exc.body)
        reason = reason or (str(exc.reason) if exc.reason else None)
        text = f"{what} failed: HTTP {status} {reason or ''}".rstrip()
        if message:
            text += f": {message}"
        transient = status is not None and (status in (409, 429) or 500 <= status <= 599)
        cls = TransientKubeError if transient else KubeError
        if status == 409 and reason != "AlreadyExists":
            cls = ConflictError
        return cls(text, status=status, reason=reason)
    if isinstance(exc, (OSError, TimeoutError)) or _is_urllib3_error(exc):
        return TransientKubeError(
            f"{what} failed: cannot reach the Kubernetes API ({type(exc).__name__}: {exc})"
        )
    return KubeError(f"{what} failed: {type(exc).__name__}: {exc}")


def _is_urllib3_error(exc: Exception) -> bool:
    import urllib3.exceptions

    return isinstance(exc, urllib3.exceptions.HTTPError)


class KubernetesApi:
    """:class:`KubeApi` on the ``kubernetes`` client (see the module docstring).

    ``api_client`` defaults to one built from ``kubernetes.config.load_config()``
    (``KUBECONFIG`` or ``~/.kube/config`` when present, else the in-cluster service
    account). ``request_timeout_s`` bounds every call. Thread-safe.
    """

    def __init__(
        self,
        api_client: Any | None = None,
        *,
        request_timeout_s: float = 30.0,
        component: str = MANAGED_BY,
    ) -> None:
        import kubernetes

        if api_client is None:
            kubernetes.config.load_config()  # type: ignore[no-untyped-call]
            api_client = kubernetes.client.ApiClient()
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._custom = kubernetes.client.CustomObjectsApi(api_client)
        self._timeout = request_timeout_s
        self._component = component
        self._events = EventCache()

    # --- plumbing ----------------------------------------------------------------

    def _call(
        self,
        what: str,
        fn: Callable[..., Any],
        *args: Any,
        ok: Mapping[int, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``fn`` and return its JSON body (``None`` for an empty one); a status in
        ``ok`` returns the value mapped to it instead of raising."""
        from kubernetes.client.exceptions import ApiException

        try:
            response = fn(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            data = response.data
        except ApiException as exc:
            if ok is not None and exc.status in ok:
                return ok[exc.status]
            raise translate_error(what, exc) from exc
        except Exception as exc:
            raise translate_error(what, exc) from exc
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise KubeError(f"{what} failed: the API answered with something not JSON") from exc

    @staticmethod
    def _model(model: Any, what: str, manifest: Mapping[str, Any]) -> Any:
        try:
            return model.model_validate(dict(manifest))
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise KubeError(f"{what} failed: the manifest is not valid: {exc}") from exc

    # --- pods and services ---------------------------------------------------------

    def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        data = self._call(
            f"reading pod {namespace}/{name}",
            self._core.read_namespaced_pod,
            name,
            namespace,
            ok={404: None},
        )
        return pod_info(data) if data is not None else None

    def list_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]:
        selector = label_selector(labels)
        data = self._call(
            f"listing pods in {namespace} ({selector})",
            self._core.list_namespaced_pod,
            namespace,
            label_selector=selector or None,
        )
        return [pod_info(item) for item in (data or {}).get("items") or []]

    def create_pod(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1Pod

        name = (manifest.get("metadata") or {}).get("name")
        what = f"creating pod {namespace}/{name}"
        body = self._model(V1Pod, what, manifest)
        self._call(what, self._core.create_namespaced_pod, namespace, body, ok={409: None})

    def delete_pod(self, namespace: str, name: str, grace_seconds: int) -> None:
        self._call(
            f"deleting pod {namespace}/{name}",
            self._core.delete_namespaced_pod,
            name,
            namespace,
            grace_period_seconds=grace_seconds,
            ok={404: None},
        )

    def apply_service(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1Service

        name = (manifest.get("metadata") or {}).get("name")
        what = f"creating service {namespace}/{name}"
        body = self._model(V1Service, what, manifest)
        self._call(what, self._core.create_namespaced_service, namespace, body, ok={409: None})

    def apply_config_map(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1ConfigMap

        name = str((manifest.get("metadata") or {}).get("name"))
        what = f"creating configmap {namespace}/{name}"
        body = self._model(V1ConfigMap, what, manifest)
        created = self._call(
            what, self._core.create_namespaced_config_map, namespace, body, ok={409: False}
        )
        if created is False:
            self._call(
                f"replacing configmap {namespace}/{name}",
                self._core.replace_namespaced_config_map,
                name,
                namespace,
                body,
            )

    def create_secret(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1Secret

        name = (manifest.get("metadata") or {}).get("name")
        what = f"creating secret {namespace}/{name}"
        try:
            body = V1Secret.model_validate(dict(manifest))
        except ValueError:  # the error would quote the data: never put it in a message
            raise KubeError(f"{what} failed: the manifest is not valid") from None
        self._call(what, self._core.create_namespaced_secret, namespace, body, ok={409: None})

    # --- custom objects --------------------------------------------------------------

    def get_object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        data = self._call(
            f"reading {plural}/{name} in {namespace}",
            self._custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            ok={404: None},
        )
        return dict(data) if data is not None else None

    def list_objects(
        self, plural: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        selector = label_selector(labels or {})
        data = self._call(
            f"listing {plural} in {namespace}",
            self._custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            label_selector=selector or None,
        )
        return [with_kind(plural, item) for item in (data or {}).get("items") or []]

    def create_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> bool:
        name = (body.get("metadata") or {}).get("name")
        created = self._call(
            f"creating {plural}/{name} in {namespace}",
            self._custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            with_kind(plural, body),
            ok={409: False},
        )
        return created is not False

    def delete_object(self, plural: str, namespace: str, name: str) -> None:
        self._call(
            f"deleting {plural}/{name} in {namespace}",
            self._custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            ok={404: None},
        )

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: Mapping[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None:
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            # A merge patch carrying metadata.resourceVersion is a precondition: the API
            # server answers 409 Conflict when the object has another version.
            body["metadata"] = {"resourceVersion": resource_version}
        self._call(
            f"patching the status of {plural}/{name} in {namespace}",
            self._custom.patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            body,
            _content_type="application/merge-patch+json",
            ok={404: None},
        )

    # --- events ----------------------------------------------------------------------

    def event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        try:
            self._post_event(obj, type, reason, message)
        except Exception as exc:
            meta = obj.get("metadata") or {}
            _log.warning(
                "could not post event %s (%s) on %s %s/%s: %s",
                reason,
                type,
                obj.get("kind"),
                meta.get("namespace"),
                meta.get("name"),
                exc,
            )

    def _post_event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        from kubernetes.client import CoreV1Event

        key = event_key(obj, type, reason, message)
        namespace, now = key[0], rfc3339()
        recent = self._events.recent(key)
        if recent is not None:
            patched = self._call(
                f"updating event {namespace}/{recent.name}",
                self._core.patch_namespaced_event,
                recent.name,
                namespace,
                {"count": recent.count + 1, "lastTimestamp": now},
                _content_type="application/merge-patch+json",
                ok={404: None},
            )
            if patched is not None:
                self._events.remember(key, recent.name, recent.count + 1, recent.first)
                return
        body = event_body(obj, type, reason, message, component=self._component, now=now)
        name = (obj.get("metadata") or {}).get("name")
        what = f"posting event {reason} on {obj.get('kind')} {namespace}/{name}"
        model = self._model(CoreV1Event, what, body)
        self._call(what, self._core.create_namespaced_event, namespace, model)
        self._events.remember(key, body["metadata"]["name"], 1, now)
