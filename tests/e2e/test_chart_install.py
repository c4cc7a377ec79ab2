"""The chart installed with ``helm install``; its operator starts jobs in other namespaces.

The steps of the chart's README ("Jobs in other namespaces") and of its NOTES.txt, on the
test control plane:

1. ``kubectl create namespace team-a`` (before the chart, which puts the operator's Role,
   the ``gic-spark`` service account and its Role and a NetworkPolicy there), and the
   operator's storage credentials in Secret ``gic-operator-s3`` of ``gic-system``;
2. ``helm install gic-operator charts/gic-operator -n gic-system --set
   'watchNamespaces={team-a}' --set storageCredentials.secretName=gic-operator-s3``
   (Helm's own install, through ``helm-python-sdk``): the process kubelet runs the
   Deployment's pod, ``gic-operator`` with the Deployment's arguments, authenticated by
   the pod's token of the chart's ServiceAccount;
3. ``kubectl -n team-a apply -f`` a Secret with the job's S3 credentials and GICJob
   ``rate-count``: it reaches ``Running`` with checkpoints, its driver runs as
   ``gic-spark`` in team-a;
4. the two commands NOTES.txt prints for another namespace, ``kubectl create namespace
   team-b`` and ``helm upgrade ... --reuse-values --set 'watchNamespaces={team-a,team-b}'``:
   a job in team-b starts too, the one in team-a goes on;
5. nothing the operator did was refused: no 403 in its log, no Event about one.

What differs from a real cluster: one replica (the upgrade's rollout is then one pod, which
keeps this module short on two cores), metrics and health ports that are free on this
machine (the operator binds them on its pod's own IP, but a process of this machine that
listens on the same port of every interface would still take it: other work on a shared
machine), and no image (the kubelet runs ``gic-operator`` from this venv).
``test_local_cluster.py`` installs with the chart's defaults. The jobs are the suite's
usual ``rate_count.py`` on ``local[2]``.

Control-plane mode only (skipped with ``GIC_E2E_KUBECONFIG``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.storage.uri import StoreResolver

from ..controlplane.cluster import ControlPlane, free_port
from ..controlplane.kubelet import default_rewrite
from .chart import CHART
from .cluster import Cluster, Place
from .controlplane_backend import ControlPlaneBackend, spark_rewrite
from .helpers import assert_operator_never_refused, checkpoint_id, wait_checkpoints, wait_running
from .kubectl import wait_until

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("GIC_E2E_KUBECONFIG")),
    reason="installs the chart on the test control plane",
)

#: The release as the READMEs install it: its resources are all named ``gic-operator``.
RELEASE = "gic-operator"
RELEASE_NAMESPACE = "gic-system"
TEAM_A = "team-a"
TEAM_B = "team-b"
OPERATOR_SECRET = "gic-operator-s3"
#: What the chart's README passes to ``helm install`` for jobs in team-a.
INSTALL_SETS = ("watchNamespaces={team-a}", f"storageCredentials.secretName={OPERATOR_SECRET}")
JOB_SECRET = "gic-s3-credentials"
JOB = "rate-count"
SPARK_ACCOUNT = "gic-spark"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
README = (CHART / "README.md").read_text()


def operator_rewrite(command: list[str]) -> list[str]:
    """The Deployment's ``gic-operator`` as the script of this venv."""
    if command[:1] == ["gic-operator"]:
        script = Path(sys.executable).with_name("gic-operator")
        head = [str(script)] if script.exists() else [sys.executable, "-m", "gic_operator"]
        return [*head, *command[1:]]
    return default_rewrite(command)


def free_ports() -> dict[str, Any]:
    """Metrics and health ports no process of this machine listens on."""
    return {"metrics": {"port": free_port()}, "health": {"port": free_port()}}


def secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


class InstalledCluster(Cluster):
    """One job namespace of the release; the operator is the Deployment's pod."""

    mode = "helm"

    def __init__(self, place: Place, *, plane: ControlPlane) -> None:
        super().__init__(place)
        self.plane = plane

    def operator_pods(self) -> list[dict[str, Any]]:
        return self.pods_in(RELEASE_NAMESPACE, SELECTOR)

    def operator_log(self) -> str:
        """What every operator pod of the release logged (those already deleted too),
        from the kubelet's log files."""
        for pod in self.operator_pods():
            path = self.plane.kubelet.log_path(RELEASE_NAMESPACE, pod["metadata"]["name"])
            if path is not None:
                pods_dir = path.parent.parent
                break
        else:
            return ""
        return "\n".join(
            f"----- {path.parent.name} -----\n{path.read_text(errors='replace')}"
            for path in sorted(pods_dir.glob(f"{RELEASE_NAMESPACE}_{RELEASE}-*/operator.log"))
        )

    def kill_driver(self, pod: str) -> None:
        self.plane.kubelet.kill(self.namespace, pod)

    def pod_log(self, pod: str) -> str:
        path = self.plane.kubelet.log_path(self.namespace, pod)
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-200:])


@dataclasses.dataclass
class Release:
    """The installed release: Helm's configuration, the notes it printed, the job
    namespaces made so far."""

    backend: ControlPlaneBackend
    helm: Any = None
    notes: str = ""
    clusters: dict[str, InstalledCluster] = dataclasses.field(default_factory=dict)

    def credentials(self) -> dict[str, str]:
        settings = self.backend.s3.settings
        return {
            "AWS_ACCESS_KEY_ID": settings.access_key_id or "",
            "AWS_SECRET_ACCESS_KEY": settings.secret_access_key or "",
            "AWS_REGION": settings.region or "us-east-1",
        }

    def job_namespace(self, namespace: str) -> InstalledCluster:
        """``kubectl create namespace NAMESPACE`` (restricted Pod Security, which GIC's
        pods meet), and the kubelet told to run its drivers' ``spark-submit``."""
        backend = self.backend
        backend.create_namespace(namespace)
        backend.plane.kubelet.configure_namespace(
            namespace,
            rewrite=spark_rewrite,
            extra_env={"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        )
        place = Place(
            namespace=namespace,
            kubectl=backend.kubectl(),
            resolver=StoreResolver(backend.s3.settings),
            defaults=dataclasses.replace(backend.defaults(), credentials_secret=JOB_SECRET),
            workdir=backend.workdir / namespace,
        )
        self.clusters[namespace] = InstalledCluster(place, plane=backend.plane)
        return self.clusters[namespace]

    def start_job(self, cluster: InstalledCluster) -> dict[str, Any]:
        """``kubectl -n <ns> apply -f`` the job's Secret and GICJob (as
        examples/k8s/gicjob-s3.yaml has them); wait until it runs with a checkpoint."""
        started = time.monotonic()
        job_secret = secret(JOB_SECRET, cluster.namespace, self.credentials())
        cluster.apply(job_secret, cluster.job_manifest(JOB))
        status = wait_running(cluster, JOB)
        print(f"{cluster.namespace}: apply -> Running with a checkpoint: "
              f"{time.monotonic() - started:.1f} s")  # fmt: skip
        return status


@pytest.fixture(scope="module")
def release(e2e_backend: ControlPlaneBackend) -> Iterator[Release]:
    import helm_python

    backend = e2e_backend
    plane = backend.plane
    kubectl = backend.kubectl()
    state = Release(backend)
    # 1. The job namespace; the operator's storage credentials in the release namespace
    #    (labelled restricted here too: the operator pod meets it).
    state.job_namespace(TEAM_A)
    backend.create_namespace(RELEASE_NAMESPACE)
    operator_env = {**state.credentials(), "GIC_S3_ENDPOINT_URL": backend.s3.endpoint_url}
    kubectl.apply(json.dumps(secret(OPERATOR_SECRET, RELEASE_NAMESPACE, operator_env)))
    plane.kubelet.configure_namespace(RELEASE_NAMESPACE, rewrite=operator_rewrite)
    # 2. helm install with the README's --set values (and what this machine needs).
    values: dict[str, Any] = {}
    for expression in INSTALL_SETS:
        values.update(helm_python.parse_set_string(expression))
    values.update(replicaCount=1, reconcileIntervalSeconds=1, **free_ports())
    values["storageAllowlist"] = {
        "storage": [f"s3://{backend.bucket}"],
        "s3Endpoints": [backend.s3.endpoint_url],
    }
    config = helm_python.Config(kubeconfig_path=str(plane.kubeconfig), namespace=RELEASE_NAMESPACE)
    with config as helm:
        state.helm = helm
        try:
            started = time.monotonic()
            installed = helm.install(str(CHART), RELEASE, values, namespace=RELEASE_NAMESPACE)
            print(f"helm install: {time.monotonic() - started:.1f} s")
            state.notes = str(installed.get("notes") or "")
            yield state
        finally:
            uninstall(state)


def checkpoint_id_in(status: dict[str, Any]) -> int:
    """The last checkpoint id of a GICJob status (-1: none)."""
    return int((status.get("lastCheckpoint") or {}).get("id", -1))


def no_jobs(cluster: Cluster) -> bool:
    return not cluster.list_objects("gicjobs")


def uninstall(state: Release) -> None:
    """Delete the jobs (while the operator can still remove its finalizers), uninstall
    the release, wait for the operator's process to end, delete the job namespaces and
    the operator's Secret."""
    kubectl = state.backend.kubectl()
    kubelet = state.backend.plane.kubelet
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"teardown: {what} after {time.monotonic() - started:.1f} s")

    for cluster in state.clusters.values():
        cluster.cleanup()
    for cluster in state.clusters.values():
        try:
            cluster.wait_until(partial(no_jobs, cluster), 60, f"no GICJob in {cluster.namespace}")
        except AssertionError as exc:  # its namespace then stays Terminating
            print(exc)
    step("jobs gone")
    state.helm.uninstall(RELEASE, wait="watcher", timeout=60, ignore_not_found=True)
    step("helm uninstall")
    try:
        wait_until(
            lambda: not [p for p in kubelet.processes() if p.startswith(f"{RELEASE_NAMESPACE}/")],
            60,
            "the operator's process to end",
            interval=0.5,
        )
    except AssertionError as exc:
        print(exc)
    step("operator process ended")
    for namespace in state.clusters:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    kubectl("-n", RELEASE_NAMESPACE, "delete", "secret", OPERATOR_SECRET, check=False)


@pytest.fixture(scope="module")
def cluster(release: Release) -> InstalledCluster:
    """team-a (the suite's failure report shows it)."""
    return release.clusters[TEAM_A]


def notes_command(notes: str, start: str) -> str:
    """The command of NOTES.txt that starts with ``start`` (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", "", notes)
    found = [line.strip() for line in text.splitlines() if line.strip().startswith(start)]
    assert found, f"NOTES.txt has no command starting with {start!r}:\n{notes}"
    return found[0].split("  #")[0].strip()


def test_the_readme_installs_as_this_test_does() -> None:
    for expression in INSTALL_SETS:
        assert f"--set '{expression}'" in README or f"--set {expression}" in README, expression
    for command in (
        f"kubectl create namespace {TEAM_A}",
        f"kubectl -n {RELEASE_NAMESPACE} create secret generic {OPERATOR_SECRET}",
        f"helm install {RELEASE} charts/gic-operator -n {RELEASE_NAMESPACE}",
        f"kubectl -n {TEAM_A} apply -f examples/k8s/gicjob-s3.yaml",
        f"kubectl -n {TEAM_A} get gicjob {JOB} -w",
        f"kubectl create namespace {TEAM_B}",
        f"helm upgrade {RELEASE} charts/gic-operator -n {RELEASE_NAMESPACE} --reuse-values",
        f"--set 'watchNamespaces={{{TEAM_A},{TEAM_B}}}'",
    ):
        assert command in README, command


def test_the_release_runs_the_operator(release: Release, cluster: InstalledCluster) -> None:
    """Everything is named gic-operator; the operator pod runs as its ServiceAccount and
    watches team-a; team-a has the operator's Role and the Spark drivers' account."""
    deployment = json.loads(
        cluster.in_namespace(RELEASE_NAMESPACE, "get", "deploy", RELEASE, "-o", "json")
    )
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == RELEASE
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--namespace={TEAM_A}" in args and f"--peering={RELEASE}" in args
    cluster.in_namespace(RELEASE_NAMESPACE, "get", "serviceaccount", RELEASE)
    cluster.kubectl("get", "role", RELEASE)
    cluster.kubectl("get", "rolebinding", RELEASE, f"{RELEASE}-spark")
    cluster.kubectl("get", "serviceaccount", SPARK_ACCOUNT)
    cluster.kubectl("get", "kopfpeering", RELEASE)
    cluster.kubectl("get", "networkpolicy", f"{RELEASE}-spark-jobs")
    [pod] = cluster.wait_until(
        lambda: [p for p in cluster.operator_pods() if p["status"].get("phase") == "Running"],
        90,
        "the operator pod to run",
    )
    assert pod["spec"]["serviceAccountName"] == RELEASE
    cluster.wait_until(
        lambda: f"watching {TEAM_A} (peering: {RELEASE})" in cluster.operator_log(),
        60,
        "the operator to start watching team-a",
    )
    assert f"kubectl -n {TEAM_A} apply -f examples/k8s/gicjob-s3.yaml" in release.notes


def test_a_job_starts_in_the_watched_namespace(release: Release, cluster: InstalledCluster) -> None:
    status = release.start_job(cluster)
    assert notes_command(release.notes, f"kubectl -n {TEAM_A} get gicjob {JOB}")
    driver = cluster.get("pod", status["driverPod"])
    assert driver is not None
    assert driver["spec"]["serviceAccountName"] == SPARK_ACCOUNT
    first = checkpoint_id(cluster, JOB)
    assert wait_checkpoints(cluster, JOB, first) > first
    row = cluster.kubectl("get", "gicjob", JOB).splitlines()[1].split()
    assert row[:2] == [JOB, "Running"]


def test_an_upgrade_adds_a_namespace(release: Release, cluster: InstalledCluster) -> None:
    """NOTES.txt's two commands for another namespace: create it, helm upgrade."""
    import helm_python

    create = notes_command(release.notes, "kubectl create namespace")
    assert create == f"kubectl create namespace {TEAM_B}"
    team_b = release.job_namespace(TEAM_B)
    upgrade = notes_command(release.notes, "helm upgrade")
    assert upgrade.startswith(
        f"helm upgrade {RELEASE} charts/gic-operator -n {RELEASE_NAMESPACE} --reuse-values --set "
    ), upgrade
    expression = upgrade.rsplit("--set ", 1)[1].strip("'")
    values = helm_python.parse_set_string(expression)
    assert values == {"watchNamespaces": [TEAM_A, TEAM_B]}
    started = time.monotonic()
    release.helm.upgrade(
        str(CHART),
        RELEASE,
        {**values, **free_ports()},
        namespace=RELEASE_NAMESPACE,
        reuse_values=True,
    )
    before = cluster.status("gicjob", JOB)

    def only_the_new_operator() -> bool:
        pods = cluster.operator_pods()
        args = [p["spec"]["containers"][0]["args"] for p in pods]
        new = [a for a in args if f"--namespace={TEAM_B}" in a]
        return len(pods) == 1 and bool(new)

    team_b.wait_until(only_the_new_operator, 120, "the upgraded operator pod alone")
    team_b.wait_until(
        lambda: f"watching {TEAM_A}, {TEAM_B} (peering: {RELEASE})" in team_b.operator_log(),
        60,
        "the operator to watch team-a and team-b",
    )
    print(f"helm upgrade -> the new operator alone: {time.monotonic() - started:.1f} s")
    # team-a's job goes on, reported by the new operator: same driver, no restart.
    assert wait_checkpoints(cluster, JOB, checkpoint_id(cluster, JOB)) > checkpoint_id_in(before)
    after = cluster.status("gicjob", JOB)
    assert after["phase"] == "Running"
    assert (after["driverPod"], after.get("restarts", 0)) == (
        before["driverPod"],
        before.get("restarts", 0),
    )
    # Its driver leaves the machine's two cores to team-b's (the teardown waits for it).
    cluster.kubectl("delete", "gicjob", JOB, "--wait=false")
    team_b.kubectl("get", "serviceaccount", SPARK_ACCOUNT)
    team_b.kubectl("get", "role,rolebinding", RELEASE)
    status = release.start_job(team_b)
    driver = team_b.get("pod", status["driverPod"])
    assert driver is not None and driver["spec"]["serviceAccountName"] == SPARK_ACCOUNT


def test_the_operator_was_never_refused(release: Release, cluster: InstalledCluster) -> None:
    """No 403 in the operator pods' logs, no Event in the namespaces about one."""
    assert_operator_never_refused(cluster)
    for namespace in [RELEASE_NAMESPACE, *release.clusters]:
        events = json.loads(cluster.in_namespace(namespace, "get", "events", "-o", "json"))
        refused = [
            f"{(e.get('involvedObject') or {}).get('name')}: {e.get('reason')}: {e.get('message')}"
            for e in events.get("items") or []
            if re.search(r"\b403\b|forbidden", str(e.get("message")), re.IGNORECASE)
        ]
        assert refused == [], namespace
