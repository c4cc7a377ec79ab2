"""The chart's NetworkPolicies select the pods they are meant for: the operator's, and
every driver and executor of a GIC job, by the very labels the launcher gives them.

The selector matching (:func:`selects`) is Kubernetes' label selector semantics, so the
same checks apply to policies and pods read back from a real API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gic_operator.kube.naming import driver_labels
from gic_operator.launch import launch_config, launch_plan, launcher
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec

CHART = Path(__file__).resolve().parents[2] / "charts" / "gic-operator"
RELEASE_NS = "gic-system"


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector matches ``labels`` (an empty selector matches all)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not ok:
            return False
    return True


def test_selector_semantics() -> None:
    assert selects({}, {})
    assert selects({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"})
    assert not selects({"matchLabels": {"a": "1"}}, {"a": "2"})
    assert selects({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""})
    assert not selects({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"b": "1"})
    assert selects(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x"]}]}, {"a": "x"}
    )


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the chart"
    )
    return module


def render(helm: ModuleType, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values, name="gic", namespace=RELEASE_NS)
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def job_pods(name: str) -> dict[str, dict[str, str]]:
    """The labels of GICJob ``name``'s driver (as the launcher writes them) and of its
    executors (as the launcher tells Spark to write them)."""
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://bucket/gic"},
        }
    )
    plan = LaunchPlan(namespace="team-a", name=name, uid="u", spec=spec, job_id="j", epoch=2)
    conf = launch_config.spark_conf(plan)
    prefix = "spark.kubernetes.executor.label."
    executor = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}
    assert executor == launch_plan.executor_labels(name)
    driver = launcher.driver_pod(plan)["metadata"]["labels"]
    assert driver == driver_labels(name, 2)
    return {"driver": driver, "executor": executor}


def _policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def test_job_pods_accept_only_job_pods_of_their_namespace(helm: ModuleType) -> None:
    namespaces = ["team-a", "team-b"]
    docs = render(helm, {"watchNamespaces": namespaces})
    jobs = [p for p in _policies(docs) if p["metadata"]["name"].endswith("-spark-jobs")]
    assert sorted(p["metadata"]["namespace"] for p in jobs) == namespaces
    pods = job_pods("wordcount")
    other = job_pods("a.much.longer.job-name")
    operator = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    for policy in jobs:
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Ingress"]
        for labels in (*pods.values(), *other.values()):
            assert selects(spec["podSelector"], labels)
        assert not selects(spec["podSelector"], operator)
        assert not selects(spec["podSelector"], {"app": "something-else"})
        [peers] = spec["ingress"]  # no metrics scrapers configured
        assert "ports" not in peers  # Spark RPC, block transfers: ports Spark picks
        [peer] = peers["from"]
        assert set(peer) == {"podSelector"}  # this namespace only
        for source in pods.values():
            assert selects(peer["podSelector"], source)
        assert not selects(peer["podSelector"], operator)
        assert not selects(peer["podSelector"], {"app": "something-else"})


def test_driver_metrics_open_only_to_the_configured_peers(helm: ModuleType) -> None:
    monitoring = [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    docs = render(helm, {"networkPolicy": {"driverMetricsFrom": monitoring}})
    [policy] = [p for p in _policies(docs) if p["metadata"]["name"].endswith("-spark-jobs")]
    scrape = policy["spec"]["ingress"][1]
    assert scrape["from"] == monitoring
    assert scrape["ports"] == [{"port": launch_plan.METRICS_PORT, "protocol": "TCP"}]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def test_operator_accepts_only_metrics_scrapes(helm: ModuleType) -> None:
    docs = render(helm)
    [policy] = [
        p
        for p in _policies(docs)
        if p["metadata"]["namespace"] == RELEASE_NS
        and not p["metadata"]["name"].endswith("-spark-jobs")
    ]
    operator = _one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], operator)
    assert policy["spec"]["ingress"] == []  # nobody by default
    peers = [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]
    docs = render(helm, {"networkPolicy": {"metricsFrom": peers}, "metrics": {"port": 9100}})
    [policy] = [p for p in _policies(docs) if not p["metadata"]["name"].endswith("-spark-jobs")]
    assert policy["spec"]["ingress"] == [
        {"from": peers, "ports": [{"port": 9100, "protocol": "TCP"}]}
    ]


def test_network_policies_can_be_turned_off(helm: ModuleType) -> None:
    assert _policies(render(helm, {"networkPolicy": {"enabled": False}})) == []
