"""What users apply, checked by the real API server of the test control plane before any
user does: every manifest of ``examples/k8s/`` and every object the Helm chart renders (with
its default values and with each documented setting) goes through ``kubectl apply
--dry-run=server --validate=strict``. Built-in kinds meet the API server's own decoding and
validation (an unknown field is an error, not a warning), GICJob and Savepoint the structural
schemas of ``crds/``, which are applied for real first. Nothing is stored.

Controls keep the checks from passing vacuously: a copy of each example document with an
unknown field, and one with a list where a scalar belongs, is refused naming the field;
so is the chart's Deployment.

The chart's ServiceMonitor (``metrics.serviceMonitor.enabled``) is checked against the
Prometheus Operator's own CRD, of a pinned release fetched as a Go module
(:mod:`tests.controlplane.extra_crds`) and applied with the project's CRDs.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from ...controlplane.cluster import REPO
from ...controlplane.extra_crds import service_monitor_crd
from ..test_chart import CHART, VALUES, _leaf_paths
from .support import KubeEnv

EXAMPLES = REPO / "examples" / "k8s"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
RELEASE = "gic"
UNKNOWN_FIELD = "gicUnknownField"
#: A value of no scalar type (an object would first be refused as an unknown field in it).
WRONG_TYPE = ["gic-wrong-type"]

Doc = dict[str, Any]


# --- helpers ---------------------------------------------------------------------------------


def _load(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


#: API groups of the custom resources of ``crds/``.
CRD_GROUPS = {
    d["spec"]["group"] for path in sorted((REPO / "crds").glob("*.yaml")) for d in _load(path)
}


def _dry_run(env: KubeEnv, docs: list[Doc], namespace: str) -> subprocess.CompletedProcess[str]:
    """``kubectl apply --dry-run=server --validate=strict`` of ``docs`` (namespaced ones
    without a namespace go to ``namespace``)."""
    return env.plane.kubectl(
        "apply", f"--namespace={namespace}", "--dry-run=server", "--validate=strict", "-f", "-",
        input=yaml.safe_dump_all(docs, sort_keys=False),
        check=False,
    )  # fmt: skip


def _assert_accepted(result: subprocess.CompletedProcess[str], docs: list[Doc], what: str) -> None:
    """Every object accepted by the server's dry run, without an error or a warning."""
    names = [f"{d['kind']}/{d['metadata']['name']}" for d in docs]
    assert result.returncode == 0, f"{what}: the API server refused\n{result.stderr}"
    assert result.stderr.strip() == "", f"{what}: kubectl said\n{result.stderr}"
    lines = result.stdout.splitlines()
    assert len(lines) == len(docs), f"{what}: {names}\n{result.stdout}"
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout


def _assert_refused(result: subprocess.CompletedProcess[str], pattern: str, what: str) -> None:
    assert result.returncode != 0, f"{what} was accepted:\n{result.stdout}"
    assert re.search(pattern, result.stderr), f"{what}: {pattern!r} not in\n{result.stderr}"


def _scalar_leaves(node: Doc, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Paths of the scalar values of ``node``, through mappings only (not lists)."""
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _scalar_leaves(value, (*path, key))
        elif not isinstance(value, list):
            yield (*path, key)


def _is_custom(doc: Doc) -> bool:
    """Whether ``doc`` is a custom resource (validated by a CRD's schema)."""
    return _group(doc) in CRD_GROUPS


def _group(doc: Doc) -> str:
    api_version = str(doc["apiVersion"])
    group, _, _version = api_version.rpartition("/")
    return group


def _with_unknown_field(doc: Doc) -> tuple[Doc, str]:
    """A copy of ``doc`` with an unknown field (in ``spec`` when there is one), and the
    pattern of the server's refusal naming it."""
    bad = copy.deepcopy(doc)
    if isinstance(bad.get("spec"), dict):
        bad["spec"][UNKNOWN_FIELD] = "x"
        field = f"spec.{UNKNOWN_FIELD}"
    else:
        bad[UNKNOWN_FIELD] = "x"
        field = UNKNOWN_FIELD
    return bad, rf'strict decoding error: unknown field "{re.escape(field)}"'


def _with_wrong_type(doc: Doc) -> tuple[Doc, str]:
    """A copy of ``doc`` with a list where its first scalar (outside ``metadata``) belongs,
    and the pattern of the server's refusal naming that field: the CRD schema's error for a
    custom resource, the decoder's (Go type, then the field's path) for a built-in kind."""
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    path = next(_scalar_leaves(body))
    bad = copy.deepcopy(doc)
    parent = bad
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = list(WRONG_TYPE)
    field = re.escape(".".join(path))
    if _is_custom(doc):
        return bad, rf'\b{field}: Invalid value: "array": {field} in body must be of type'
    return bad, rf"cannot unmarshal array into Go struct field \w+\.{field} of type"


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validation_env(kube_env: KubeEnv) -> KubeEnv:
    """``kube_env`` with every CRD of ``crds/`` established (the kopf peering ones too) and
    the Prometheus Operator's ServiceMonitor CRD."""
    files = [*sorted((REPO / "crds").glob("*.yaml")), service_monitor_crd()]
    kube_env.plane.kubectl("apply", "--server-side", "-f", str(files[-1]))
    names = [f"crd/{d['metadata']['name']}" for path in files for d in _load(path)]
    kube_env.plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *names, timeout=90
    )
    return kube_env


@pytest.fixture(scope="module")
def other_namespace(validation_env: KubeEnv) -> Iterator[str]:
    """A second namespace, for chart settings that name several namespaces."""
    plane = validation_env.plane
    name = f"{validation_env.namespace}-b"
    plane.client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    plane.wait_for(
        f"ServiceAccount {name}/default",
        lambda: plane.client.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )
    yield name
    plane.client.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the chart"
    )
    return module


# --- examples/k8s ----------------------------------------------------------------------------


def test_the_examples_are_the_kinds_checked_here() -> None:
    kinds = {d["kind"] for path in EXAMPLE_FILES for d in _load(path)}
    assert {"GICJob", "Savepoint", "Secret"} <= kinds, kinds


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_passes_strict_server_validation(validation_env: KubeEnv, path: Path) -> None:
    docs = _load(path)
    assert docs, path
    namespace = validation_env.namespace
    _assert_accepted(_dry_run(validation_env, docs, namespace), docs, path.name)
    stored = validation_env.plane.kubectl(
        "get", f"--namespace={namespace}", "--ignore-not-found", "-o", "name", "-f", "-",
        input=yaml.safe_dump_all(docs),
    )  # fmt: skip
    assert stored.stdout.strip() == "", "a dry run stored objects"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_with_an_unknown_field_or_a_wrong_type_is_refused(
    validation_env: KubeEnv, path: Path
) -> None:
    for doc in _load(path):
        for mutate in (_with_unknown_field, _with_wrong_type):
            bad, refusal = mutate(doc)
            result = _dry_run(validation_env, [bad], validation_env.namespace)
            what = f"{path.name} {doc['kind']}/{doc['metadata']['name']} ({mutate.__name__})"
            _assert_refused(result, refusal, what)


# --- the Helm chart --------------------------------------------------------------------------

#: Peers as the chart's README shows them (networkPolicy.metricsFrom, driverMetricsFrom).
MONITORING_PEERS = [
    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
]


def _chart_cases(namespace: str, other: str) -> dict[str, dict[str, Any]]:
    """The chart's documented settings (values.yaml, README.md), by case: the release is
    installed in ``namespace``; ``other`` is a second existing namespace."""
    return {
        "defaults": {},
        "watch-namespaces": {"watchNamespaces": [namespace, other]},
        "warn-unwatched": {"watchNamespaces": [other], "warnUnwatchedJobs": True},
        "cluster-wide": {"clusterWide": True, "spark": {"namespaces": [namespace, other]}},
        "metrics-service-monitor": {
            "metrics": {
                "service": {"type": "NodePort", "annotations": {"prometheus.io/scrape": "true"}},
                "serviceMonitor": {
                    "enabled": True,
                    "labels": {"release": "prometheus"},
                    "interval": "30s",
                    "scrapeTimeout": "10s",
                },
            },
            "networkPolicy": {"metricsFrom": MONITORING_PEERS},
        },
        "metrics-off": {
            "metrics": {"port": -1},
            "networkPolicy": {"metricsFrom": MONITORING_PEERS},
        },
        "network-policy-off": {"networkPolicy": {"enabled": False}},
        "parts-off": {
            "rbac": {"create": False},
            "serviceAccount": {"create": False, "name": "existing"},
            "spark": {"serviceAccount": {"create": False}},
            "peering": {"create": False},
            "metrics": {"service": {"enabled": False}},
        },
        "everything-set": {
            "replicaCount": 3,
            "image": {
                "repository": "registry.example.com/gic-operator",
                "tag": "0.1.0-rc.1",
                "digest": "sha256:" + "a" * 64,
                "pullPolicy": "Always",
            },
            "imagePullSecrets": [{"name": "registry-credentials"}],
            "nameOverride": "gic-op",
            "fullnameOverride": "gic-operator-prod",
            "watchNamespaces": [namespace, other],
            "clusterWide": False,
            "peering": {"name": "gic-operator-prod", "create": True},
            "metrics": {
                "port": 9100,
                "service": {"enabled": True, "type": "LoadBalancer", "annotations": {"a": "b"}},
            },
            "health": {"port": 8090},
            "reconcileIntervalSeconds": 30,
            "logLevel": "debug",
            "extraEnv": [
                {"name": "GIC_EXTRA", "value": "1"},
                {
                    "name": "GIC_TOKEN",
                    "valueFrom": {"secretKeyRef": {"name": "gic-extra", "key": "token"}},
                },
            ],
            "storageAllowlist": {
                "storage": ["s3://example-checkpoints/gic", f"{other}=file:///data/gic"],
                "s3Endpoints": ["https://s3.example.com", f"{other}=https://minio:9000"],
            },
            "storageCredentials": {"secretName": "gic-operator-s3"},
            "controlKey": {"secretName": "gic-operator-control-key-prod"},
            "maxManifestMiB": 16,
            "serviceAccount": {
                "create": True,
                "name": "gic-operator-prod",
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/gic"},
            },
            "rbac": {"create": True},
            "spark": {
                "serviceAccount": {
                    "create": True,
                    "annotations": {
                        "iam.gke.io/gcp-service-account": "gic@p.iam.gserviceaccount.com"
                    },
                },
                "namespaces": [other],
            },
            "networkPolicy": {
                "enabled": True,
                "metricsFrom": MONITORING_PEERS,
                "driverMetricsFrom": [*MONITORING_PEERS, {"podSelector": {}}],
                "sparkUIFrom": MONITORING_PEERS,
            },
            "resources": {
                "requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
            },
            "podSecurityContext": {
                "runAsNonRoot": True,
                "runAsUser": 20001,
                "runAsGroup": 20001,
                "fsGroup": 20001,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
            },
            "podAnnotations": {"example.com/owner": "platform"},
            "podLabels": {"team": "platform"},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "gic", "effect": "NoSchedule"}
            ],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {
                                    "matchLabels": {"app.kubernetes.io/name": "gic-op"}
                                },
                            },
                        }
                    ]
                }
            },
            "priorityClassName": "gic-critical",
        },
    }


CASES = list(_chart_cases("ns", "other"))


def _set_paths(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every path ``node`` sets, inner ones included."""
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        if isinstance(value, dict):
            yield from _set_paths(value, path)


def test_the_cases_set_every_documented_value() -> None:
    """Each value of values.yaml (which the chart's README lists, see test_chart.py) is set
    in at least one case, so a new value brings a case here."""
    cases = _chart_cases("ns", "other").values()
    set_somewhere = {path for values in cases for path in _set_paths(values)}
    assert sorted(set(_leaf_paths(VALUES)) - set_somewhere) == []


def _render(helm: ModuleType, values: dict[str, Any], namespace: str) -> list[Doc]:
    """The chart's manifests as tests/operator/test_chart.py renders them, in ``namespace``."""
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values, name=RELEASE, namespace=namespace)
    docs: list[Doc] = []
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def _apply_by_namespace(env: KubeEnv, docs: list[Doc], what: str) -> None:
    """Dry-run apply ``docs``, those of each namespace together (cluster-scoped objects and
    namespaced ones without a namespace with the release namespace's)."""
    by_namespace: dict[str, list[Doc]] = {}
    for doc in docs:
        namespace = doc["metadata"].get("namespace") or env.namespace
        by_namespace.setdefault(namespace, []).append(doc)
    for namespace, group in sorted(by_namespace.items()):
        _assert_accepted(_dry_run(env, group, namespace), group, f"{what} in {namespace}")


@pytest.mark.parametrize("case", CASES)
def test_rendered_chart_passes_strict_server_validation(
    validation_env: KubeEnv,
    other_namespace: str,
    helm: ModuleType,
    case: str,
) -> None:
    values = _chart_cases(validation_env.namespace, other_namespace)[case]
    docs = _render(helm, values, validation_env.namespace)
    assert any(d["kind"] == "Deployment" for d in docs), [d["kind"] for d in docs]
    _apply_by_namespace(validation_env, docs, f"chart {case}")


def test_rendered_service_monitor_passes_strict_server_validation(
    validation_env: KubeEnv,
    other_namespace: str,
    helm: ModuleType,
) -> None:
    values = _chart_cases(validation_env.namespace, other_namespace)["metrics-service-monitor"]
    docs = _render(helm, values, validation_env.namespace)
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert len(monitors) == 1, [d["kind"] for d in docs]
    _apply_by_namespace(validation_env, monitors, "chart ServiceMonitor")


def test_rendered_deployment_with_an_unknown_field_or_a_wrong_type_is_refused(
    validation_env: KubeEnv, helm: ModuleType
) -> None:
    [deployment] = [
        d for d in _render(helm, {}, validation_env.namespace) if d["kind"] == "Deployment"
    ]
    namespace = validation_env.namespace
    unknown = copy.deepcopy(deployment)
    unknown["spec"]["template"]["spec"]["containers"][0][UNKNOWN_FIELD] = "x"
    _assert_refused(
        _dry_run(validation_env, [unknown], namespace),
        rf'unknown field "spec\.template\.spec\.containers\[0\]\.{UNKNOWN_FIELD}"',
        "a Deployment with an unknown container field",
    )
    wrong = copy.deepcopy(deployment)
    wrong["spec"]["replicas"] = "two"
    _assert_refused(
        _dry_run(validation_env, [wrong], namespace),
        r"cannot unmarshal string into Go struct field \w+\.spec\.replicas of type int32",
        "a Deployment with a string for spec.replicas",
    )
