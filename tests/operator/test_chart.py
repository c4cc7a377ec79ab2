"""The gic-operator Helm chart: its plain files, its values and comments, the operator's
command line, least-privilege RBAC (exactly :mod:`gic_operator.kube.permissions`); and, where
Helm's template engine is importable (``helm-python-sdk``), the rendered manifests in the
default (release namespace), namespaced and cluster-wide modes."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gic_operator import crdgen
from gic_operator.kube import permissions
from gic_operator.models.gicjob import SPARK_SERVICE_ACCOUNT

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gic-operator"
TEMPLATES = CHART / "templates"
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
RELEASE_NS = "gic-system"

#: The operator's options as the Deployment passes them, with the default values.
COMMON_ARGS = [
    "--peering=gic-operator",
    "--metrics-port=8080",
    "--health-port=8081",
    "--bind-address=$(POD_IP)",
    "--reconcile-interval=5",
    "--max-manifest-mib=8",
    "--log-level=info",
]

#: A permission: (apiGroup, resource, verb).
Grant = tuple[str, str, str]


def _grants(group: str, resources: list[str], verbs: list[str]) -> set[Grant]:
    return {(group, r, v) for r in resources for v in verbs}


#: Everything the operator may do in a namespace it watches, and cluster-wide.
OPERATOR_NAMESPACED, OPERATOR_CLUSTER = permissions.operator_rules(cluster_wide=False)
OPERATOR_ALL_NAMESPACES = set().union(*permissions.operator_rules(cluster_wide=True))
SPARK_DRIVER = set(permissions.SPARK_DRIVER_GRANTS)


# --- plain files ---------------------------------------------------------------------------


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "gic-operator"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == "0.1.0"


def test_chart_crds_parse_and_equal_the_top_level_crds() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert len(chart_crds) == 3
    for name in chart_crds:
        text = (CHART / "crds" / name).read_text()
        assert text == (ROOT / "crds" / name).read_text(), name
        docs = [d for d in yaml.safe_load_all(text) if d]
        assert docs and all(d["kind"] == "CustomResourceDefinition" for d in docs)
    assert crdgen.drifted(ROOT) == []


def _values_paths(node: Any, prefix: str = "") -> Iterator[str]:
    """Every path of values.yaml, inner nodes included."""
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            yield from _values_paths(value, path)


def _leaf_paths(node: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value:
            yield from _leaf_paths(value, path)
        else:
            yield path


def _template_texts() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(TEMPLATES.iterdir()) if p.is_file()}


def test_every_value_used_in_templates_exists() -> None:
    known = set(_values_paths(VALUES))
    used: dict[str, set[str]] = {}
    for name, text in _template_texts().items():
        for path in re.findall(r"\.Values\.([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)", text):
            used.setdefault(path, set()).add(name)
    assert used, "templates use no values?"
    missing = {path: files for path, files in used.items() if path not in known}
    assert missing == {}


def test_every_value_is_used_somewhere() -> None:
    text = "\n".join(_template_texts().values())
    for path in _leaf_paths(VALUES):
        parts = path.split(".")
        # A value is used when it or one of its parents is referenced (toYaml of a block).
        prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
        assert any(f".Values.{p}" in text for p in prefixes), f"{path} is never used"


def test_every_value_has_a_comment_line_above_it() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    previous = ""
    for number, line in enumerate(lines, start=1):
        if re.match(r"^\s*[A-Za-z_][\w-]*:", line):
            assert previous.lstrip().startswith("#"), f"values.yaml:{number} {line.strip()!r}"
        if line.strip():
            previous = line


def test_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    for path in _leaf_paths(VALUES):
        assert f"| `{path}` |" in readme, f"README.md values table lacks {path}"
    assert "helm install" in readme


def test_spark_service_account_is_the_models() -> None:
    helpers = (TEMPLATES / "_helpers.tpl").read_text()
    block = helpers[helpers.index('define "gic-operator.sparkServiceAccount"') :]
    assert block.split("\n")[1] == SPARK_SERVICE_ACCOUNT


def test_rbac_templates_grant_no_wildcards() -> None:
    for name in ("rbac.yaml", "_helpers.tpl"):
        text = (TEMPLATES / name).read_text()
        assert '"*"' not in text and "'*'" not in text, name


def test_deployment_passes_the_operator_options() -> None:
    text = (TEMPLATES / "deployment.yaml").read_text()
    assert 'command: ["gic-operator"]' in text
    for expected in [
        '"--all-namespaces"',
        'include "gic-operator.watchNamespaces" . | fromJsonArray',
        'printf "--namespace=%s" .',
        'printf "--peering=%s" .Values.peering.name',
        'printf "--metrics-port=%v" .Values.metrics.port',
        'printf "--health-port=%v" .Values.health.port',
        'printf "--reconcile-interval=%v" .Values.reconcileIntervalSeconds',
        'printf "--max-manifest-mib=%v" .Values.maxManifestMiB',
        'printf "--log-level=%s" .Values.logLevel',
        "path: /healthz",
        "path: /readyz",
        '{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"',
    ]:
        assert expected in text, expected


# --- rendered by Helm's template engine ------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the chart"
    )
    return module


def _manifests(
    helm: ModuleType, values: dict[str, Any] | None = None, release: str = "gic"
) -> dict[str, str]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values, name=release, namespace=RELEASE_NS)
    return manifests


def _render(
    helm: ModuleType, values: dict[str, Any] | None = None, release: str = "gic"
) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path, text in sorted(_manifests(helm, values, release).items()):
        if path.endswith(".yaml"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def _notes(helm: ModuleType, values: dict[str, Any] | None = None, release: str = "gic") -> str:
    [notes] = [
        text
        for path, text in _manifests(helm, values, release).items()
        if path.endswith("NOTES.txt")
    ]
    return notes


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def _rule_grants(role: dict[str, Any]) -> set[Grant]:
    granted: set[Grant] = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            granted |= _grants(group, rule["resources"], rule["verbs"])
    return granted


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]
    return container


def test_lint_finds_no_errors(helm: ModuleType) -> None:
    for values in ({}, {"watchNamespaces": ["team-a"]}, {"clusterWide": True}):
        report = helm.lint(str(CHART), values, strict=True)
        errors = [m for m in report["messages"] if m["severity"] >= 2]
        assert errors == [] and report["errors"] == [], report


def test_cluster_wide_render(helm: ModuleType) -> None:
    docs = _render(helm, {"clusterWide": True})
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"], doc
    container = _container(docs)
    assert container["image"] == "gic-operator:0.1.0"
    assert container["command"] == ["gic-operator"]
    assert container["args"] == ["--all-namespaces", *COMMON_ARGS]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 8080,
        "health": 8081,
    }
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2

    assert not [d for d in docs if d["kind"] in ("KopfPeering",)]
    assert _one(docs, "ClusterKopfPeering")["metadata"]["name"] == "gic-operator"
    cluster_role = _one(docs, "ClusterRole")
    assert _rule_grants(cluster_role) == OPERATOR_ALL_NAMESPACES
    binding = _one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gic-gic-operator", "namespace": RELEASE_NS}
    ]
    [spark_role] = [d for d in docs if d["kind"] == "Role"]
    assert spark_role["metadata"]["namespace"] == RELEASE_NS
    assert _rule_grants(spark_role) == SPARK_DRIVER
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in docs
        if d["kind"] == "ServiceAccount"
    }
    assert accounts == {(RELEASE_NS, "gic-gic-operator"), (RELEASE_NS, "gic-spark")}
    service = _one(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert (
        service["spec"]["selector"] == _one(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_default_render_handles_the_release_namespace_only(helm: ModuleType) -> None:
    docs = _render(helm)
    assert _container(docs)["args"] == [f"--namespace={RELEASE_NS}", *COMMON_ARGS]
    assert not [
        d for d in docs if d["kind"] == "ClusterRoleBinding" and "scan" not in d["metadata"]["name"]
    ]
    [cluster_role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert _rule_grants(cluster_role) == OPERATOR_CLUSTER
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    assert {r["metadata"]["namespace"] for r in roles.values()} == {RELEASE_NS}
    assert _rule_grants(roles["gic-gic-operator"]) == OPERATOR_NAMESPACED
    assert _rule_grants(roles["gic-gic-operator-spark"]) == SPARK_DRIVER
    [peering] = [d for d in docs if d["kind"] == "KopfPeering"]
    assert peering["metadata"]["namespace"] == RELEASE_NS


def test_cluster_wide_and_namespaces_exclude_each_other(helm: ModuleType) -> None:
    with pytest.raises(Exception, match="not both"):
        _render(helm, {"clusterWide": True, "watchNamespaces": ["team-a"]})


def test_spark_service_account_annotations(helm: ModuleType) -> None:
    role_arn = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/gic"}
    docs = _render(helm, {"spark": {"serviceAccount": {"annotations": role_arn}}})
    [account] = [
        d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "gic-spark"
    ]
    assert account["metadata"]["annotations"] == role_arn


def test_namespaced_render(helm: ModuleType) -> None:
    namespaces = ["team-a", "team-b"]
    docs = _render(
        helm,
        {
            "watchNamespaces": namespaces,
            "extraEnv": [{"name": "GIC_X", "value": "1"}],
            "image": {"tag": "dev"},
        },
    )
    container = _container(docs)
    assert container["image"] == "gic-operator:dev"
    digest = "sha256:" + "a" * 64
    pinned = _container(_render(helm, {"image": {"tag": "dev", "digest": digest}}))
    assert pinned["image"] == f"gic-operator@{digest}"
    assert container["args"] == [f"--namespace={ns}" for ns in namespaces] + COMMON_ARGS
    assert {"name": "GIC_X", "value": "1"} in container["env"]

    [cluster_role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert _rule_grants(cluster_role) == OPERATOR_CLUSTER
    operator_roles = {
        d["metadata"]["namespace"]: d
        for d in docs
        if d["kind"] == "Role" and not d["metadata"]["name"].endswith("-spark")
    }
    assert sorted(operator_roles) == namespaces
    for role in operator_roles.values():
        assert _rule_grants(role) == OPERATOR_NAMESPACED
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(namespaces * 2)
    peerings = [d for d in docs if d["kind"] == "KopfPeering"]
    assert sorted(p["metadata"]["namespace"] for p in peerings) == namespaces
    assert not [d for d in docs if d["kind"] == "ClusterKopfPeering"]
    spark_accounts = sorted(
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "gic-spark"
    )
    assert spark_accounts == namespaces


@pytest.mark.parametrize(
    "values", [{}, {"watchNamespaces": ["team-a"]}, {"clusterWide": True}], ids=str
)
def test_rendered_rbac_has_no_wildcards_and_reads_no_secrets(
    helm: ModuleType, values: dict[str, Any]
) -> None:
    docs = _render(helm, values)
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for group, resource, verb in _rule_grants(role):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            if resource == "secrets":  # each job's Spark authentication Secret; only its
                # metadata is read, to adopt it only when the job owns it
                assert verb in ("create", "get"), role["metadata"]["name"]


def test_switches_turn_parts_off(helm: ModuleType) -> None:
    docs = _render(
        helm,
        {
            "rbac": {"create": False},
            "serviceAccount": {"create": False, "name": "existing"},
            "spark": {"serviceAccount": {"create": False}},
            "peering": {"create": False},
            "metrics": {"service": {"enabled": False}},
            "networkPolicy": {"enabled": False},
            "controlKey": {"secretName": "own-operator-key"},
        },
    )
    assert sorted(d["kind"] for d in docs) == ["Deployment"]
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "existing"
    env = {e["name"]: e for e in _container(docs)["env"]}
    ref = env["GIC_OPERATOR_CONTROL_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "own-operator-key", "key": "operator-key"}


def test_the_operator_key_is_generated_and_given_by_reference(helm: ModuleType) -> None:
    """Each job's control key is derived from the operator key: the chart generates one
    (kept across upgrades) and passes it by ``secretKeyRef``, never as a value."""
    docs = _render(helm)
    [secret] = [d for d in docs if d["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "gic-gic-operator-control-key"
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    key = base64.b64decode(secret["data"]["operator-key"]).decode()
    assert len(key) == 48 and key.isalnum()
    env = {e["name"]: e for e in _container(docs)["env"]}
    ref = env["GIC_OPERATOR_CONTROL_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gic-gic-operator-control-key", "key": "operator-key"}


def test_metrics_off_renders_no_port_no_service_no_scrape_rule(helm: ModuleType) -> None:
    values = {
        "metrics": {"port": -1},
        "networkPolicy": {"metricsFrom": [{"namespaceSelector": {}}]},
    }
    docs = _render(helm, values)
    container = _container(docs)
    assert "--metrics-port=-1" in container["args"]
    assert [p["name"] for p in container["ports"]] == ["health"]
    assert all(p["containerPort"] >= 0 for p in container["ports"])
    assert not [d for d in docs if d["kind"] in ("Service", "ServiceMonitor")]
    [operator_policy] = [
        d for d in docs if d["kind"] == "NetworkPolicy" and "spark" not in d["metadata"]["name"]
    ]
    assert operator_policy["spec"]["ingress"] == []
    with pytest.raises(Exception, match=r"metrics\.serviceMonitor\.enabled needs metrics"):
        _render(helm, {"metrics": {"port": -1, "serviceMonitor": {"enabled": True}}})
    report = helm.lint(str(CHART), {"metrics": {"port": -1}}, strict=True)
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_service_monitor_only_when_enabled(helm: ModuleType) -> None:
    assert not [d for d in _render(helm) if d["kind"] in ("ServiceMonitor", "PodMonitor")]
    values = {
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "labels": {"release": "prometheus"},
                "interval": "30s",
                "scrapeTimeout": "10s",
            }
        }
    }
    docs = _render(helm, values)
    monitor = _one(docs, "ServiceMonitor")
    service = _one(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == RELEASE_NS
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [RELEASE_NS]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {
        "port": "metrics",
        "path": "/metrics",
        "interval": "30s",
        "scrapeTimeout": "10s",
    }
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    # the operator's own Deployment does not carry the component label the monitor selects
    deployment = _one(docs, "Deployment")
    assert "app.kubernetes.io/component" not in deployment["metadata"]["labels"]
    report = helm.lint(str(CHART), values, strict=True)
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    with pytest.raises(Exception, match=r"needs metrics\.service\.enabled"):
        _render(
            helm,
            {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
        )


# --- resource names ---------------------------------------------------------------------------

#: Everything the chart can render at once (the ServiceMonitor included).
ALL_PARTS: dict[str, Any] = {
    "watchNamespaces": ["team-a", "team-b"],
    "metrics": {"serviceMonitor": {"enabled": True}},
}


def _names(docs: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(kind, namespace) -> the names of that kind there ("" for cluster-scoped)."""
    names: dict[tuple[str, str], set[str]] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"].get("namespace", ""))
        names.setdefault(key, set()).add(doc["metadata"]["name"])
    return names


def _check_references(docs: list[dict[str, Any]], fullname: str) -> None:
    """Every name one resource gives another resolves, and only gic-spark and the peering
    objects are not named after the release."""
    names = _names(docs)
    by_kind = {d["kind"]: d for d in docs}
    deployment = by_kind["Deployment"]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == fullname
    assert names[("ServiceAccount", RELEASE_NS)] >= {fullname}
    for doc in docs:
        name = doc["metadata"]["name"]
        if doc["kind"] in ("KopfPeering", "ClusterKopfPeering"):
            assert name == VALUES["peering"]["name"]
        elif doc["kind"] == "ServiceAccount" and name == SPARK_SERVICE_ACCOUNT:
            assert doc["metadata"]["namespace"] in ALL_PARTS["watchNamespaces"] + [RELEASE_NS]
        else:
            assert name.startswith(fullname[:40]), (doc["kind"], name)
        assert len(name) <= 63, (doc["kind"], name)
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            namespace = doc["metadata"].get("namespace", "")
            ref = doc["roleRef"]
            scope = namespace if ref["kind"] == "Role" else ""
            assert ref["name"] in names[(ref["kind"], scope)], (name, ref)
            for subject in doc["subjects"]:
                subject_names = names[("ServiceAccount", subject["namespace"])]
                assert subject["name"] in subject_names, (name, subject)
                if doc["metadata"]["labels"].get("app.kubernetes.io/component") == "spark-driver":
                    assert subject == {
                        "kind": "ServiceAccount",
                        "name": SPARK_SERVICE_ACCOUNT,
                        "namespace": namespace,
                    }
                else:
                    assert subject["name"] == account
    selector = deployment["spec"]["selector"]["matchLabels"]
    for doc in docs:
        if doc["kind"] == "Service":
            assert doc["spec"]["selector"] == selector
        if doc["kind"] == "NetworkPolicy" and doc["metadata"]["namespace"] == RELEASE_NS:
            assert doc["spec"]["podSelector"]["matchLabels"] == selector
        if doc["kind"] == "ServiceMonitor":
            [service] = names[("Service", RELEASE_NS)]
            assert doc["metadata"]["name"] == fullname
            assert doc["spec"]["selector"]["matchLabels"].items() <= selector.items() | {
                ("app.kubernetes.io/component", "metrics")
            }
            assert service.startswith(fullname[:40])


@pytest.mark.parametrize(
    ("release", "values", "fullname"),
    [
        ("gic", {}, "gic-gic-operator"),  # <release>-<chart>: the release lacks the chart name
        ("gic-operator", {}, "gic-operator"),  # the release is the chart name: no doubling
        ("prod", {}, "prod-gic-operator"),
        ("blue-gic-operator-eu", {}, "blue-gic-operator-eu"),  # contains it: the release alone
        ("gic", {"nameOverride": "gic"}, "gic"),
        ("prod", {"nameOverride": "streams"}, "prod-streams"),
        ("prod", {"fullnameOverride": "streaming-operator"}, "streaming-operator"),
    ],
    ids=str,
)
def test_resource_names_follow_the_release(
    helm: ModuleType, release: str, values: dict[str, Any], fullname: str
) -> None:
    docs = _render(helm, {**ALL_PARTS, **values}, release=release)
    names = _names(docs)
    assert names[("Deployment", RELEASE_NS)] == {fullname}
    assert names[("ServiceAccount", RELEASE_NS)] == {fullname}
    assert names[("Service", RELEASE_NS)] == {f"{fullname}-metrics"}
    assert names[("ServiceMonitor", RELEASE_NS)] == {fullname}
    assert names[("NetworkPolicy", RELEASE_NS)] == {fullname}
    assert names[("ClusterRole", "")] == names[("ClusterRoleBinding", "")] == {f"{fullname}-scan"}
    for namespace in ALL_PARTS["watchNamespaces"]:
        assert names[("Role", namespace)] == {fullname, f"{fullname}-spark"}
        assert names[("RoleBinding", namespace)] == {fullname, f"{fullname}-spark"}
        assert names[("ServiceAccount", namespace)] == {SPARK_SERVICE_ACCOUNT}
        assert names[("NetworkPolicy", namespace)] == {f"{fullname}-spark-jobs"}
        assert names[("KopfPeering", namespace)] == {"gic-operator"}
    _check_references(docs, fullname)
    name_label = values.get("nameOverride", "gic-operator")
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == release
        assert labels["app.kubernetes.io/name"] == name_label


@pytest.mark.parametrize("cluster_wide", [False, True], ids=["namespaced", "cluster-wide"])
def test_every_reference_resolves_for_another_release(helm: ModuleType, cluster_wide: bool) -> None:
    values: dict[str, Any] = {**ALL_PARTS}
    if cluster_wide:
        values = {
            "clusterWide": True,
            "spark": {"namespaces": ALL_PARTS["watchNamespaces"]},
            "metrics": ALL_PARTS["metrics"],
        }
    docs = _render(helm, values, release="team-ops")
    _check_references(docs, "team-ops-gic-operator")
    if cluster_wide:
        binding = _one(docs, "ClusterRoleBinding")
        assert binding["metadata"]["name"] == "team-ops-gic-operator"
        assert binding["subjects"][0]["name"] == "team-ops-gic-operator"


@pytest.mark.parametrize(
    ("release", "values"),
    [("r" * 53, {}), ("gic", {"fullnameOverride": "f" * 70})],
    ids=["longest-release", "long-override"],
)
def test_long_names_stay_dns_labels_and_keep_their_suffixes(
    helm: ModuleType, release: str, values: dict[str, Any]
) -> None:
    docs = _render(helm, {**ALL_PARTS, **values}, release=release)
    fullname = _one(docs, "Deployment")["metadata"]["name"]
    assert len(fullname) == 63
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= 63, doc["metadata"]["name"]
    names = _names(docs)
    [service] = names[("Service", RELEASE_NS)]
    assert service.endswith("-metrics") and service != fullname
    assert {n.rsplit("-", 1)[-1] for n in names[("ClusterRole", "")]} == {"scan"}
    assert {n for n in names[("Role", "team-a")] if n.endswith("-spark")}
    [jobs_policy] = names[("NetworkPolicy", "team-a")]
    assert jobs_policy.endswith("-spark-jobs")
    # every name of a kind in a namespace is distinct
    assert sum(len(v) for v in names.values()) == len(docs)


# --- NOTES.txt --------------------------------------------------------------------------------


def test_notes_give_the_steps_for_a_job_in_a_watched_namespace(helm: ModuleType) -> None:
    notes = _notes(helm, {"watchNamespaces": ["team-a"]}, release="gic-operator")
    assert "The GIC operator gic-operator is installed in namespace gic-system" in notes
    assert "It handles GICJobs and Savepoints in: team-a." in notes
    assert '"gic-spark" (created by this chart in: team-a)' in notes
    for command in (
        "kubectl -n gic-system get pods -l app.kubernetes.io/instance=gic-operator",
        "kubectl -n team-a apply -f examples/k8s/gicjob-s3.yaml",
        "kubectl -n team-a get gicjob rate-count -w",
        "kubectl -n team-a annotate gicjob/rate-count gic.io/savepoint=$(date +%s)",
        "kubectl create namespace team-b",
        "helm upgrade gic-operator charts/gic-operator -n gic-system --reuse-values \\\n"
        "    --set 'watchNamespaces={team-a,team-b}'",
    ):
        assert command in notes, command
    assert "storageCredentials.secretName" in notes  # none given: the notes say so
    with_credentials = _notes(
        helm, {"watchNamespaces": ["team-a"], "storageCredentials": {"secretName": "s3"}}
    )
    assert "storageCredentials.secretName" not in with_credentials


def test_notes_by_default_and_cluster_wide(helm: ModuleType) -> None:
    default = _notes(helm, release="gic-operator")
    assert f"kubectl -n {RELEASE_NS} apply -f examples/k8s/gicjob-s3.yaml" in default
    assert f"--set 'watchNamespaces={{{RELEASE_NS},team-b}}'" in default  # keeps its own
    wide = _notes(helm, {"clusterWide": True}, release="gic-operator")
    assert "in all namespaces" in wide
    assert f"--set 'spark.namespaces={{{RELEASE_NS},team-b}}'" in wide
    assert "watchNamespaces=" not in wide
    listed = _notes(helm, {"clusterWide": True, "spark": {"namespaces": ["a", "b"]}})
    assert "kubectl -n a apply -f examples/k8s/gicjob-s3.yaml" in listed
    assert "--set 'spark.namespaces={a,b,team-b}'" in listed


def test_notes_say_what_happens_to_jobs_in_other_namespaces(helm: ModuleType) -> None:
    silent = _notes(helm, {"watchNamespaces": ["team-a"]})
    assert "GICJobs in any other namespace are not run and get no status and no Event" in silent
    assert "warnUnwatchedJobs=true posts a Warning Event on each" in silent
    warned = _notes(helm, {"watchNamespaces": ["team-a"], "warnUnwatchedJobs": True})
    assert "each gets a Warning Event NotWatched" in warned
    assert "any other namespace" not in _notes(helm, {"clusterWide": True})


def test_probes_and_metrics_listen_on_the_pod_ip(helm: ModuleType) -> None:
    """Two replicas sharing a network namespace (the process kubelet) each bind their
    own pod IP; on a cluster the pod IP is where probes and Services reach them."""
    container = _one(_render(helm), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "--bind-address=$(POD_IP)" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
