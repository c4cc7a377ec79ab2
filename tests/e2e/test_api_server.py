"""What only a real API server shows: the CRD's schema at work (explain, validation,
pruning, defaults), the status subresource, optimistic concurrency, the chart's RBAC,
PodSecurity admission, the garbage collector, and the operator riding out an API server
restart.

Jobs that must not run a driver name storage the operator refuses (``gs://``): the API
server admits them and the operator marks them ``Invalid``. One job (``rate``) runs for
the tests that need a live driver.

Control-plane mode only (the test control plane of :mod:`tests.controlplane`): the tests
use the operator's own token, the process kubelet and the API server process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.launch import launch_plan, launcher
from gic_operator.models import GICJobSpec
from gic_operator.operator_errors import ConflictError
from gic_runtime.checkpoint.registry import DEFAULT_RETAINED_CHECKPOINTS

from .chart import OPERATOR_ACCOUNT, RELEASE_NAMESPACE
from .cluster import Cluster
from .controlplane_backend import ENFORCE, SECRET_NAME, ControlPlaneCluster
from .helpers import checkpoint_id, wait_checkpoints, wait_running
from .timings import measure_savepoint

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("GIC_E2E_KUBECONFIG")),
    reason="needs the test control plane (tests/controlplane), not a GIC_E2E_KUBECONFIG cluster",
)

JOB = "rate"
REFUSED_STORAGE = "gs://bucket/gic"
OPERATOR_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{OPERATOR_ACCOUNT}"


@pytest.fixture(scope="module")
def kube(cluster: Cluster) -> ControlPlaneCluster:
    assert isinstance(cluster, ControlPlaneCluster)
    return cluster


@pytest.fixture(scope="module")
def job(kube: ControlPlaneCluster) -> Iterator[str]:
    """A running job (``rate_count.py``, local[2]) for the tests that need a driver."""
    kube.apply(kube.job_manifest(JOB))
    wait_running(kube, JOB)
    yield JOB


@pytest.fixture(scope="module")
def unwatched(kube: ControlPlaneCluster) -> str:
    """A namespace the operator does not watch (no Role of the chart there)."""
    name = f"e2e-unwatched-{uuid.uuid4().hex[:6]}"
    kube.admin_kubectl("create", "namespace", name)
    return name


def refused_job(kube: Cluster, name: str) -> dict[str, Any]:
    """A GICJob the API server admits and the operator refuses to launch."""
    return kube.job_manifest(name, extra_spec={"checkpointing": {"storage": REFUSED_STORAGE}})


def apply_file(
    kube: Cluster, *flags: str, documents: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply FLAGS -f <file>`` (exit status not checked)."""
    return kube.run_kubectl("apply", *flags, "-f", str(kube.manifest_file(*documents)))


def wait_invalid(kube: Cluster, name: str) -> dict[str, Any]:
    kube.wait(f"gicjob/{name}", "jsonpath={.status.phase}=Invalid", 60)
    return kube.get("gicjob", name) or {}


def same_driver(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether two statuses of a job name the same driver (no relaunch in between)."""
    keys = ("epoch", "restarts", "driverPod")
    return [before.get(k) for k in keys] == [after.get(k) for k in keys]


def patch_json(kube: Cluster, name: str, patch: dict[str, Any], *flags: str) -> dict[str, Any]:
    """``kubectl patch gicjob NAME --type=merge -p PATCH FLAGS -o json``: the object the
    server answered with."""
    out = kube.kubectl(
        "patch", "gicjob", name, "--type=merge", "-p", json.dumps(patch), *flags, "-o", "json"
    )
    return dict(json.loads(out))


# --- the schema ------------------------------------------------------------------------


def test_explain_prints_the_restore_fields(kube: ControlPlaneCluster) -> None:
    text = kube.kubectl("explain", "gicjob.spec.restore")
    assert "KIND:       GICJob" in text
    assert "FIELD: restore <Object>" in text
    fields = re.findall(r"^  (\w+)\t<(\w+)>", text, re.MULTILINE)
    assert fields == [("mode", "string"), ("path", "string"), ("savepoint", "string")]
    assert "enum: Claim, NoClaim" in text
    assert "Name of a Savepoint resource in the job's namespace" in text


def test_kubectl_get_prints_the_crd_printer_columns(
    kube: ControlPlaneCluster, unwatched: str
) -> None:
    """The API server builds the Table ``kubectl get`` prints from the CRD's
    ``additionalPrinterColumns`` (in a namespace no operator writes to)."""
    job = kube.job_manifest("columns")
    job["metadata"]["namespace"] = unwatched
    admin = kube.admin_kubectl
    admin("apply", "-f", str(kube.manifest_file(job)))
    status = {
        "phase": "Running",
        "lastCheckpoint": {"id": 0, "time": "2026-01-01T00:00:00Z"},
        "restarts": 2,
        "restoredFrom": {"path": "s3://bucket/savepoints/x", "mode": "NoClaim"},
    }
    admin(
        "-n", unwatched, "patch", "gj", "columns", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    table = admin("-n", unwatched, "get", "gj").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "CHECKPOINT", "CHECKPOINT-AGE", "RESTARTS", "AGE"]
    row = table[1].split()
    assert row[:3] == ["columns", "Running", "0"]
    assert re.fullmatch(r"\d+d", row[3]) and row[4] == "2"  # a checkpoint days ago
    wide = admin("-n", unwatched, "get", "gj", "columns", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[4] == "RESTORED-FROM"
    assert wide[1].split()[4] == "s3://bucket/savepoints/x"
    missing = admin("-n", unwatched, "get", "gj", "nope", check=False)
    assert missing.returncode == 1
    assert "(NotFound)" in missing.stderr and '"nope" not found' in missing.stderr
    none = admin("-n", unwatched, "get", "gsp", check=False)
    assert none.stderr.strip() == f"No resources found in {unwatched} namespace."


#: ``name: (spec changes, what the API server says)``: values the CRD's schema forbids.
SCHEMA_VIOLATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "buckets-zero": (
        {"checkpointing": {"buckets": 0}},
        "spec.checkpointing.buckets: Invalid value: 0: "
        "spec.checkpointing.buckets in body should be greater than or equal to 1",
    ),
    "buckets-over-max": (
        {"checkpointing": {"buckets": 40000}},
        "spec.checkpointing.buckets: Invalid value: 40000: "
        "spec.checkpointing.buckets in body should be less than or equal to 32768",
    ),
    "negative-backoff": (
        {"restartPolicy": {"backoffSeconds": -1}},
        "spec.restartPolicy.backoffSeconds: Invalid value: -1: "
        "spec.restartPolicy.backoffSeconds in body should be greater than or equal to 0",
    ),
    "upgrade-mode": (
        {"upgradeMode": "sometimes"},
        'spec.upgradeMode: Unsupported value: "sometimes": '
        'supported values: "savepoint", "last-state", "stateless"',
    ),
    "restore-mode": (
        {"restore": {"savepoint": "x", "mode": "Maybe"}},
        'spec.restore.mode: Unsupported value: "Maybe": supported values: "Claim", "NoClaim"',
    ),
    "driver-memory": (
        {"application": {"driver": {"memory": "lots"}}},
        'spec.application.driver.memory: Invalid value: "lots": '
        "spec.application.driver.memory in body should match",
    ),
    "buckets-type": (
        {"checkpointing": {"buckets": "many"}},
        'spec.checkpointing.buckets: Invalid value: "string": '
        "spec.checkpointing.buckets in body must be of type integer",
    ),
}


@pytest.mark.parametrize("case", sorted(SCHEMA_VIOLATIONS))
def test_the_schema_refuses_forbidden_values(kube: ControlPlaneCluster, case: str) -> None:
    changes, message = SCHEMA_VIOLATIONS[case]
    name = f"schema-{case}"
    manifest = kube.job_manifest(name, extra_spec=changes)
    for flags in (["--dry-run=server"], []):
        refused = apply_file(kube, *flags, documents=[manifest])
        assert refused.returncode == 1, refused.stdout
        assert f'The GICJob "{name}" is invalid' in refused.stderr
        assert message in refused.stderr
        assert kube.get("gicjob", name) is None


def test_a_valid_job_passes_a_server_dry_run_and_is_not_stored(kube: ControlPlaneCluster) -> None:
    name = "schema-valid"
    accepted = apply_file(kube, "--dry-run=server", documents=[kube.job_manifest(name)])
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.strip() == f"gicjob.gic.io/{name} created (server dry run)"
    assert kube.get("gicjob", name) is None


def test_unknown_fields_are_pruned_and_defaults_applied(kube: ControlPlaneCluster) -> None:
    name = "pruned"
    manifest: dict[str, Any] = {
        "apiVersion": "gic.io/v1alpha1",
        "kind": "GICJob",
        "metadata": {"name": name, "namespace": kube.namespace},
        "spec": {
            "application": {"image": "gic:1", "mainFile": "/opt/job.py", "colour": "blue"},
            "checkpointing": {"storage": REFUSED_STORAGE, "bucketz": 16},
            "restore": {"savepoint": "sp"},
            "owner": "someone",
        },
    }
    warned = apply_file(kube, "--validate=warn", "--dry-run=server", documents=[manifest])
    assert warned.returncode == 0, warned.stderr
    assert 'Warning: unknown field "spec.checkpointing.bucketz"' in warned.stderr
    assert 'Warning: unknown field "spec.owner"' in warned.stderr

    ignored = apply_file(kube, "--validate=false", documents=[manifest])
    assert ignored.returncode == 0, ignored.stderr
    assert ignored.stderr == ""
    spec = (kube.get("gicjob", name) or {})["spec"]
    assert "owner" not in spec
    assert "colour" not in spec["application"]
    assert "bucketz" not in spec["checkpointing"]
    # What the schema defaults, as stored:
    assert spec["checkpointing"]["buckets"] == 128
    assert spec["checkpointing"]["retainedCheckpoints"] == DEFAULT_RETAINED_CHECKPOINTS
    assert spec["checkpointing"]["changelog"] == {"maxHedges": 1, "preemptiveUploadBytes": 4194304}
    assert spec["application"]["imagePullPolicy"] == "IfNotPresent"
    assert spec["application"]["driver"] == {"cores": 1, "memory": "1g", "memoryOverhead": "512m"}
    assert spec["restore"] == {"savepoint": "sp", "mode": "NoClaim"}
    assert spec["upgradeMode"] == "savepoint"
    assert spec["state"] == "running"
    assert spec["restartPolicy"]["maxRestarts"] == 5
    # The operator only ever saw the pruned object: its verdict is about the storage.
    status = wait_invalid(kube, name)["status"]
    assert "spec.checkpointing.storage" in status["message"]
    assert "bucketz" not in status["message"] and "owner" not in status["message"]


# --- the status subresource and optimistic concurrency --------------------------------------


def test_the_status_subresource_keeps_spec_and_status_apart(kube: ControlPlaneCluster) -> None:
    name = "split"
    kube.apply(refused_job(kube, name))
    before = wait_invalid(kube, name)
    generation = before["metadata"]["generation"]
    buckets = before["spec"]["checkpointing"]["buckets"]

    through_main = patch_json(
        kube, name, {"status": {"phase": "Running", "message": "written through the object"}}
    )
    assert through_main["status"]["phase"] == "Invalid"
    assert through_main["status"]["message"] != "written through the object"
    assert through_main["metadata"]["generation"] == generation

    through_status = patch_json(
        kube,
        name,
        {"spec": {"checkpointing": {"buckets": 7}}, "status": {"message": "written to /status"}},
        "--subresource=status",
    )
    assert through_status["spec"]["checkpointing"]["buckets"] == buckets
    assert through_status["status"]["message"] == "written to /status"
    assert through_status["metadata"]["generation"] == generation

    spec_change = patch_json(kube, name, {"spec": {"checkpointing": {"buckets": 7}}})
    assert spec_change["spec"]["checkpointing"]["buckets"] == 7
    assert spec_change["metadata"]["generation"] == generation + 1


@contextlib.contextmanager
def operator_api(kube: ControlPlaneCluster) -> Iterator[KubernetesApi]:
    """The operator's :class:`KubernetesApi` with the operator's kubeconfig (its token)."""
    from kubernetes.config import new_client_from_config

    config = str(kube.operator_kubectl.kubeconfig)
    client = new_client_from_config(config_file=config)  # type: ignore[no-untyped-call]
    try:
        yield KubernetesApi(client, request_timeout_s=10)
    finally:
        client.close()


def test_a_stale_status_patch_gets_409_conflict(kube: ControlPlaneCluster) -> None:
    name = "stale"
    kube.apply(refused_job(kube, name))
    read = wait_invalid(kube, name)
    version = read["metadata"]["resourceVersion"]
    kube.kubectl("annotate", f"gicjob/{name}", "e2e.gic.io/touched=yes")  # a newer version

    stale = {"metadata": {"resourceVersion": version}, "status": {"message": "stale"}}
    refused = kube.run_kubectl(
        "patch", "gicjob", name, "--subresource=status", "--type=merge", "-p", json.dumps(stale)
    )
    assert refused.returncode == 1
    assert "Error from server (Conflict)" in refused.stderr
    assert "the object has been modified" in refused.stderr

    # The operator's own seam, with the operator's own credentials.
    with operator_api(kube) as api:
        with pytest.raises(ConflictError) as caught:
            api.patch_status(
                "gicjobs", kube.namespace, name, {"message": "stale"}, resource_version=version
            )
        assert caught.value.status == 409
        current = api.get_object("gicjobs", kube.namespace, name)
        assert current is not None
        api.patch_status(
            "gicjobs",
            kube.namespace,
            name,
            {"message": "fresh"},
            resource_version=current["metadata"]["resourceVersion"],
        )
    assert kube.status("gicjob", name)["message"] != "stale"


def test_the_operator_rides_out_conflicting_writes(kube: ControlPlaneCluster, job: str) -> None:
    """Annotations change the object under the operator while its driver checkpoints (so
    its status changes every second): status patches made with the version a pass read
    may meet newer versions (whether one does is up to timing; the seam test
    ``tests/operator/apiserver`` forces one). Whatever happens, the job keeps its driver
    and keeps checkpointing, and the status catches up."""
    before = wait_running(kube, job)
    start = checkpoint_id(kube, job)
    seen = len(kube.operator_log())
    target = start + 3
    deadline = time.monotonic() + 90
    touches = 0
    while checkpoint_id(kube, job) < target:
        assert time.monotonic() < deadline, f"no checkpoint {target} while annotated"
        touches += 1
        kube.kubectl("annotate", "--overwrite", f"gicjob/{job}", f"e2e.gic.io/touch={touches}")
    conflicts = kube.operator_log()[seen:].count("changed while it was reconciled")
    print(f"{touches} annotations, {conflicts} conflicted status patches")
    after = wait_running(kube, job)
    assert after["lastCheckpoint"]["id"] >= target
    assert same_driver(before, after)


# --- RBAC: the chart's grants are enough, and no more ------------------------------------


def probe_pod(name: str) -> dict[str, Any]:
    """A pod that meets the restricted standard (only ever created with a dry run)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "gic-spark",
            "automountServiceAccountToken": False,
            "securityContext": launch_plan.pod_security_context(),
            "containers": [
                {
                    "name": "main",
                    "image": "gic:1",
                    "command": ["true"],
                    "securityContext": launch_plan.container_security_context(),
                }
            ],
        },
    }


def forbidden_cases(ns: str, other: str, pod_file: Path) -> dict[str, tuple[list[str], str]]:
    """``what: (kubectl args, the refusal)`` for what the chart does not grant."""
    return {
        # ``get`` on secrets is granted (an existing Secret's metadata decides whether
        # it may be adopted); changing one is not.
        "change a secret": (
            ["-n", ns, "label", "secret", SECRET_NAME, "gic.io/probe=1"],
            f'cannot patch resource "secrets" in API group "" in the namespace "{ns}"',
        ),
        "list secrets": (
            ["-n", ns, "get", "secrets"],
            f'cannot list resource "secrets" in API group "" in the namespace "{ns}"',
        ),
        "delete a GICJob": (
            ["-n", ns, "delete", "gicjob", "rbac-target", "--wait=false"],
            f'cannot delete resource "gicjobs" in API group "gic.io" in the namespace "{ns}"',
        ),
        "create a GICJob": (
            ["-n", ns, "create", "-f", "-"],
            f'cannot create resource "gicjobs" in API group "gic.io" in the namespace "{ns}"',
        ),
        "delete a service": (
            ["-n", ns, "delete", "service", "rbac-target", "--wait=false"],
            f'cannot delete resource "services" in API group "" in the namespace "{ns}"',
        ),
        "delete a configmap": (
            ["-n", ns, "delete", "configmap", "kube-root-ca.crt", "--wait=false"],
            f'cannot delete resource "configmaps" in API group "" in the namespace "{ns}"',
        ),
        "read a driver's log": (
            ["-n", ns, "get", "--raw", f"/api/v1/namespaces/{ns}/pods/{JOB}-driver-1/log"],
            f'cannot get resource "pods/log" in API group "" in the namespace "{ns}"',
        ),
        "create a pod in a namespace it does not watch": (
            ["-n", other, "create", "--dry-run=server", "-f", str(pod_file)],
            f'cannot create resource "pods" in API group "" in the namespace "{other}"',
        ),
        "read GICJobs of a namespace it does not watch": (
            ["-n", other, "get", "gicjobs"],
            f'cannot list resource "gicjobs" in API group "gic.io" in the namespace "{other}"',
        ),
        "list pods in every namespace": (
            ["get", "pods", "--all-namespaces"],
            'cannot list resource "pods" in API group "" at the cluster scope',
        ),
        "list nodes": (
            ["get", "nodes"],
            'cannot list resource "nodes" in API group "" at the cluster scope',
        ),
        "grant itself a Role": (
            ["-n", ns, "create", "role", "more", "--verb=get", "--resource=secrets"],
            'cannot create resource "roles" in API group "rbac.authorization.k8s.io" '
            f'in the namespace "{ns}"',
        ),
    }


def test_the_operator_account_gets_403_for_what_the_chart_does_not_grant(
    kube: ControlPlaneCluster, unwatched: str, tmp_path: Path
) -> None:
    ns = kube.namespace
    kube.apply(refused_job(kube, "rbac-target"))
    service = launcher.driver_service(ns, "rbac-target", "00000000-0000-0000-0000-000000000001")
    service["metadata"]["name"] = "rbac-target"
    del service["metadata"]["ownerReferences"]  # the garbage collector removes orphans
    kube.apply(service)
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(probe_pod("probe")))
    job_text = yaml.safe_dump(refused_job(kube, "rbac-created"))
    refusals = []
    for what, (args, message) in forbidden_cases(ns, unwatched, pod_file).items():
        stdin = job_text if what == "create a GICJob" else None
        result = kube.operator_kubectl(*args, check=False, stdin=stdin, timeout=60)
        assert result.returncode == 1, f"{what}: {result.stdout}"
        assert "Error from server (Forbidden)" in result.stderr, f"{what}: {result.stderr}"
        assert f'User "{OPERATOR_USER}"' in result.stderr, f"{what}: {result.stderr}"
        assert message in result.stderr, f"{what}: {result.stderr}"
        refusals.append(what)
    assert len(refusals) == 12
    assert kube.get("gicjob", "rbac-target") is not None
    assert kube.get("gicjob", "rbac-created") is None
    assert kube.get("service", "rbac-target") is not None


def test_the_operator_account_may_do_what_the_operator_does(
    kube: ControlPlaneCluster, tmp_path: Path
) -> None:
    """The counterparts of the refusals above, as real requests (dry runs where they
    would create something): the refusals are the chart's choice, not a broken token."""
    ns = kube.namespace
    pod_file = tmp_path / "pod.yaml"
    pod_file.write_text(yaml.safe_dump(probe_pod("probe")))
    secret = launcher.auth_secret(ns, "rbac-allowed", "00000000-0000-0000-0000-000000000002")
    secret_file = tmp_path / "secret.yaml"
    secret_file.write_text(yaml.safe_dump(secret))
    savepoints = f"/apis/gic.io/v1alpha1/namespaces/{ns}/savepoints"
    allowed = {
        "create a pod": ["-n", ns, "create", "--dry-run=server", "-f", str(pod_file)],
        "create a secret": ["-n", ns, "create", "--dry-run=server", "-f", str(secret_file)],
        "list GICJobs": ["-n", ns, "get", "gicjobs"],
        "watch Savepoints": ["get", "--raw", f"{savepoints}?watch=1&timeoutSeconds=1"],
        "list pods": ["-n", ns, "get", "pods"],
        "list CRDs": ["get", "crd"],
        "list namespaces": ["get", "namespaces"],
    }
    for what, args in allowed.items():
        result = kube.operator_kubectl(*args, check=False, timeout=60)
        assert result.returncode == 0, f"{what}: {result.stderr}"
    who = json.loads(kube.operator_kubectl("auth", "whoami", "-o", "json").stdout)
    assert who["status"]["userInfo"]["username"] == OPERATOR_USER


# --- PodSecurity admission -------------------------------------------------------------------


def plan_for(kube: Cluster, *, master: str | None) -> launch_plan.LaunchPlan:
    application: dict[str, Any] = {"image": "gic:1", "mainFile": "/opt/job.py"}
    if master is not None:
        application["sparkConf"] = {"spark.master": master}
    spec = GICJobSpec.model_validate(
        {"application": application, "checkpointing": {"storage": "s3://bucket/gic"}}
    )
    return launch_plan.LaunchPlan(
        namespace=kube.namespace,
        name="psa",
        uid="00000000-0000-0000-0000-000000000003",
        spec=spec,
        job_id=f"{kube.namespace}.psa",
        epoch=1,
    )


def executor_pod(plan: launch_plan.LaunchPlan) -> dict[str, Any]:
    """An executor pod as Spark builds it from the operator's template: Spark adds the
    name, labels, image, ``executor`` as the container's arguments, its variables,
    resources and ports (``KubernetesExecutorBuilder`` over the template)."""
    pod = launcher.executor_pod_template(plan)
    pod["metadata"] = {
        "name": "psa-exec-1",
        "labels": {**launch_plan.executor_labels(plan.name), "spark-exec-id": "1"},
    }
    container = pod["spec"]["containers"][0]
    container.update(
        {
            "image": plan.spec.application.image,
            "args": ["executor"],
            "resources": {"requests": {"cpu": "1", "memory": "1408Mi"}},
            "ports": [{"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"}],
        }
    )
    container["env"] = [*container["env"], {"name": "SPARK_EXECUTOR_ID", "value": "1"}]
    pod["spec"]["restartPolicy"] = "Never"
    return pod


def dry_run_create(kube: Cluster, pod: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kube.run_kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", str(kube.manifest_file(pod))
    )


@pytest.mark.parametrize("master", ["local[2]", None], ids=["local", "k8s"])
def test_the_restricted_namespace_admits_driver_and_executor_pods(
    kube: ControlPlaneCluster, master: str | None
) -> None:
    namespace = kube.get("namespace", kube.namespace) or {}
    assert namespace["metadata"]["labels"][ENFORCE] == "restricted"
    plan = plan_for(kube, master=master)
    driver = dry_run_create(kube, launcher.driver_pod(plan))
    assert driver.returncode == 0, driver.stderr
    admitted = json.loads(driver.stdout)
    assert admitted["spec"]["securityContext"]["runAsUser"] == launch_plan.SPARK_UID
    volumes = {v["name"] for v in admitted["spec"].get("volumes") or []}
    if master is None:  # the ServiceAccount admission plugin added the token volume
        assert any(v.startswith("kube-api-access-") for v in volumes)
        assert {"spark-auth", "executor-template"} <= volumes
    else:
        assert volumes == set()
    executor = dry_run_create(kube, executor_pod(plan))
    assert executor.returncode == 0, executor.stderr
    assert json.loads(executor.stdout)["spec"]["automountServiceAccountToken"] is False


def test_the_restricted_namespace_refuses_a_pod_without_the_security_contexts(
    kube: ControlPlaneCluster,
) -> None:
    pod = executor_pod(plan_for(kube, master=None))
    del pod["spec"]["securityContext"]
    del pod["spec"]["containers"][0]["securityContext"]
    refused = dry_run_create(kube, pod)
    assert refused.returncode == 1
    assert 'violates PodSecurity "restricted:latest"' in refused.stderr
    assert "allowPrivilegeEscalation != false" in refused.stderr
    assert "runAsNonRoot != true" in refused.stderr
    assert "seccompProfile" in refused.stderr


# --- the garbage collector -------------------------------------------------------------------


def test_the_garbage_collector_removes_what_the_operator_created(
    kube: ControlPlaneCluster,
) -> None:
    """A job on Kubernetes (the default ``k8s://`` master) gets a driver pod, a service,
    the executor pod template ConfigMap and the Spark authentication Secret, all owned by
    the GICJob; deleting the GICJob leaves the rest to the garbage collector."""
    name = "collected"
    manifest = kube.job_manifest(name)
    del manifest["spec"]["application"]["sparkConf"]["spark.master"]
    kube.apply(manifest)
    uid = (kube.get("gicjob", name) or {})["metadata"]["uid"]
    owned = {
        "service": f"{name}-driver",
        "configmap": launch_plan.executor_template_name(name),
        "secret": launch_plan.auth_secret_name(name),
    }

    def all_there() -> list[dict[str, Any]]:
        found = [kube.get(kind, object_name) for kind, object_name in owned.items()]
        objects = [obj for obj in found if obj is not None]
        pods = kube.driver_pods(name)
        return [*objects, *pods] if len(objects) == len(owned) and pods else []

    objects = kube.wait_until(all_there, 120, "the operator to create the job's objects")
    for obj in objects:
        kind = obj["kind"]
        [reference] = obj["metadata"]["ownerReferences"]
        assert (reference["kind"], reference["uid"], reference["controller"]) == (
            "GICJob",
            uid,
            True,
        ), kind
    kube.kubectl("delete", "gicjob", name, "--wait=false")

    def all_gone() -> bool:
        return (
            kube.get("gicjob", name) is None
            and not kube.driver_pods(name)
            and all(kube.get(kind, object_name) is None for kind, object_name in owned.items())
        )

    kube.wait_until(all_gone, 120, "the GICJob and everything it owned to be gone")
    assert kube.list_objects("pods", f"gic.io/job={name}") == []  # executors too, if any


def test_the_operator_was_never_refused(kube: ControlPlaneCluster) -> None:
    """Everything the operator did in this module so far (jobs refused and running,
    savepoints, events) the chart's RBAC allowed. (Runs before the API server restart:
    a starting API server answers 403 until its authorizer has loaded the roles.)"""
    log = kube.operator_log()
    assert "gic-operator watching e2e-api-server" in log
    assert "Forbidden" not in log and "could not post event" not in log


# --- the API server restarts under a running job -------------------------------------------


def test_watches_resume_after_the_api_server_restarts(
    kube: ControlPlaneCluster, job: str, timings: list[tuple[str, float]]
) -> None:
    before = wait_running(kube, job)
    last = wait_checkpoints(kube, job, checkpoint_id(kube, job))
    pod = f"{kube.namespace}/{before['driverPod']}"
    driver_pid = kube.plane.kubelet.processes()[pod]
    kube.plane.stop_apiserver()
    try:
        time.sleep(5)  # the operator's watches and timers fail meanwhile; the driver works on
        assert kube.operator.running()
        assert kube.plane.kubelet.processes()[pod] == driver_pid
    finally:
        kube.plane.start_apiserver()
    # Right after it is back: the operator must see the annotation through its watch.
    measured = measure_savepoint(kube, job, "after-restart")
    print(f"after an API server restart, annotate -> Savepoint Completed: {measured.seconds:.2f} s")
    timings.append(("savepoint after an API server restart", measured.seconds))
    assert measured.status["state"] == "Completed"
    assert measured.status["checkpointId"] > last
    wait_checkpoints(kube, job, checkpoint_id(kube, job) + 2)
    after = wait_running(kube, job)
    assert same_driver(before, after)
    assert kube.operator.running()
