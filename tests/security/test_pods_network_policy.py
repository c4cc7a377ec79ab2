"""The chart's NetworkPolicies select the pods they are meant for: the operator's, and
every driver and executor of a GIC job, by the very labels the launcher gives them; with
the NetworkPolicy the operator creates for each job, a job's Spark RPC and block manager
ports take only that job's own pods, and its UI and metrics only the peers the
administrator names.

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
from gic_operator.launch.network_policy import job_network_policy
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


def admitted(
    policies: list[dict[str, Any]], target: Mapping[str, str], source: Mapping[str, str], port: int
) -> bool:
    """Whether a pod labelled ``source`` (in the same namespace) may connect to port
    ``port`` of a pod labelled ``target`` under ``policies`` (NetworkPolicy semantics:
    a pod no policy selects accepts everything; else the union of the rules of the
    policies that select it). Only ``podSelector`` peers can match a same-namespace pod
    here; ``namespaceSelector`` peers are other namespaces."""
    selecting = [p for p in policies if selects(p["spec"]["podSelector"], target)]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = [entry["port"] for entry in rule.get("ports") or []]
            if ports and port not in ports:
                continue
            peers = rule.get("from")
            if not peers:
                return True
            for peer in peers:
                if set(peer) == {"podSelector"} and selects(peer["podSelector"], source):
                    return True
    return False


def _job_policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in _policies(docs) if p["metadata"]["name"].endswith("-spark-jobs")]


SPARK_PORTS = {
    "rpc": launch_plan.DRIVER_PORT,
    "block manager": launch_plan.BLOCK_MANAGER_PORT,
    "ui": launch_plan.SPARK_UI_PORT,
    "metrics": launch_plan.METRICS_PORT,
}


def test_the_namespace_policy_isolates_every_job_pod_and_admits_nothing_by_default(
    helm: ModuleType,
) -> None:
    namespaces = ["team-a", "team-b"]
    docs = render(helm, {"watchNamespaces": namespaces})
    jobs = _job_policies(docs)
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
        assert spec["ingress"] == []  # no UI viewers nor metrics scrapers configured


def test_each_jobs_spark_ports_admit_only_that_jobs_own_pods(helm: ModuleType) -> None:
    """The chart's policy plus the one the operator creates for each job: a job's driver
    RPC and block manager ports take its own driver and executors, never another job's
    pods (not even one whose name looks like its sanitized name), and the UI and the
    metrics port take no pod at all unless the administrator allows peers."""
    names = ["wc", "wc.v2", "wc-v2-13b7a78a", "a.much.longer.job-name"]
    policies = [
        *_job_policies(render(helm)),
        *(job_network_policy("team", name, f"uid-{name}") for name in names),
    ]
    pods = {name: job_pods(name) for name in names}
    for target in names:
        for role in ("driver", "executor"):
            for source in names:
                for peer in ("driver", "executor"):
                    for what, port in SPARK_PORTS.items():
                        allowed = source == target and what in ("rpc", "block manager")
                        got = admitted(policies, pods[target][role], pods[source][peer], port)
                        assert got == allowed, (target, role, source, peer, what)
    outsider = {"app": "something-else"}
    assert not any(
        admitted(policies, pods["wc"]["driver"], outsider, port) for port in SPARK_PORTS.values()
    )


def test_the_operators_job_policy_names_the_ports_spark_uses() -> None:
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://bucket/gic"},
        }
    )
    plan = LaunchPlan(namespace="team", name="wc", uid="u", spec=spec, job_id="j", epoch=1)
    conf = launch_config.spark_conf(plan)
    spark_ports = {
        int(conf[key])
        for key in (
            "spark.driver.port",
            "spark.driver.blockManager.port",
            "spark.blockManager.port",
        )
    }
    policy = job_network_policy("team", "wc", "u")
    [rule] = policy["spec"]["ingress"]
    assert {entry["port"] for entry in rule["ports"]} == spark_ports
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_driver_metrics_open_only_to_the_configured_peers(helm: ModuleType) -> None:
    monitoring = [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    docs = render(helm, {"networkPolicy": {"driverMetricsFrom": monitoring}})
    [policy] = _job_policies(docs)
    [scrape] = policy["spec"]["ingress"]
    assert scrape["from"] == monitoring
    assert scrape["ports"] == [{"port": launch_plan.METRICS_PORT, "protocol": "TCP"}]


def test_spark_ui_opens_only_to_the_configured_peers(helm: ModuleType) -> None:
    viewers = [{"namespaceSelector": {"matchLabels": {"team": "ingress"}}}]
    docs = render(helm, {"networkPolicy": {"sparkUIFrom": viewers}})
    [policy] = _job_policies(docs)
    [view] = policy["spec"]["ingress"]
    assert view["from"] == viewers
    assert view["ports"] == [{"port": launch_plan.SPARK_UI_PORT, "protocol": "TCP"}]


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
