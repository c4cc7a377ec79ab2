"""The emulator's object store: objects, one resource-version counter, a watch history.

Every write that changes an object takes the next value of one global counter as its
``resourceVersion`` and appends a :class:`WatchEvent` (ADDED, MODIFIED or DELETED) to a
bounded history, then hands it to every subscriber. A watch that starts from a resource
version replays the history after it; when part of that history has been dropped,
:meth:`KubeStore.events_since` says so and the watch answers ``410 Gone``. Writes that
change nothing take no new version and produce no event.

Deletion follows the API server: an object with finalizers gets ``deletionTimestamp``
(once) and stays until a write empties its finalizers; a pod bound to a node and not yet
finished is deleted gracefully (it stays, marked, until its kubelet deletes it again
with grace period 0); anything else goes at once. When an object goes, objects whose
``ownerReferences`` all point at objects that are gone are deleted in turn (background
cascading; ``propagationPolicy: Orphan`` removes the references instead). Deleting a
namespace deletes what it contains; deleting a CRD drops its objects outright.

Thread-safety: not thread-safe; the emulator calls it from its event loop thread only.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gic_operator.testing import kube_objects as objects
from gic_operator.testing.kube_errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
)
from gic_operator.testing.kube_patch import (
    PatchError,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from gic_operator.testing.kube_resources import (
    CRD_STORAGE_KEY,
    NAMESPACE_STORAGE_KEY,
    POD_STORAGE_KEY,
    Registry,
    ResourceType,
    types_from_crd,
)
from gic_operator.testing.kube_selectors import FieldSelector, LabelSelector

StorageKey = tuple[str, str]
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    "application/merge-patch+json": merge_patch,
    "application/json-patch+json": json_patch,
    "application/strategic-merge-patch+json": strategic_merge_patch,
}
PATCH_TYPES = tuple(_PATCHERS)


@dataclass(frozen=True)
class WatchEvent:
    """One change: the object after it (before it, for DELETED) and before it."""

    resource_version: int
    type: str
    storage_key: StorageKey
    obj: dict[str, Any]
    old: dict[str, Any] | None


class KubeStore:
    """Objects by kind, namespace and name, with the write semantics of an API server."""

    def __init__(self, registry: Registry, *, history_size: int = 10_000) -> None:
        self.registry = registry
        self._objects: dict[StorageKey, dict[tuple[str, str], dict[str, Any]]] = {}
        self._version = 0
        self._history: list[WatchEvent] = []
        self._history_size = history_size
        self._dropped_up_to = 0
        self._subscribers: list[Callable[[WatchEvent], None]] = []

    # -- reading ----------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        """The version of the latest write."""
        return self._version

    def get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        """The object, as served under ``rtype``; 404 if absent."""
        return objects.render(rtype, self._existing(rtype, namespace, name))

    def list_objects(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        *,
        limit: int = 0,
        continue_token: str = "",
    ) -> dict[str, Any]:
        """A ``<Kind>List`` of matching objects (all namespaces when ``namespace`` is None)."""
        start: list[str] | None = None
        if continue_token:
            try:
                start = json.loads(base64.urlsafe_b64decode(continue_token))["start"]
            except (ValueError, KeyError, TypeError) as exc:
                raise bad_request("invalid continue token") from exc
        bucket = self._objects.get(rtype.storage_key, {})
        keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
        if start is not None:
            keys = [k for k in keys if list(k) > start]
        items: list[dict[str, Any]] = []
        last_key: tuple[str, str] = ("", "")
        metadata: dict[str, Any] = {"resourceVersion": str(self._version)}
        for key in keys:
            obj = bucket[key]
            if labels.matches(obj) and fields.matches(obj):
                if limit and len(items) == limit:
                    token = json.dumps({"start": list(last_key)}).encode()
                    metadata["continue"] = base64.urlsafe_b64encode(token).decode()
                    break
                items.append(objects.render(rtype, obj))
                last_key = key
        return {
            "kind": f"{rtype.kind}List",
            "apiVersion": rtype.group_version,
            "metadata": metadata,
            "items": items,
        }

    def contains(self, rtype: ResourceType, obj: dict[str, Any]) -> bool:
        """Whether this very object (same uid) is still stored."""
        return self._current(rtype.storage_key, obj) is not None

    def events_since(self, version: int) -> list[WatchEvent] | None:
        """Events after ``version``, oldest first; None when some of them were dropped."""
        if version < self._dropped_up_to:
            return None
        return [event for event in self._history if event.resource_version > version]

    @property
    def watcher_count(self) -> int:
        """How many subscribers (open watch streams, mostly) there are."""
        return len(self._subscribers)

    def subscribe(self, callback: Callable[[WatchEvent], None]) -> Callable[[], None]:
        """Call ``callback`` with every future event; returns the unsubscribing function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    # -- writing ----------------------------------------------------------------------------

    def create(self, rtype: ResourceType, namespace: str | None, body: Any) -> dict[str, Any]:
        """POST: store a new object; 409 if the name is taken."""
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request("the object must be a JSON object with a metadata map")
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        namespace = self._check_namespace(rtype, namespace, meta.get("namespace"))
        bucket = self._objects.setdefault(rtype.storage_key, {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rtype.kind, "", "metadata.name: Required value")
            while True:
                suffix = "".join(random.choices(_GENERATE_ALPHABET, k=5))
                if (namespace or "", prefix + suffix) not in bucket:
                    break
            meta["name"] = prefix + suffix
        key = (namespace or "", meta["name"])
        if key in bucket:
            raise already_exists(rtype.plural, meta["name"], rtype.group)
        obj = objects.prepare_create(rtype, namespace, body)
        if rtype.storage_key == CRD_STORAGE_KEY:
            self.registry.register_crd(meta["name"], types_from_crd(obj))
        self._commit(rtype.storage_key, key, None, obj)
        return objects.render(rtype, obj)

    def replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PUT: replace the object (or its status); 409 on a stale ``resourceVersion``."""
        old = self._existing(rtype, namespace, name)
        if not isinstance(body, dict):
            raise bad_request("the object must be a JSON object")
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        self._check_version(rtype, old, meta.get("resourceVersion"))
        return self._update(rtype, old, body, subresource)

    def patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """PATCH in one of :data:`PATCH_TYPES`; 422 when it cannot apply, 409 when stale."""
        old = self._existing(rtype, namespace, name)
        patcher = _PATCHERS.get(patch_type)
        if patcher is None:
            raise ApiError(
                415, "UnsupportedMediaType", f"the media type {patch_type!r} is not supported"
            )
        try:
            new = patcher(objects.render(rtype, old), patch)
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc), kind=rtype.kind, name=name) from exc
        if not isinstance(new, dict):
            raise invalid(rtype.kind, name, "the patched object is not a JSON object")
        self._check_version(rtype, old, (new.get("metadata") or {}).get("resourceVersion"))
        return self._update(rtype, old, new, subresource)

    def delete(
        self, rtype: ResourceType, namespace: str | None, name: str, options: Any = None
    ) -> dict[str, Any]:
        """DELETE: mark or remove the object; returns its last state."""
        options = options if isinstance(options, dict) else {}
        obj = self._existing(rtype, namespace, name)
        preconditions = options.get("preconditions") or {}
        meta = obj["metadata"]
        if preconditions.get("uid") not in (None, meta["uid"]):
            raise conflict(rtype.plural, name, "Precondition failed: UID mismatch")
        if preconditions.get("resourceVersion") not in (None, meta["resourceVersion"]):
            raise conflict(rtype.plural, name, "Precondition failed: resourceVersion mismatch")
        grace = options.get("gracePeriodSeconds")
        orphan = options.get("propagationPolicy") == "Orphan" or options.get("orphanDependents")
        self._delete(rtype.storage_key, obj, grace, orphan=bool(orphan))
        return objects.render(rtype, self._current(rtype.storage_key, obj) or obj)

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        options: Any = None,
    ) -> dict[str, Any]:
        """DELETE on a list endpoint: delete every matching object; returns the list."""
        listed = self.list_objects(rtype, namespace, labels, fields)
        for item in listed["items"]:
            meta = item["metadata"]
            if self._current(rtype.storage_key, item) is not None:
                self.delete(rtype, meta.get("namespace"), meta["name"], options)
        return listed

    # -- internals --------------------------------------------------------------------------

    def _check_namespace(
        self, rtype: ResourceType, url_namespace: str | None, body_namespace: str | None
    ) -> str | None:
        if not rtype.namespaced:
            return None
        if url_namespace is None:
            raise ApiError(405, "MethodNotAllowed", f"create {rtype.plural} needs a namespace")
        if body_namespace not in (None, "", url_namespace):
            why = "the namespace of the object does not match the namespace of the request"
            raise bad_request(why)
        return url_namespace

    def _existing(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        key = ((namespace or "") if rtype.namespaced else "", name)
        obj = self._objects.get(rtype.storage_key, {}).get(key)
        if obj is None:
            raise not_found(rtype.plural, name, rtype.group)
        return obj

    def _current(self, storage_key: StorageKey, obj: dict[str, Any]) -> dict[str, Any] | None:
        meta = obj["metadata"]
        found = self._objects.get(storage_key, {}).get((meta.get("namespace", ""), meta["name"]))
        return found if found is not None and found["metadata"]["uid"] == meta["uid"] else None

    def _check_version(self, rtype: ResourceType, old: dict[str, Any], wanted: Any) -> None:
        if wanted not in (None, "") and str(wanted) != old["metadata"]["resourceVersion"]:
            why = (
                "the object has been modified;"
                " please apply your changes to the latest version and try again"
            )
            raise conflict(rtype.plural, old["metadata"]["name"], why)

    def _update(
        self, rtype: ResourceType, old: dict[str, Any], new: Any, subresource: str | None
    ) -> dict[str, Any]:
        obj = objects.prepare_update(rtype, old, new, subresource)
        if objects.same_content(old, obj):
            return objects.render(rtype, old)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        meta = obj["metadata"]
        released = meta.get("deletionTimestamp") and not meta.get("finalizers")
        if released and not meta.get("deletionGracePeriodSeconds"):
            return objects.render(rtype, self._remove(rtype.storage_key, obj, orphan=False))
        if rtype.storage_key == CRD_STORAGE_KEY:
            self.registry.register_crd(meta["name"], types_from_crd(obj))
        self._commit(rtype.storage_key, key, old, obj)
        return objects.render(rtype, obj)

    def _commit(
        self,
        storage_key: StorageKey,
        key: tuple[str, str],
        old: dict[str, Any] | None,
        obj: dict[str, Any],
    ) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._objects.setdefault(storage_key, {})[key] = obj
        self._emit(
            WatchEvent(self._version, "ADDED" if old is None else "MODIFIED", storage_key, obj, old)
        )

    def _emit(self, event: WatchEvent) -> None:
        self._history.append(event)
        if len(self._history) > self._history_size * 5 // 4:
            cut = len(self._history) - self._history_size
            self._dropped_up_to = self._history[cut - 1].resource_version
            del self._history[:cut]
        for subscriber in list(self._subscribers):
            subscriber(event)

    def _delete(
        self, storage_key: StorageKey, obj: dict[str, Any], grace: Any, *, orphan: bool
    ) -> None:
        meta = obj["metadata"]
        graceful = (
            storage_key == POD_STORAGE_KEY
            and grace != 0
            and bool((obj.get("spec") or {}).get("nodeName"))
            and (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        if graceful:
            seconds = int(
                grace if grace is not None else obj["spec"].get("terminationGracePeriodSeconds", 30)
            )
            if (
                meta.get("deletionTimestamp")
                and meta.get("deletionGracePeriodSeconds", 0) <= seconds
            ):
                return
            self._mark_deleted(storage_key, obj, seconds)
        elif meta.get("finalizers"):
            if not meta.get("deletionTimestamp") or meta.get("deletionGracePeriodSeconds"):
                self._mark_deleted(storage_key, obj, 0)
        else:
            self._remove(storage_key, obj, orphan=orphan)

    def _mark_deleted(self, storage_key: StorageKey, obj: dict[str, Any], seconds: int) -> None:
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        if not meta.get("deletionTimestamp"):
            meta["generation"] = int(meta.get("generation", 1)) + 1
            meta["deletionTimestamp"] = objects.now_rfc3339()
        meta["deletionGracePeriodSeconds"] = seconds
        self._commit(storage_key, (meta.get("namespace", ""), meta["name"]), obj, new)

    def _remove(
        self, storage_key: StorageKey, obj: dict[str, Any], *, orphan: bool
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        self._objects.get(storage_key, {}).pop((meta.get("namespace", ""), meta["name"]), None)
        self._version += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self._version)
        self._emit(WatchEvent(self._version, "DELETED", storage_key, gone, obj))
        if storage_key == CRD_STORAGE_KEY:
            self._drop_custom_resources(meta["name"])
        if storage_key == NAMESPACE_STORAGE_KEY:
            self._empty_namespace(meta["name"])
        self._collect_dependents(meta["uid"], orphan=orphan)
        return gone

    def _all_objects(self) -> Iterable[tuple[StorageKey, dict[str, Any]]]:
        for storage_key, bucket in list(self._objects.items()):
            for obj in list(bucket.values()):
                yield storage_key, obj

    def _collect_dependents(self, uid: str, *, orphan: bool) -> None:
        live = {obj["metadata"]["uid"] for _, obj in self._all_objects()}
        for storage_key, obj in self._all_objects():
            refs = obj["metadata"].get("ownerReferences") or []
            if (
                not any(ref.get("uid") == uid for ref in refs)
                or self._current(storage_key, obj) is None
            ):
                continue
            if orphan:
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                objects.normalize_metadata(new)
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                self._commit(storage_key, key, obj, new)
            elif not any(ref.get("uid") in live for ref in refs):
                self._delete(storage_key, obj, None, orphan=False)

    def _drop_custom_resources(self, crd_name: str) -> None:
        for rtype in self.registry.unregister_crd(crd_name):
            for obj in list(self._objects.get(rtype.storage_key, {}).values()):
                self._remove(rtype.storage_key, obj, orphan=False)

    def _empty_namespace(self, namespace: str) -> None:
        for storage_key, obj in self._all_objects():
            if obj["metadata"].get("namespace") == namespace and self._current(storage_key, obj):
                self._delete(storage_key, obj, None, orphan=False)
