"""Reconcile latency benchmark: the GICJob reconciler over many jobs, through a real API.

Setup: a real Kubernetes control plane (:class:`tests.controlplane.cluster.ControlPlane`:
etcd, kube-apiserver, controller manager, scheduler, one process-kubelet Node, which is
cordoned so that the driver pods the reconciler creates stay Pending and nothing runs
them), the CRDs of ``crds/`` created through the API and established, the ``gic-spark``
ServiceAccount the driver pods name, and ``jobs`` GICJobs in one namespace, each with
file storage under a temporary directory holding a driver's status record
(:func:`gic_runtime.status.write_status`, with a recent checkpoint), so every reconcile
reads real storage. The reconciler is the operator's own:
:class:`~gic_operator.jobs.job_controller.JobController` on
:class:`~gic_operator.kube.kube_client.KubernetesApi` with
:func:`~gic_operator.storage.job_storage.open_job_storage`.

Passes, each reconciling every job once:

``launch``
    first reconcile: a fencing epoch is chosen, the driver's service and pod are created,
    the status is patched and a ``DriverLaunched`` event posted;
``running``
    after every pod was marked ``Running`` through the API (``pods/status``): the status
    moves to ``Running`` (one patch, one event);
``steady``
    ``steady_passes`` passes in which nothing changes: what a timer-driven reconcile of a
    healthy job costs.

The whole sequence runs twice, in two namespaces: once with the reconciles one after
another (``sequential``), once on a pool of ``threads`` threads (``pool``: what kopf's
executor does with sync handlers). Each reconcile's latency is its own wall time inside
the worker (no queueing); each pass's wall time is from the first submit to the last
result. After each pass the API is checked (pods created, phases), and a mismatch
raises :class:`ReconcileBenchmarkError`.

Thread-safety: :func:`measure` is called from one thread and uses its own pool.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from bench.common import percentile, quick_mode
from gic_operator.jobs.job_controller import JobController
from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.kube.naming import job_id
from gic_operator.models import API_VERSION, GROUP, VERSION
from gic_operator.models.gicjob import SPARK_SERVICE_ACCOUNT
from gic_operator.storage.job_storage import open_job_storage
from gic_runtime.status import CheckpointStatus, JobState, JobStatus, write_status
from gic_runtime.storage.uri import StoreResolver

CRDS = Path(__file__).resolve().parents[1] / "crds"
FULL_JOBS = 200
QUICK_JOBS = 20
STEADY_PASSES = 5
THREADS = 4

Log = Callable[[str], None]


class ReconcileBenchmarkError(RuntimeError):
    """The reconciler did not do what the pass expects (pods, phases)."""


@dataclasses.dataclass(frozen=True)
class ReconcileParams:
    """Jobs per namespace, steady passes, and the pool size of the threaded run."""

    jobs: int
    steady_passes: int = STEADY_PASSES
    threads: int = THREADS
    quick: bool = False


def params_from_env(environ: Mapping[str, str] | None = None) -> ReconcileParams:
    """200 jobs, or 20 with ``GIC_BENCH_QUICK=1``."""
    quick = quick_mode(environ)
    return ReconcileParams(jobs=QUICK_JOBS if quick else FULL_JOBS, quick=quick)


def latency_stats(seconds: list[float]) -> dict[str, float]:
    """``n``, mean and p50/p95/p99/max of per-reconcile latencies, in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "mean_ms": round(statistics.fmean(ms), 2) if ms else float("nan"),
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2) if ms else float("nan"),
    }


class Cluster:
    """The kubernetes client, the CRDs and the operator's API seam for one benchmark."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes.config import new_client_from_config

        config = str(kubeconfig)
        self.client = new_client_from_config(config_file=config)  # type: ignore[no-untyped-call]
        self.api = KubernetesApi(self.client, request_timeout_s=30)

    def close(self) -> None:
        self.client.close()

    def install_crds(self) -> list[str]:
        """Create every CRD in ``crds/`` through the API; return their names."""
        from kubernetes.client import ApiextensionsV1Api

        ext = ApiextensionsV1Api(self.client)
        names = []
        for path in sorted(CRDS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    ext.create_custom_resource_definition(doc)
                    names.append(str(doc["metadata"]["name"]))
        deadline = time.monotonic() + 60
        for name in names:  # custom objects can be created once their CRD is Established
            while not self._established(ext, name):
                if time.monotonic() > deadline:
                    raise ReconcileBenchmarkError(f"CRD {name} not Established after 60 s")
                time.sleep(0.1)
        return names

    @staticmethod
    def _established(ext: Any, name: str) -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    def create_namespace(self, name: str) -> None:
        """The namespace, with the ServiceAccount driver pods run as (the API server
        refuses pods naming an account that does not exist)."""
        from kubernetes.client import CoreV1Api, V1Namespace, V1ObjectMeta, V1ServiceAccount

        core = CoreV1Api(self.client)
        core.create_namespace(V1Namespace(metadata=V1ObjectMeta(name=name)))
        account = V1ServiceAccount(metadata=V1ObjectMeta(name=SPARK_SERVICE_ACCOUNT))
        core.create_namespaced_service_account(name, account)

    def create_job(self, namespace: str, name: str, storage: str) -> None:
        from kubernetes.client import CustomObjectsApi

        body = {
            "apiVersion": API_VERSION,
            "kind": "GICJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "application": {"image": "gic-spark:bench", "mainFile": "local:///opt/job.py"},
                "checkpointing": {"storage": storage, "buckets": 8},
            },
        }
        CustomObjectsApi(self.client).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "gicjobs", body
        )

    def jobs(self, namespace: str) -> list[dict[str, Any]]:
        return self.api.list_objects("gicjobs", namespace)

    def mark_pods_running(self, namespace: str) -> int:
        """Patch every pod's status to ``Running`` (the kubelet's part); return how many."""
        from kubernetes.client import CoreV1Api

        core = CoreV1Api(self.client)
        names = [
            str(pod.metadata.name)
            for pod in core.list_namespaced_pod(namespace).items
            if pod.metadata
        ]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "phase": "Running",
                "startTime": now,
                "containerStatuses": [
                    {
                        "name": "driver",
                        "ready": True,
                        "restartCount": 0,
                        "image": "gic-spark:bench",
                        "imageID": "",
                        "state": {"running": {"startedAt": now}},
                    }
                ],
            }
        }
        for name in names:
            core.patch_namespaced_pod_status(
                name,
                namespace,
                status,
                _content_type="application/merge-patch+json",
            )
        return len(names)


def _write_statuses(root: Path, namespace: str, names: list[str]) -> None:
    resolver = StoreResolver()
    now = time.time()
    for name in names:
        jid = job_id(namespace, name)
        status = JobStatus(
            job_id=jid,
            epoch=1,
            state=JobState.RUNNING,
            updated_at=now,
            started_at=now - 60,
            batches=12,
            last_checkpoint=CheckpointStatus(
                id=11, created_at=now - 1, duration_ms=42.0, bytes_uploaded=65_536
            ),
        )
        write_status(resolver, root.as_uri(), jid, status)


def _run_pass(
    reconciler: JobController, namespace: str, names: list[str], pool: ThreadPoolExecutor | None
) -> tuple[list[float], float, int]:
    """Reconcile every job once; ``(latencies_s, wall_s, patches_sent)``."""

    def one(name: str) -> tuple[float, bool]:
        t0 = time.perf_counter()
        patch = reconciler.reconcile_named(namespace, name)
        return time.perf_counter() - t0, bool(patch)

    t0 = time.perf_counter()
    results = list(pool.map(one, names)) if pool is not None else [one(n) for n in names]
    wall = time.perf_counter() - t0
    return [r[0] for r in results], wall, sum(1 for r in results if r[1])


def _expect(cluster: Cluster, namespace: str, phase: str, jobs: int) -> None:
    bodies = cluster.jobs(namespace)
    phases = [(b.get("status") or {}).get("phase") for b in bodies]
    pods = cluster.api.list_pods(namespace, {})
    if len(bodies) != jobs or phases.count(phase) != jobs or len(pods) != jobs:
        raise ReconcileBenchmarkError(
            f"{namespace}: expected {jobs} jobs in phase {phase} with one pod each, found "
            f"{len(bodies)} jobs, phases {sorted(set(map(str, phases)))}, {len(pods)} pods"
        )


def run_mode(
    cluster: Cluster,
    storage_dir: Path,
    namespace: str,
    params: ReconcileParams,
    *,
    threads: int,
    log: Log = print,
) -> dict[str, Any]:
    """Create the jobs of one namespace and run the launch, running and steady passes."""
    cluster.create_namespace(namespace)
    root = storage_dir / namespace
    root.mkdir(parents=True)
    names = [f"job-{i:04d}" for i in range(params.jobs)]
    for name in names:
        cluster.create_job(namespace, name, root.as_uri())
    _write_statuses(root, namespace, names)
    reconciler = JobController(cluster.api, open_job_storage)
    pool = ThreadPoolExecutor(threads, thread_name_prefix="bench-rec") if threads > 1 else None
    passes: list[dict[str, Any]] = []
    latencies: dict[str, list[float]] = {"launch": [], "running": [], "steady": []}
    try:
        plan = ["launch", "running"] + ["steady"] * params.steady_passes
        for number, kind in enumerate(plan):
            if kind == "running":
                marked = cluster.mark_pods_running(namespace)
                if marked != params.jobs:
                    raise ReconcileBenchmarkError(f"{marked} pods to mark, not {params.jobs}")
            lat, wall, patches = _run_pass(reconciler, namespace, names, pool)
            latencies[kind] += lat
            passes.append(
                {"pass": number, "kind": kind, "wall_s": round(wall, 3), "status_patches": patches}
            )
            stats = latency_stats(lat)
            log(
                f"  {namespace} pass {number} ({kind}): {wall:.2f} s wall, p50 "
                f"{stats['p50_ms']:.1f} ms, p99 {stats['p99_ms']:.1f} ms, {patches} patches"
            )
            _expect(cluster, namespace, "Deploying" if kind == "launch" else "Running", params.jobs)
    finally:
        if pool is not None:
            pool.shutdown()
    walls = {kind: [p["wall_s"] for p in passes if p["kind"] == kind] for kind in latencies}
    return {
        "threads": threads,
        "latency": {kind: latency_stats(values) for kind, values in latencies.items()},
        "pass_wall_s": {
            kind: {"mean": round(statistics.fmean(ws), 3), "max": round(max(ws), 3)}
            for kind, ws in walls.items()
        },
        "passes": passes,
    }


def measure(params: ReconcileParams, log: Log = print) -> dict[str, Any]:
    """Run the benchmark sequentially and on a pool (module doc); return the results."""
    from tests.controlplane.cluster import ControlPlane, build_binaries, missing_binaries

    if missing_binaries():
        build_binaries()
    with tempfile.TemporaryDirectory(prefix="gic-bench-reconcile-") as tmp:
        base = Path(tmp)
        with ControlPlane(base / "controlplane") as plane:
            plane.kubectl("cordon", plane.node_name)
            cluster = Cluster(plane.kubeconfig)
            try:
                crds = cluster.install_crds()
                storage = base / "storage"
                modes = {
                    "sequential": run_mode(
                        cluster, storage, "bench-seq", params, threads=1, log=log
                    ),
                    "pool": run_mode(
                        cluster, storage, "bench-pool", params, threads=params.threads, log=log
                    ),
                }
            finally:
                cluster.close()
            version, started = plane.version, plane.startup_seconds
    return {
        "jobs": params.jobs,
        "steady_passes": params.steady_passes,
        "threads": params.threads,
        "crds": crds,
        "api": f"Kubernetes {version} kube-apiserver (tests/controlplane, admin client "
        "certificate), etcd without fsync, node cordoned (driver pods stay Pending)",
        "control_plane_start_s": round(started, 1),
        "storage": "file:// (local disk), one status record per job",
        "modes": modes,
    }
