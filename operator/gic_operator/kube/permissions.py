"""What the operator and the Spark drivers do on the Kubernetes API, as data: the RBAC the
Helm chart grants is exactly this.

Three tables, each checked against the code by ``tests/security/test_rbac_operator.py``:

* :data:`KUBE_API_GRANTS`: the API calls each :class:`gic_operator.kube.kube_api.KubeApi` method
  makes (``{plural}`` stands for the custom resource it is called for); checked against
  the client calls in :class:`gic_operator.kube.kube_client.KubernetesApi`;
* :data:`OPERATOR_CALLS`: every ``KubeApi`` call the reconcilers make, with the custom
  resource; checked against the calls in the operator's modules;
* :data:`KOPF_HANDLER_VERBS` and the ``KOPF_*`` grants: what kopf does for the handlers
  of :mod:`gic_operator.handlers` (watching, its finalizer, its progress in the status),
  for its peering, and for discovering resources and namespaces.

:func:`operator_rules` and :data:`SPARK_DRIVER_GRANTS` give the grants; the chart's
``_helpers.tpl`` writes the same rules and the chart tests compare the rendered Roles with
them. The operator creates each job's Spark authentication Secret; it reads a Secret's
metadata only (``get`` asking for ``PartialObjectMetadata``), to adopt an existing one
only when its GICJob owns it, and never lists Secrets nor reads their data.

Pure data and functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gic_operator.models.base import GROUP

#: ``(apiGroup, resource, verb)``; the core group is ``""``.
Grant = tuple[str, str, str]
PLURAL = "{plural}"

#: API calls of each KubeApi method.
KUBE_API_GRANTS: Mapping[str, tuple[Grant, ...]] = {
    "get_pod": (("", "pods", "get"),),
    "list_pods": (("", "pods", "list"),),
    "create_pod": (("", "pods", "create"), ("", "pods", "get")),
    "delete_pod": (("", "pods", "delete"),),
    # create; on 409 (here and for pods, ConfigMaps, Secrets) read the existing object's
    # metadata to adopt it only when the GICJob owns it (kube/ownership.py)
    "apply_service": (("", "services", "create"), ("", "services", "get")),
    # create, and on 409 replace (an update) with the template of the current spec
    "apply_config_map": (
        ("", "configmaps", "create"),
        ("", "configmaps", "get"),
        ("", "configmaps", "update"),
    ),
    # create; an existing Secret is kept when the job owns it: only its metadata is read
    # (the client asks for PartialObjectMetadata), never its data
    "create_secret": (("", "secrets", "create"), ("", "secrets", "get")),
    # each job's NetworkPolicy (launch/network_policy.py), adopted only when owned
    "apply_network_policy": (
        ("networking.k8s.io", "networkpolicies", "create"),
        ("networking.k8s.io", "networkpolicies", "get"),
    ),
    "get_object": ((GROUP, PLURAL, "get"),),
    "list_objects": ((GROUP, PLURAL, "list"),),
    # the same in every namespace (a ClusterRole grant)
    "list_objects_everywhere": ((GROUP, PLURAL, "list"),),
    "create_object": ((GROUP, PLURAL, "create"),),
    "delete_object": ((GROUP, PLURAL, "delete"),),
    "patch_status": ((GROUP, f"{PLURAL}/status", "patch"),),
    # a new Event, or a merge patch of the count of a recent equal one
    "event": (("", "events", "create"), ("", "events", "patch")),
}

#: Every KubeApi call of the reconcilers: ``(method, custom resource plural or "")``.
OPERATOR_CALLS: frozenset[tuple[str, str]] = frozenset(
    {
        ("get_pod", ""),
        ("list_pods", ""),
        ("create_pod", ""),
        ("apply_network_policy", ""),
        ("delete_pod", ""),
        ("apply_service", ""),
        ("apply_config_map", ""),
        ("create_secret", ""),
        ("event", ""),
        ("get_object", "gicjobs"),
        ("get_object", "savepoints"),
        ("list_objects", "gicjobs"),
        ("list_objects", "savepoints"),
        ("create_object", "savepoints"),
        ("delete_object", "savepoints"),
        ("patch_status", "gicjobs"),
        ("patch_status", "savepoints"),
    }
)

#: Every KubeApi call of :mod:`gic_operator.jobs.unwatched` (``--warn-unwatched``, the chart's
#: ``warnUnwatchedJobs``): GICJobs listed in all namespaces and a Warning Event on each one
#: outside the watched namespaces, so these grants are cluster-wide and only given when
#: that option is on.
UNWATCHED_CALLS: frozenset[tuple[str, str]] = frozenset(
    {("list_objects_everywhere", "gicjobs"), ("event", "")}
)

#: What kopf does on a resource with handlers of each kind: every handled resource is
#: listed and watched; a timer or a deletion handler makes kopf keep its finalizer on the
#: object (a patch); a deletion handler also records its progress in the status.
KOPF_HANDLER_VERBS: Mapping[str, tuple[Grant, ...]] = {
    "event": (("", PLURAL, "list"), ("", PLURAL, "watch")),
    "timer": (("", PLURAL, "list"), ("", PLURAL, "watch"), ("", PLURAL, "patch")),
    "delete": (
        ("", PLURAL, "list"),
        ("", PLURAL, "watch"),
        ("", PLURAL, "patch"),
        ("", f"{PLURAL}/status", "patch"),
    ),
}

#: Objects the operator creates with an owner reference that blocks the owner's deletion
#: (``blockOwnerDeletion``) need ``update`` on the owner's ``finalizers`` subresource
#: where the OwnerReferencesPermissionEnforcement admission plugin runs.
OWNER_GRANTS: tuple[Grant, ...] = ((GROUP, "gicjobs/finalizers", "update"),)

#: kopf's peering objects: namespaced (watching listed namespaces) or cluster-wide.
KOPF_PEERING_NAMESPACED: tuple[Grant, ...] = tuple(
    ("kopf.dev", "kopfpeerings", verb) for verb in ("list", "watch", "patch")
)
KOPF_PEERING_CLUSTER: tuple[Grant, ...] = tuple(
    ("kopf.dev", "clusterkopfpeerings", verb) for verb in ("list", "watch", "patch")
)
#: kopf's discovery of custom resources (always cluster-wide).
KOPF_DISCOVERY: tuple[Grant, ...] = (
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
)
#: kopf's discovery of the namespaces it was asked to watch (namespaced mode only).
KOPF_NAMESPACES: tuple[Grant, ...] = (("", "namespaces", "list"), ("", "namespaces", "watch"))

#: What ``spark-submit`` in a driver does, given the operator's Spark settings: executor
#: pods only (created, watched, polled, labelled and annotated with ``patch``, deleted one
#: by one and all together at the end). No ConfigMaps
#: (``spark.kubernetes.executor.disableConfigMap``), services (the operator owns the
#: driver's) or volume claims (none are allowed).
SPARK_DRIVER_GRANTS: tuple[Grant, ...] = tuple(
    ("", "pods", verb)
    for verb in ("create", "get", "list", "watch", "patch", "delete", "deletecollection")
)


def _expand(grants: Iterable[Grant], plural: str, group: str | None = None) -> set[Grant]:
    out = set()
    for grant_group, resource, verb in grants:
        if PLURAL in resource:
            out.add(
                (
                    group if group is not None else grant_group,
                    resource.replace(PLURAL, plural),
                    verb,
                )
            )
        else:
            out.add((grant_group, resource, verb))
    return out


def call_grants(calls: Iterable[tuple[str, str]]) -> set[Grant]:
    """The grants KubeApi calls ``(method, plural)`` need."""
    out: set[Grant] = set()
    for method, plural in calls:
        out |= _expand(KUBE_API_GRANTS[method], plural)
    return out


def kopf_handler_grants(handlers: Iterable[tuple[str, str, str]]) -> set[Grant]:
    """The grants kopf needs for handlers ``(kind, apiGroup, plural)``."""
    out: set[Grant] = set()
    for kind, group, plural in handlers:
        out |= _expand(KOPF_HANDLER_VERBS[kind], plural, group)
    return out


#: The operator's handlers: ``(kind, apiGroup, plural)`` (checked against handlers.py).
OPERATOR_HANDLERS: frozenset[tuple[str, str, str]] = frozenset(
    {
        ("event", GROUP, "gicjobs"),
        ("timer", GROUP, "gicjobs"),
        ("event", "", "pods"),
        ("event", GROUP, "savepoints"),
        ("timer", GROUP, "savepoints"),
        ("delete", GROUP, "savepoints"),
    }
)


def operator_rules(
    cluster_wide: bool, warn_unwatched: bool = False
) -> tuple[set[Grant], set[Grant]]:
    """``(grants in each watched namespace, cluster-wide grants)`` of the operator; when
    it watches every namespace, both sets go to one ClusterRole. ``warn_unwatched`` adds
    the cluster-wide grants of :data:`UNWATCHED_CALLS` to a namespaced operator (one that
    watches every namespace has no unwatched namespace)."""
    namespaced = (
        call_grants(OPERATOR_CALLS)
        | kopf_handler_grants(OPERATOR_HANDLERS)
        | set(OWNER_GRANTS)
        | set(KOPF_PEERING_CLUSTER if cluster_wide else KOPF_PEERING_NAMESPACED)
    )
    cluster = set(KOPF_DISCOVERY) | (set() if cluster_wide else set(KOPF_NAMESPACES))
    if warn_unwatched and not cluster_wide:
        cluster |= call_grants(UNWATCHED_CALLS)
    return namespaced, cluster
