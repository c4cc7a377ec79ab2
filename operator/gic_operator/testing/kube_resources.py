"""Resource types served by the Kubernetes API emulator, and the discovery documents.

A :class:`ResourceType` is one plural name under one group/version (``pods`` in ``v1``,
``gicjobs`` in ``gic.io/v1alpha1``), with what discovery says about it: kind, scope,
short names, categories, verbs and subresources. The :class:`Registry` holds the built-in
types and those derived from CustomResourceDefinitions; a CRD starts being served as soon
as it is registered and stops when it is removed.

Invariants:

* objects of one group and plural share one storage, whatever version serves them
  (:attr:`ResourceType.storage_key`); the emulator does no conversion between versions;
* the core group is the empty string; its group/version is spelled ``v1``.

Thread-safety: not thread-safe; the emulator uses it from its event loop thread only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
_SUBRESOURCE_VERBS = {
    "status": ("get", "patch", "update"),
    "scale": ("get", "patch", "update"),
    "log": ("get",),
}


@dataclass(frozen=True)
class ResourceType:
    """One served resource: a plural name in one group/version and its discovery facts."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    from_crd: bool = False

    @property
    def group_version(self) -> str:
        """``v1`` for the core group, ``group/version`` otherwise (as in ``apiVersion``)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> tuple[str, str]:
        """The key shared by all versions of this resource: (group, plural)."""
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        """Whether ``status`` is a subresource (writes to the main endpoint keep it)."""
        return "status" in self.subresources

    def discovery_entries(self) -> list[dict[str, Any]]:
        """This resource and its subresources as ``APIResourceList.resources`` items."""
        main: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(ALL_VERBS),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        entries = [main]
        for sub in sorted(self.subresources):
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": "Scale" if sub == "scale" else self.kind,
                    "verbs": list(_SUBRESOURCE_VERBS.get(sub, ("get",))),
                }
            )
        return entries


def _core(plural: str, kind: str, *, namespaced: bool = True, **extra: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, **extra)


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core(
        "pods",
        "Pod",
        short_names=("po",),
        categories=("all",),
        subresources=frozenset({"status", "log"}),
    ),
    _core(
        "services",
        "Service",
        short_names=("svc",),
        categories=("all",),
        subresources=frozenset({"status"}),
    ),
    _core("events", "Event", short_names=("ev",)),
    _core("configmaps", "ConfigMap", short_names=("cm",)),
    _core("secrets", "Secret"),
    _core("serviceaccounts", "ServiceAccount", short_names=("sa",)),
    _core(
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        subresources=frozenset({"status"}),
    ),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        subresources=frozenset({"status"}),
    ),
)

CRD_STORAGE_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_STORAGE_KEY = ("", "namespaces")
POD_STORAGE_KEY = ("", "pods")


def types_from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types a CRD object declares: one per served version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = str(spec.get("group", ""))
    plural = str(names.get("plural", ""))
    kind = str(names.get("kind", ""))
    if not group or not plural or not kind:
        return []
    result = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subresources = frozenset((version.get("subresources") or {}).keys())
        result.append(
            ResourceType(
                group=group,
                version=str(version["name"]),
                plural=plural,
                kind=kind,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=str(names.get("singular") or kind.lower()),
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subresources,
                from_crd=True,
            )
        )
    return result


@dataclass
class Registry:
    """The resource types currently served, built-in first, then those of CRDs."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)
    _crd_types: dict[str, list[ResourceType]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rtype in BUILTIN_TYPES:
            self._types[(rtype.group, rtype.version, rtype.plural)] = rtype

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at ``group/version/plural``, if any."""
        return self._types.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        """Every served type, in registration order."""
        return list(self._types.values())

    def versions_of(self, storage_key: tuple[str, str]) -> list[ResourceType]:
        """Every served version of one stored resource."""
        return [t for t in self._types.values() if t.storage_key == storage_key]

    def register_crd(self, crd_name: str, types: Iterable[ResourceType]) -> None:
        """Serve (or re-serve, after an update) the types of one CRD."""
        self.unregister_crd(crd_name)
        kept = []
        for rtype in types:
            key = (rtype.group, rtype.version, rtype.plural)
            if key in self._types and not self._types[key].from_crd:
                continue  # a CRD cannot shadow a built-in type
            self._types[key] = rtype
            kept.append(rtype)
        self._crd_types[crd_name] = kept

    def unregister_crd(self, crd_name: str) -> list[ResourceType]:
        """Stop serving the types of one CRD; returns what was served."""
        removed = self._crd_types.pop(crd_name, [])
        for rtype in removed:
            self._types.pop((rtype.group, rtype.version, rtype.plural), None)
        return removed

    # -- discovery documents ----------------------------------------------------------------

    def groups(self) -> dict[str, list[str]]:
        """Non-core groups and their versions, in registration order."""
        result: dict[str, list[str]] = {}
        for rtype in self._types.values():
            if rtype.group:
                versions = result.setdefault(rtype.group, [])
                if rtype.version not in versions:
                    versions.append(rtype.version)
        return result

    def api_group(self, group: str) -> dict[str, Any] | None:
        """The ``APIGroup`` document of one group, or None when it is not served."""
        versions = self.groups().get(group)
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": entries,
            "preferredVersion": entries[0],
        }

    def api_group_list(self) -> dict[str, Any]:
        """The ``APIGroupList`` served at ``/apis``."""
        groups = [self.api_group(group) for group in self.groups()]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}

    def api_resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        """The ``APIResourceList`` of one group/version, or None when it is not served."""
        types = [t for t in self._types.values() if (t.group, t.version) == (group, version)]
        if not types:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": types[0].group_version,
            "resources": [entry for t in types for entry in t.discovery_entries()],
        }
