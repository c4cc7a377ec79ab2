"""Least-privilege RBAC, derived from the code: the tables of :mod:`gic_operator.kube.permissions`
against what the operator's modules actually call, and the chart's Roles against the tables.

* every Kubernetes client call in :class:`~gic_operator.kube.kube_client.KubernetesApi` (found in
  kube/kube_client.py's syntax tree, its verb and resource read off the client method's name) is the
  one :data:`~gic_operator.kube.permissions.KUBE_API_GRANTS` lists for that KubeApi method;
* every KubeApi call in the operator's modules (with the custom resource it names, as a
  literal, a module constant, or the plural given to a reconcile pass) is in
  :data:`~gic_operator.kube.permissions.OPERATOR_CALLS`, and every entry there is made somewhere;
  those of :mod:`gic_operator.jobs.unwatched` (the opt-in, cluster-wide warning on GICJobs
  outside the watched namespaces) are exactly
  :data:`~gic_operator.kube.permissions.UNWATCHED_CALLS`;
* every kopf handler of :mod:`gic_operator.handlers` is in
  :data:`~gic_operator.kube.permissions.OPERATOR_HANDLERS`;
* the Roles the chart renders grant exactly :func:`~gic_operator.kube.permissions.operator_rules`
  and :data:`~gic_operator.kube.permissions.SPARK_DRIVER_GRANTS`, verb by verb.

The checks take plain Role dicts, so the same ones can run on Roles read back from a real
API server.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gic_operator.kube import permissions
from gic_operator.models.base import GROUP

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "gic_operator"
CHART = ROOT / "charts" / "gic-operator"
Grant = permissions.Grant

#: Resource of each kind word in the client's method names (``create_namespaced_<kind>``).
_CLIENT_KINDS = {
    "pod": ("", "pods"),
    "service": ("", "services"),
    "config_map": ("", "configmaps"),
    "secret": ("", "secrets"),
    "network_policy": ("networking.k8s.io", "networkpolicies"),
    "event": ("", "events"),
    "custom_object": (GROUP, permissions.PLURAL),
}
_CLIENT_VERBS = {
    "read": "get",
    "get": "get",
    "list": "list",
    "create": "create",
    "delete": "delete",
    "patch": "patch",
    "replace": "update",
}
_CLIENT_CALL = re.compile(
    r"^(?P<verb>read|get|list|create|delete|patch|replace)_(?:namespaced|cluster)_"
    r"(?P<kind>[a-z_]+?)"
    r"(?P<status>_status)?$"
)


def client_grant(method: str) -> Grant:
    """The grant a ``CoreV1Api``/``CustomObjectsApi`` method needs, from its name."""
    match = _CLIENT_CALL.match(method)
    assert match is not None, f"client call {method} has no known verb: extend this test"
    group, resource = _CLIENT_KINDS[match["kind"]]
    if match["status"]:
        resource += "/status"
    return group, resource, _CLIENT_VERBS[match["verb"]]


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    [found] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def _self_attr(node: ast.AST, owner: str) -> str | None:
    """``x`` when ``node`` is ``self.<owner>.x``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == owner
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "self"
    ):
        return node.attr
    return None


def kubernetes_api_grants() -> dict[str, set[Grant]]:
    """For each public method of KubernetesApi: the grants of the client calls it (and the
    private methods it calls) make."""
    cls = _class(ast.parse((PACKAGE / "kube" / "kube_client.py").read_text()), "KubernetesApi")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    direct: dict[str, set[Grant]] = {}
    helpers: dict[str, set[str]] = {}
    for name, fn in methods.items():
        direct[name] = set()
        helpers[name] = set()
        for node in ast.walk(fn):
            for owner in ("_core", "_custom", "_networking"):
                attr = _self_attr(node, owner)
                if attr is not None:
                    direct[name].add(client_grant(attr))
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and node.attr in methods
                and node.attr != name
            ):
                helpers[name].add(node.attr)

    def closure(name: str, seen: set[str]) -> set[Grant]:
        out = set(direct[name])
        for helper in helpers[name] - seen:
            out |= closure(helper, seen | {name})
        return out

    return {name: closure(name, {name}) for name in methods if not name.startswith("_")}


def test_kube_api_table_matches_kubernetes_api() -> None:
    found = {name: grants for name, grants in kubernetes_api_grants().items() if grants}
    expected = {name: set(grants) for name, grants in permissions.KUBE_API_GRANTS.items()}
    assert found == expected


def test_every_kube_api_method_is_in_the_table() -> None:
    protocol = _class(ast.parse((PACKAGE / "kube" / "kube_api.py").read_text()), "KubeApi")
    methods = {n.name for n in protocol.body if isinstance(n, ast.FunctionDef)}
    assert methods == set(permissions.KUBE_API_GRANTS)


# --- the reconcilers' calls -----------------------------------------------------------------


#: The module whose calls are :data:`~gic_operator.kube.permissions.UNWATCHED_CALLS`.
UNWATCHED_MODULE = "unwatched"


def _modules() -> Iterator[tuple[str, ast.Module]]:
    seams = {"kube/kube_api.py", "kube/kube_client.py", "kube/permissions.py"}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] != "testing" and relative.as_posix() not in seams:
            yield path.stem, ast.parse(path.read_text())


def _constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                for target in targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = value.value
    return out


def _receiver_is_kube(node: ast.expr) -> bool:
    """``kube``, ``self.kube``, ``self._kube``, ``p.kube`` ..."""
    if isinstance(node, ast.Name):
        return node.id.lstrip("_") == "kube"
    return isinstance(node, ast.Attribute) and node.attr.lstrip("_") == "kube"


def _plural(arg: ast.expr, constants: dict[str, str], pass_plurals: set[str]) -> set[str]:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    if isinstance(arg, ast.Name) and arg.id in constants:
        return {constants[arg.id]}
    if isinstance(arg, ast.Attribute) and arg.attr == "plural":
        return pass_plurals  # a reconcile pass's own resource
    raise AssertionError(f"cannot tell the resource of {ast.unparse(arg)}: extend this test")


def operator_calls(unwatched: bool = False) -> set[tuple[str, str]]:
    """Every ``(KubeApi method, plural or "")`` the operator's modules call: all but
    :data:`UNWATCHED_MODULE`, or (``unwatched``) that one alone."""
    methods = set(permissions.KUBE_API_GRANTS)
    plural_methods = {m for m, g in permissions.KUBE_API_GRANTS.items() if g[0][0] == GROUP}
    modules = dict(_modules())
    pass_plurals: set[str] = set()
    for tree in modules.values():
        constants = _constants(tree)
        for node in ast.walk(tree):
            is_pass = isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "Pass")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "Pass")
            )
            if is_pass and isinstance(node, ast.Call) and len(node.args) >= 2:
                pass_plurals |= _plural(node.args[1], constants, set())
    assert pass_plurals, "found no reconcile pass (Pass(kube, plural, ...))"
    calls: set[tuple[str, str]] = set()
    for name, tree in modules.items():
        if (name == UNWATCHED_MODULE) != unwatched:
            continue
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods
                and _receiver_is_kube(node.func.value)
            ):
                continue
            method = node.func.attr
            if method in plural_methods:
                for plural in _plural(node.args[0], constants, pass_plurals):
                    calls.add((method, plural))
            else:
                calls.add((method, ""))
    return calls


def test_operator_calls_table_matches_the_code() -> None:
    assert operator_calls() == set(permissions.OPERATOR_CALLS)


def test_unwatched_calls_table_matches_the_code() -> None:
    assert operator_calls(unwatched=True) == set(permissions.UNWATCHED_CALLS)


def operator_handlers() -> set[tuple[str, str, str]]:
    """``(kind, apiGroup, plural)`` of every resource handler in handlers.py."""
    tree = ast.parse((PACKAGE / "handlers.py").read_text())
    constants = {"GROUP": GROUP}
    kinds = {"event": "event", "timer": "timer", "delete": "delete", "daemon": "timer"}
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        text = ast.unparse(node.func)
        if not text.startswith("kopf.") or node.func.attr not in kinds:
            continue
        if node.func.attr not in ("event", "delete", "timer", "daemon"):
            continue
        args = node.args
        if len(args) < 3:
            raise AssertionError(f"handler {ast.unparse(node)} without group, version, plural")
        group_node, plural_node = args[0], args[2]
        group = (
            constants[group_node.id]
            if isinstance(group_node, ast.Name)
            else ast.literal_eval(group_node)
        )
        found.add((kinds[node.func.attr], str(group), str(ast.literal_eval(plural_node))))
    for node in ast.walk(tree):
        # handlers this test does not know how to read (create/update/resume/field ...)
        if isinstance(node, ast.Attribute) and ast.unparse(node).startswith("kopf.on."):
            assert node.attr in ("event", "delete", "startup", "cleanup", "login", "probe"), (
                f"kopf.on.{node.attr}: teach permissions.py what kopf needs for it"
            )
    return found


def test_operator_handlers_table_matches_handlers_py() -> None:
    assert operator_handlers() == set(permissions.OPERATOR_HANDLERS)


def test_operator_rules_never_list_nor_change_secrets_nor_use_wildcards() -> None:
    for cluster_wide, warn in ((False, False), (True, False), (False, True)):
        for grants in permissions.operator_rules(cluster_wide, warn):
            for group, resource, verb in grants:
                assert "*" not in (group, resource, verb)
                if resource == "secrets":
                    assert verb in ("create", "get")


def test_the_operator_reads_secrets_only_as_metadata() -> None:
    """The one read of a Secret (whether the job owns one that exists) asks the API server
    for its metadata only, so a Secret's data never reaches the operator."""
    cls = _class(ast.parse((PACKAGE / "kube" / "kube_client.py").read_text()), "KubernetesApi")
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    reads = [
        name
        for name, fn in methods.items()
        for node in ast.walk(fn)
        if _self_attr(node, "_core") == "read_namespaced_secret"
    ]
    assert reads == ["create_secret"]
    source = ast.unparse(methods["_check_owned"])
    assert "_headers=headers" in source and "METADATA_ONLY" in source


# --- the chart ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the chart"
    )
    return module


def render(helm: ModuleType, values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values, name="gic", namespace="gic-system")
    return [
        doc
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def rule_grants(role: dict[str, Any]) -> set[Grant]:
    """Every (apiGroup, resource, verb) a Role or ClusterRole grants."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def check_operator_roles(
    docs: list[dict[str, Any]], cluster_wide: bool, warn_unwatched: bool = False
) -> None:
    """The operator's Roles and ClusterRoles in ``docs`` grant exactly its table."""
    namespaced, cluster = permissions.operator_rules(cluster_wide, warn_unwatched)
    roles = [
        d
        for d in docs
        if d["kind"] in ("Role", "ClusterRole")
        and d["metadata"]["labels"].get("app.kubernetes.io/component") != "spark-driver"
    ]
    if cluster_wide:
        [role] = roles
        assert role["kind"] == "ClusterRole"
        assert rule_grants(role) == namespaced | cluster
        return
    [scan] = [r for r in roles if r["kind"] == "ClusterRole"]
    assert rule_grants(scan) == cluster
    namespace_roles = [r for r in roles if r["kind"] == "Role"]
    assert namespace_roles
    for role in namespace_roles:
        assert rule_grants(role) == namespaced, role["metadata"]["namespace"]


def check_spark_roles(docs: list[dict[str, Any]]) -> None:
    spark = [
        d
        for d in docs
        if d["kind"] == "Role"
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "spark-driver"
    ]
    assert spark
    for role in spark:
        assert rule_grants(role) == set(permissions.SPARK_DRIVER_GRANTS)


@pytest.mark.parametrize(
    ("values", "cluster_wide", "warn"),
    [
        ({}, False, False),
        ({"watchNamespaces": ["team-a", "team-b"]}, False, False),
        ({"clusterWide": True}, True, False),
        ({"watchNamespaces": ["team-a"], "warnUnwatchedJobs": True}, False, True),
        ({"clusterWide": True, "warnUnwatchedJobs": True}, True, False),
    ],
    ids=["release-namespace", "namespaces", "cluster-wide", "warn-unwatched", "cluster-warn"],
)
def test_chart_grants_exactly_the_table(
    helm: ModuleType, values: dict[str, Any], cluster_wide: bool, warn: bool
) -> None:
    docs = render(helm, values)
    check_operator_roles(docs, cluster_wide, warn)
    check_spark_roles(docs)


def test_cluster_wide_gicjob_reads_are_opt_in(helm: ModuleType) -> None:
    """By default no ClusterRole lets the operator read GICJobs or post Events outside
    its namespaces; warnUnwatchedJobs adds exactly list on GICJobs and create/patch on
    Events, and the operator's --warn-unwatched flag with it."""

    def scan_grants(values: dict[str, Any]) -> set[Grant]:
        [scan] = [d for d in render(helm, values) if d["kind"] == "ClusterRole"]
        return rule_grants(scan)

    def args(values: dict[str, Any]) -> list[str]:
        [deploy] = [d for d in render(helm, values) if d["kind"] == "Deployment"]
        return list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])

    default, warn = scan_grants({}), scan_grants({"warnUnwatchedJobs": True})
    assert not {g for g in default if g[1] in ("gicjobs", "events")}
    assert warn - default == {
        (GROUP, "gicjobs", "list"),
        ("", "events", "create"),
        ("", "events", "patch"),
    }
    assert "--warn-unwatched" not in args({})
    assert "--warn-unwatched" in args({"warnUnwatchedJobs": True})
    assert "--warn-unwatched" not in args({"clusterWide": True, "warnUnwatchedJobs": True})


def test_spark_driver_rights_match_the_operators_spark_settings() -> None:
    """The driver's Role allows executor pods only because the operator turns off what
    else Spark would touch: its ConfigMap, the driver service's deletion, volume claims."""
    from gic_operator.launch.launch_config import spark_conf
    from gic_operator.launch.launch_plan import LaunchPlan
    from gic_operator.models import GICJobSpec

    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "gic:1", "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://bucket/gic"},
        }
    )
    plan = LaunchPlan(namespace="ns", name="wc", uid="u", spec=spec, job_id="ns.wc", epoch=1)
    conf = spark_conf(plan)
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert {resource for _, resource, _ in permissions.SPARK_DRIVER_GRANTS} == {"pods"}
