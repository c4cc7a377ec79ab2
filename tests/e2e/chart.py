"""The Helm chart's ServiceAccounts and RBAC, rendered for the test namespaces.

:func:`render_access` renders ``charts/gic-operator`` with Helm's own template engine
(``helm-python-sdk``, the same way ``tests/operator/test_chart.py`` does), for release
:data:`RELEASE` in :data:`RELEASE_NAMESPACE` watching the given namespaces, and keeps
only the ServiceAccounts, Roles, ClusterRoles and their bindings: what the operator and
the Spark drivers are allowed to do is then exactly what a ``helm install`` grants.
(The Deployment is left out: the tests run the operator as a local process.)

Thread-safety: pure functions (Helm renders in memory).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "gic-operator"
RELEASE = "gic"
RELEASE_NAMESPACE = "gic-system"
#: The operator's ServiceAccount in :data:`RELEASE_NAMESPACE` (``<release>-gic-operator``).
OPERATOR_ACCOUNT = f"{RELEASE}-gic-operator"
ACCESS_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def render(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every manifest of the chart rendered with ``values`` (release :data:`RELEASE` in
    :data:`RELEASE_NAMESPACE`)."""
    import helm_python

    with helm_python.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(
            dict(values), name=RELEASE, namespace=RELEASE_NAMESPACE
        )
    docs: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def render_access(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The chart's ServiceAccounts and RBAC with ``watchNamespaces: namespaces`` (the
    operator's Role and the Spark drivers' ``gic-spark`` account in each)."""
    values = {"watchNamespaces": list(namespaces), "peering": {"create": False}}
    return [doc for doc in render(values) if doc["kind"] in ACCESS_KINDS]
