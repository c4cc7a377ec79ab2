"""The operator's :class:`~gic_operator.kube.kube_api.KubeApi` on the official ``kubernetes``
client: :class:`KubernetesApi`, and the translation of the client's errors into the
operator's (:func:`translate_error`).

It keeps the protocol's contract (see :mod:`gic_operator.kube.kube_api`): repeated creates and
deletes are not errors, status patches are JSON merge patches with an optional
``resourceVersion`` precondition (a 409 becomes
:class:`~gic_operator.operator_errors.ConflictError`), every other failure a
:class:`~gic_operator.operator_errors.KubeError` naming the call (transient for 429, 409, 5xx,
connection errors and timeouts), and ``event`` never raises. Creating a job's pod,
service, ConfigMap or Secret that exists is success only when the GICJob owns it
(:mod:`gic_operator.kube.ownership`); only its metadata is read to know. A manifest the client
refuses never appears in an error message (a Secret's data would).

Thread-safety: a :class:`KubernetesApi` may be shared between threads (the client's
connection pool is thread-safe; so is the Event aggregation cache of
:mod:`gic_operator.kube.kube_events`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_api import PodInfo, label_selector, pod_info, rfc3339, with_kind
from gic_operator.kube.kube_events import EventCache, event_body, event_key
from gic_operator.kube.naming import MANAGED_BY
from gic_operator.kube.ownership import METADATA_ONLY, check_adoptable
from gic_operator.models.base import GROUP, VERSION
from gic_operator.operator_errors import ConflictError, KubeError, TransientKubeError

_log = logging.getLogger(__name__)


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
        self._networking = kubernetes.client.NetworkingV1Api(api_client)
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

    def _check_owned(
        self, kind: str, namespace: str, manifest: Mapping[str, Any], read: Any, what: str
    ) -> None:
        """After ``what`` met an existing object: :func:`~gic_operator.kube.ownership.
        check_adoptable` on its metadata (only that is read: never a Secret's data)."""
        name = str(Body(manifest).metadata.get("name"))
        what_read = f"reading the metadata of {kind} {namespace}/{name}"
        headers = dict(METADATA_ONLY)
        data = self._call(what_read, read, name, namespace, ok={404: None}, _headers=headers)
        if data is None:
            raise TransientKubeError(f"{what} failed: it existed, then was gone; trying again")
        check_adoptable(kind, namespace, manifest, data.get("metadata") or {})

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

        name = Body(manifest).metadata.get("name")
        what = f"creating pod {namespace}/{name}"
        body = self._model(V1Pod, what, manifest)
        created = self._call(
            what, self._core.create_namespaced_pod, namespace, body, ok={409: False}
        )
        if created is False:
            self._check_owned("pod", namespace, manifest, self._core.read_namespaced_pod, what)

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

        name = Body(manifest).metadata.get("name")
        what = f"creating service {namespace}/{name}"
        body = self._model(V1Service, what, manifest)
        created = self._call(
            what, self._core.create_namespaced_service, namespace, body, ok={409: False}
        )
        if created is False:
            read = self._core.read_namespaced_service
            self._check_owned("service", namespace, manifest, read, what)

    def apply_config_map(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1ConfigMap

        name = str(Body(manifest).metadata.get("name"))
        what = f"creating configmap {namespace}/{name}"
        body = self._model(V1ConfigMap, what, manifest)
        created = self._call(
            what, self._core.create_namespaced_config_map, namespace, body, ok={409: False}
        )
        if created is False:
            read = self._core.read_namespaced_config_map
            self._check_owned("configmap", namespace, manifest, read, what)
            self._call(
                f"replacing configmap {namespace}/{name}",
                self._core.replace_namespaced_config_map,
                name,
                namespace,
                body,
            )

    def create_secret(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1Secret

        name = Body(manifest).metadata.get("name")
        what = f"creating secret {namespace}/{name}"
        try:
            body = V1Secret.model_validate(dict(manifest))
        except ValueError:  # the error would quote the data: never put it in a message
            raise KubeError(f"{what} failed: the manifest is not valid") from None
        created = self._call(
            what, self._core.create_namespaced_secret, namespace, body, ok={409: False}
        )
        if created is False:  # its metadata only: the operator never reads a Secret's data
            read = self._core.read_namespaced_secret
            self._check_owned("secret", namespace, manifest, read, what)

    def apply_network_policy(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes.client import V1NetworkPolicy

        name = Body(manifest).metadata.get("name")
        what = f"creating networkpolicy {namespace}/{name}"
        body = self._model(V1NetworkPolicy, what, manifest)
        create = self._networking.create_namespaced_network_policy
        if self._call(what, create, namespace, body, ok={409: False}) is False:
            read = self._networking.read_namespaced_network_policy
            self._check_owned("networkpolicy", namespace, manifest, read, what)

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

    def list_objects_everywhere(self, plural: str) -> list[dict[str, Any]]:
        data = self._call(
            f"listing {plural} in all namespaces",
            self._custom.list_cluster_custom_object,
            GROUP,
            VERSION,
            plural,
        )
        return [with_kind(plural, item) for item in (data or {}).get("items") or []]

    def create_object(self, plural: str, namespace: str, body: Mapping[str, Any]) -> bool:
        name = Body(body).metadata.get("name")
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
    ) -> str | None:
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            # A merge patch carrying metadata.resourceVersion is a precondition: the API
            # server answers 409 Conflict when the object has another version.
            body["metadata"] = {"resourceVersion": resource_version}
        patched = self._call(
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
        if not isinstance(patched, Mapping):
            return None
        version = Body(patched).resource_version
        return version if isinstance(version, str) else None

    # --- events ----------------------------------------------------------------------

    def event(self, obj: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        try:
            self._post_event(obj, type, reason, message)
        except Exception as exc:
            meta = Body(obj).metadata
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
        name = Body(obj).metadata.get("name")
        what = f"posting event {reason} on {obj.get('kind')} {namespace}/{name}"
        model = self._model(CoreV1Event, what, body)
        self._call(what, self._core.create_namespaced_event, namespace, model)
        self._events.remember(key, body["metadata"]["name"], 1, now)
