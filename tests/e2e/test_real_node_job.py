"""The whole scenario on the real node: the chart's operator image and the Spark image
running as containers, a GICJob through savepoint, driver crash and deletion.

On the session's test control plane, a module of its own starts a real node
(:mod:`tests.e2e.real_node`: the pinned kubelet, containerd and runc, kube-proxy, CoreDNS)
and imports the two images ``make images`` builds (``localhost/gic-operator:<version>``
and ``localhost/gic-spark:<version>``, exported with ``images/podman.sh save --format
oci-archive``) into its image store; SeaweedFS is put on the node's bridge address
(``node.network.expose``), the S3 endpoint of the job and of the operator. Then, in file
order, each test acting on what the previous one left:

1. ``helm install`` of ``charts/gic-operator`` (release ``gic-operator-node`` in
   ``gic-node-system``, watching ``e2e-node-job``, both namespaces enforcing the
   ``restricted`` Pod Security standard) with the operator image, ``imagePullPolicy:
   Never``, one replica, and the chart's ``tolerations``/``nodeSelector`` values placing
   it on the node: the operator runs as a container there, reaching the API server
   through the ``kubernetes`` Service;
2. a GICJob running ``examples/rate_count.py`` from the Spark image on the default
   ``k8s://https://kubernetes.default.svc`` master, its ``driver.podTemplate`` and
   ``executor.podTemplate`` tolerating the node's taint and selecting it: the driver pod
   runs as a container, Spark's Kubernetes backend creates the executor pod, which runs
   as a container too, runs the batches' tasks, and the job checkpoints;
3. ``kubectl annotate gicjob/... gic.io/savepoint=<nonce>``: the Savepoint completes,
   with files in S3;
4. the driver container SIGKILLed through containerd (``ctr tasks kill``, a crash as the
   node sees it): the operator recovers the job, higher epoch, a new driver and new
   executors, output exact;
5. ``kubectl delete gicjob``: the garbage collector removes every pod, Service,
   ConfigMap, Secret and NetworkPolicy the job owned (the executors through their driver
   pod), and their containers stop on the node;
6. nothing the operator did was refused (its container's log, the namespaces' events).

Every step's time is recorded (printed by the e2e suite's timing summary and by the last
test). The process kubelet stays the fast suite's node: see ``tests/e2e/README.md``.

Skipped against a real cluster; fails when the machine cannot run a real node (not root,
containerd, runc or the CNI plugins missing); skipped when the images are not built
(failed under CI, where ``make test`` builds them first).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.storage.uri import StoreResolver

from ..controlplane.cluster import ControlPlane
from ..images.podman import image_ref, missing_images, podman
from .chart import CHART
from .checks import list_uris
from .cluster import Cluster, JobDefaults, Place
from .controlplane_backend import ControlPlaneBackend
from .helpers import assert_exact_output, assert_operator_never_refused, wait_checkpoints
from .real_node import (
    TOLERATION,
    RealNode,
)
from .real_node_fixture import checked_node, require_real_node
from .timings import measure_recovery, measure_savepoint

pytestmark = [
    pytest.mark.slow,
    pytest.mark.controlplane,
    pytest.mark.skipif(
        bool(os.environ.get("GIC_E2E_KUBECONFIG")), reason="test control plane only"
    ),
]

RELEASE = "gic-operator-node"
RELEASE_NAMESPACE = "gic-node-system"
NAMESPACE = "e2e-node-job"
OPERATOR_SECRET = "gic-operator-node-s3"
JOB_SECRET = "gic-s3-credentials"
JOB = "rate-node"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
ENFORCE = "pod-security.kubernetes.io/enforce"
MAIN_FILE = "local:///opt/gic/examples/rate_count.py"
SPARK_CONF = {
    # The default master: k8s://https://kubernetes.default.svc (executors are pods).
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    # The node has 2 CPUs: the driver asks 1, the operator 0.1, the executor this.
    "spark.kubernetes.executor.request.cores": "250m",
}
#: Deadlines (seconds, times GIC_E2E_TIMEOUT_SCALE): JVMs start in containers on 2 cores.
START_TIMEOUT = 300
#: Step -> seconds, in the order measured; printed by the last test.
STEPS: dict[str, float] = {}


def _record(timings: list[tuple[str, float]], step: str, seconds: float) -> None:
    STEPS[step] = seconds
    timings.append((f"real node job: {step}", seconds))
    print(f"{step}: {seconds:.1f} s")


def _secret(name: str, namespace: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def _placement(node: RealNode) -> dict[str, Any]:
    """What puts a pod on the real node: its taint tolerated, its hostname selected."""
    return {"tolerations": [TOLERATION], "nodeSelector": {"kubernetes.io/hostname": node.name}}


def _container_id(pod: dict[str, Any]) -> str:
    """The containerd id of the pod's first container ("" before it started)."""
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    return str(statuses[0].get("containerID") or "").removeprefix("containerd://")


class NodeJobCluster(Cluster):
    """The job namespace; the operator is the chart's pod on the real node, drivers and
    executors are containers there."""

    mode = "real-node"

    def __init__(self, place: Place, *, node: RealNode, admin: ControlPlaneBackend) -> None:
        super().__init__(place)
        self.node = node
        self.admin = admin

    def operator_pods(self) -> list[dict[str, Any]]:
        return self.pods_in(RELEASE_NAMESPACE, SELECTOR)

    def operator_log(self) -> str:
        """The operator containers' logs (through the API server and the kubelet)."""
        return "\n".join(
            self.in_namespace(RELEASE_NAMESPACE, "logs", pod["metadata"]["name"], check=False)
            for pod in self.operator_pods()
        )

    def kill_driver(self, pod: str) -> None:
        """SIGKILL the driver's container through containerd: the process dies at once,
        the kubelet reports the container terminated (exit 137) and the pod Failed."""
        found = self.get("pod", pod) or {}
        container = _container_id(found)
        assert container, f"driver pod {pod} has no running container: {found.get('status')}"
        self.node.ctr("tasks", "kill", "--signal", "SIGKILL", container)

    def executor_pods(self, job: str) -> list[dict[str, Any]]:
        return self.list_objects("pods", f"gic.io/job={job},gic.io/role=executor")


@dataclasses.dataclass
class Scenario:
    node: RealNode
    cluster: NodeJobCluster
    s3_endpoint: str
    helm: Any = None


@pytest.fixture(scope="module")
def node(
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    timings: list[tuple[str, float]],
) -> Iterator[RealNode]:
    """A real node with the two images in its store; everything of it gone afterwards."""
    require_real_node(request)
    absent = missing_images()
    if absent:
        message = f"images not built: {', '.join(absent)} (make images builds them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    archives = tmp_path_factory.mktemp("node-images")
    started = time.monotonic()
    exported = []
    for name in ("operator", "spark"):
        archive = archives / f"gic-{name}.tar"
        podman("save", "--format", "oci-archive", "-o", str(archive), image_ref(name), timeout=900)
        exported.append(archive)
    _record(timings, "podman save (both images, OCI archives)", time.monotonic() - started)
    with checked_node(control_plane, tmp_path_factory.mktemp("realnode-job")) as real:
        _record(timings, "real node start -> Ready", real.startup_seconds)
        started = time.monotonic()
        for archive in exported:
            real.import_image(archive)
        _record(timings, "ctr import (both images)", time.monotonic() - started)
        for archive in exported:
            archive.unlink()
        assert {image_ref("operator"), image_ref("spark")} <= set(real.images())
        yield real


@pytest.fixture(scope="module")
def scenario(
    e2e_backend: ControlPlaneBackend,
    node: RealNode,
    s3_server: TestingS3Server,
    timings: list[tuple[str, float]],
) -> Iterator[Scenario]:
    """The namespaces, the Secrets and the chart installed with the operator image."""
    import helm_python

    backend = e2e_backend
    assert node.network is not None
    s3_endpoint = "http://" + node.network.expose(int(s3_server.endpoint_url.rsplit(":", 1)[1]))
    settings = s3_server.settings
    credentials = {
        "AWS_ACCESS_KEY_ID": settings.access_key_id or "",
        "AWS_SECRET_ACCESS_KEY": settings.secret_access_key or "",
        "AWS_REGION": settings.region or "us-east-1",
    }
    kubectl = backend.kubectl()
    backend.create_namespace(NAMESPACE)
    backend.create_namespace(RELEASE_NAMESPACE)
    operator_env = {**credentials, "GIC_S3_ENDPOINT_URL": s3_endpoint}
    kubectl.apply(json.dumps(_secret(OPERATOR_SECRET, RELEASE_NAMESPACE, operator_env)))
    kubectl.apply(json.dumps(_secret(JOB_SECRET, NAMESPACE, credentials)))
    defaults = JobDefaults(
        image=image_ref("spark"),
        main_file=MAIN_FILE,
        storage=f"s3://{backend.bucket}/node-gic",
        output_root=f"s3://{backend.bucket}/node-output",
        credentials_secret=JOB_SECRET,
        s3_endpoint_url=s3_endpoint,
        spark_conf=SPARK_CONF,
    )
    place = Place(
        namespace=NAMESPACE,
        kubectl=kubectl,
        resolver=StoreResolver(settings),  # the test reads S3 on loopback
        defaults=defaults,
        workdir=backend.workdir / NAMESPACE,
    )
    cluster = NodeJobCluster(place, node=node, admin=backend)
    repository, tag = image_ref("operator").rsplit(":", 1)
    values: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "replicaCount": 1,
        "reconcileIntervalSeconds": 1,
        "watchNamespaces": [NAMESPACE],
        "storageCredentials": {"secretName": OPERATOR_SECRET},
        "storageAllowlist": {"storage": [f"s3://{backend.bucket}"], "s3Endpoints": [s3_endpoint]},
        **_placement(node),
    }
    state = Scenario(node=node, cluster=cluster, s3_endpoint=s3_endpoint)
    config = helm_python.Config(
        kubeconfig_path=str(backend.plane.kubeconfig), namespace=RELEASE_NAMESPACE
    )
    with config as helm:
        state.helm = helm
        started = time.monotonic()
        helm.install(str(CHART), RELEASE, values, namespace=RELEASE_NAMESPACE)
        _record(timings, "helm install", time.monotonic() - started)
        try:
            yield state
        finally:
            # The jobs and Savepoints first, while the operator can remove its finalizers.
            cluster.cleanup()
            try:
                cluster.wait_until(
                    lambda: not cluster.list_objects("gicjobs"), 90, f"no GICJob in {NAMESPACE}"
                )
            except AssertionError as exc:  # the namespace then stays Terminating
                print(exc)
            helm.uninstall(RELEASE, wait="watcher", timeout=90, ignore_not_found=True)
            for namespace in (NAMESPACE, RELEASE_NAMESPACE):
                kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def cluster(scenario: Scenario) -> NodeJobCluster:
    """The job namespace (the suite's failure report shows it)."""
    return scenario.cluster


def _on_the_node(pod: dict[str, Any], node: RealNode, image: str) -> None:
    """The pod runs on the real node as a container of ``image``, meeting restricted."""
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == node.name, name
    assert pod["spec"]["containers"][0]["image"] == image, name
    container = _container_id(pod)
    assert container, (name, pod["status"])
    assert container in node.ctr("containers", "list", "--quiet").split(), name
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, name
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
    context = pod["spec"]["containers"][0]["securityContext"]
    assert context["allowPrivilegeEscalation"] is False, name
    assert context["capabilities"]["drop"] == ["ALL"], name


def test_the_chart_runs_the_operator_image_on_the_node(
    scenario: Scenario, cluster: NodeJobCluster, timings: list[tuple[str, float]]
) -> None:
    started = time.monotonic()
    [pod] = cluster.wait_until(
        lambda: [
            p
            for p in cluster.operator_pods()
            if p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}])
        ],
        180,
        "the operator pod Running and ready on the real node",
    )
    _record(timings, "operator pod Running and ready", time.monotonic() - started)
    _on_the_node(pod, scenario.node, image_ref("operator"))
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == RELEASE
    cluster.wait_until(
        lambda: f"watching {NAMESPACE} (peering: gic-operator)" in cluster.operator_log(),
        90,
        f"the operator to watch {NAMESPACE}",
    )
    for namespace in (NAMESPACE, RELEASE_NAMESPACE):
        labels = json.loads(cluster.in_namespace(namespace, "get", "ns", namespace, "-o", "json"))
        assert labels["metadata"]["labels"][ENFORCE] == "restricted"


def test_the_job_runs_driver_and_executors_as_containers(
    scenario: Scenario, cluster: NodeJobCluster, timings: list[tuple[str, float]]
) -> None:
    placement = _placement(scenario.node)
    manifest = cluster.job_manifest(
        JOB,
        extra_spec={
            "application": {
                "imagePullPolicy": "Never",
                "driver": {"podTemplate": placement},
                "executor": {"instances": 1, "memory": "512m", "podTemplate": placement},
            }
        },
    )
    started = time.monotonic()
    cluster.apply(manifest)
    cluster.wait(f"gicjob/{JOB}", "jsonpath={.status.phase}=Running", START_TIMEOUT)
    _record(timings, "apply -> job Running", time.monotonic() - started)
    status = cluster.status("gicjob", JOB)
    driver = cluster.get("pod", status["driverPod"]) or {}
    _on_the_node(driver, scenario.node, image_ref("spark"))
    command = " ".join(driver["spec"]["containers"][0]["command"])
    assert "--master k8s://https://kubernetes.default.svc" in command

    executor = cluster.wait_until(
        lambda: next(
            (p for p in cluster.executor_pods(JOB) if p["status"].get("phase") == "Running"), None
        ),
        START_TIMEOUT,
        "an executor pod Running",
    )
    _record(timings, "apply -> executor pod Running", time.monotonic() - started)
    _on_the_node(executor, scenario.node, image_ref("spark"))
    [owner] = executor["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", status["driverPod"])
    assert executor["spec"]["containers"][0]["args"] == ["executor"]
    assert executor["spec"]["automountServiceAccountToken"] is False
    assert executor["spec"]["securityContext"]["runAsNonRoot"] is True
    # The RPC key reaches the executor from the job's Secret, never in clear in its spec.
    env = {e["name"]: e for e in executor["spec"]["containers"][0]["env"]}
    assert "value" not in env["_SPARK_AUTH_SECRET"]
    assert env["_SPARK_AUTH_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "executor-key"

    cluster.wait(f"gicjob/{JOB}", "jsonpath={.status.lastCheckpoint.id}", START_TIMEOUT)
    _record(timings, "apply -> first checkpoint", time.monotonic() - started)
    first = int(cluster.status("gicjob", JOB)["lastCheckpoint"]["id"])
    wait_checkpoints(cluster, JOB, first + 1, 180)
    name = executor["metadata"]["name"]
    cluster.wait_until(
        lambda: "Running task" in cluster.pod_log(name), 120, f"tasks in executor {name}'s log"
    )
    assert_exact_output(cluster, JOB)


def test_a_savepoint_by_annotation_completes(
    cluster: NodeJobCluster, timings: list[tuple[str, float]]
) -> None:
    cluster.wait(f"gicjob/{JOB}", "jsonpath={.status.phase}=Running", 60)
    measured = measure_savepoint(cluster, JOB, "node1", timeout=240)
    _record(timings, "annotate -> Savepoint Completed", measured.seconds)
    status = measured.status
    assert status["state"] == "Completed"
    assert status["path"].startswith(cluster.defaults.storage + "/savepoints/")
    assert list_uris(cluster.storage, status["path"]), status["path"]


def test_a_killed_driver_is_recovered(
    cluster: NodeJobCluster, timings: list[tuple[str, float]]
) -> None:
    before = cluster.status("gicjob", JOB)
    assert before["phase"] == "Running"
    old_executors = {p["metadata"]["name"] for p in cluster.executor_pods(JOB)}
    measured = measure_recovery(cluster, JOB, timeout=START_TIMEOUT)
    _record(timings, "driver container killed -> new driver Running", measured.running_s)
    _record(timings, "driver container killed -> next checkpoint", measured.checkpoint_s)
    after = cluster.status("gicjob", JOB)
    assert after["epoch"] > before["epoch"]
    assert after["restarts"] == int(before.get("restarts") or 0) + 1
    assert "DriverFailed" in cluster.event_reasons(JOB)
    driver = cluster.get("pod", after["driverPod"]) or {}
    _on_the_node(driver, cluster.node, image_ref("spark"))

    def new_executor() -> dict[str, Any] | None:
        return next(
            (
                p
                for p in cluster.executor_pods(JOB)
                if p["status"].get("phase") == "Running"
                and p["metadata"]["name"] not in old_executors
                and p["metadata"]["ownerReferences"][0]["name"] == after["driverPod"]
            ),
            None,
        )

    executor = cluster.wait_until(new_executor, START_TIMEOUT, "an executor of the new driver")
    _on_the_node(executor, cluster.node, image_ref("spark"))
    wait_checkpoints(cluster, JOB, measured.last_checkpoint_before + 2, 180)
    assert [p["metadata"]["name"] for p in cluster.driver_pods(JOB)] == [after["driverPod"]]
    assert_exact_output(cluster, JOB)


OWNED_KINDS = ("pods", "services", "configmaps", "secrets", "networkpolicies")


def _owned_by(cluster: NodeJobCluster, uids: set[str]) -> dict[tuple[str, str], str]:
    """(kind, name) -> uid of every object of :data:`OWNED_KINDS` in the namespace owned by
    one of ``uids``, followed down (executors are owned by the driver pod)."""
    objects = {kind: cluster.list_objects(kind) for kind in OWNED_KINDS}
    found: dict[tuple[str, str], str] = {}
    owners = set(uids)
    grew = True
    while grew:
        grew = False
        for kind, items in objects.items():
            for item in items:
                meta = item["metadata"]
                refs = {r["uid"] for r in meta.get("ownerReferences") or []}
                if refs & owners and (kind, meta["name"]) not in found:
                    found[(kind, meta["name"])] = meta["uid"]
                    owners.add(meta["uid"])
                    grew = True
    return found


def test_deleting_the_job_collects_everything(
    cluster: NodeJobCluster, timings: list[tuple[str, float]]
) -> None:
    job = cluster.get("gicjob", JOB) or {}
    owned = _owned_by(cluster, {job["metadata"]["uid"]})
    kinds = {kind for kind, _ in owned}
    # Driver and executor pods, the driver's Service, the executor template, the job's
    # Spark authentication and control Secrets.
    assert {"pods", "services", "configmaps", "secrets"} <= kinds, sorted(owned)
    pods = [cluster.get("pod", name) or {} for kind, name in owned if kind == "pods"]
    roles = {p["metadata"]["labels"].get("gic.io/role") for p in pods if p}
    assert {"driver", "executor"} <= roles, sorted(owned)
    containers = {_container_id(p) for p in pods if p and _container_id(p)}

    started = time.monotonic()
    cluster.kubectl("delete", "gicjob", JOB, "--wait=false")

    def left() -> list[tuple[str, str]]:
        remaining = []
        for kind, name in owned:
            found = cluster.get(kind, name)
            if found is not None and found["metadata"]["uid"] == owned[(kind, name)]:
                remaining.append((kind, name))
        if cluster.get("gicjob", JOB) is not None:
            remaining.append(("gicjobs", JOB))
        return remaining

    cluster.wait_until(lambda: not left(), 180, "the job and everything it owned to be gone")
    _record(timings, "delete -> everything collected", time.monotonic() - started)

    def running_tasks() -> set[str]:
        lines = cluster.node.ctr("tasks", "list").splitlines()[1:]
        return {line.split()[0] for line in lines if line.split()} & containers

    cluster.wait_until(lambda: not running_tasks(), 60, "the job's containers to stop")
    _record(timings, "delete -> containers stopped on the node", time.monotonic() - started)
    # The Savepoint stays (it is not owned by the job), as on any cluster.
    assert cluster.get("savepoint", f"{JOB}-sp-node1") is not None


def test_the_operator_was_never_refused(cluster: NodeJobCluster) -> None:
    assert_operator_never_refused(cluster)
    for namespace in (NAMESPACE, RELEASE_NAMESPACE):
        events = json.loads(cluster.in_namespace(namespace, "get", "events", "-o", "json"))
        refused = [
            f"{(e.get('involvedObject') or {}).get('name')}: {e.get('reason')}: {e.get('message')}"
            for e in events.get("items") or []
            if "forbidden" in str(e.get("message")).lower()
        ]
        assert refused == [], namespace
    print("\nthe scenario on the real node, step by step:")
    for step, seconds in STEPS.items():
        print(f"  {step}: {seconds:.1f} s")
