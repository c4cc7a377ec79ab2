"""Real-cluster mode: the suite against a cluster where the operator was installed by Helm.

Selected by ``GIC_E2E_KUBECONFIG``; see ``tests/e2e/README.md`` for the set-up. Read from
the environment:

* ``GIC_E2E_KUBECONFIG`` - kubeconfig of the cluster (kind, k3d, ...);
* ``GIC_E2E_IMAGE`` - the Spark runtime image with ``rate_count.py`` in it;
* ``GIC_E2E_MAIN_FILE`` - its path in the image (default ``local:///opt/app/rate_count.py``);
* ``GIC_E2E_STORAGE`` - ``s3://bucket/prefix``; each run uses a fresh prefix below it;
* ``GIC_E2E_CREDENTIALS_SECRET`` - the Secret with the S3 keys in the test namespace;
* ``GIC_E2E_S3_ENDPOINT_URL`` - S3 endpoint as the pods reach it (unset: AWS);
* ``GIC_E2E_NAMESPACE`` - the namespace the operator watches (default ``gic-e2e``);
* ``GIC_E2E_OPERATOR_NAMESPACE`` / ``GIC_E2E_OPERATOR_SELECTOR`` - where the operator's
  pods run and their labels (default ``gic-system`` / ``app.kubernetes.io/name=gic-operator``).

The test process reads the storage with ``AWS_*`` and ``GIC_S3_ENDPOINT_URL`` from its own
environment (the endpoint as the test machine reaches it).

Every module shares the one namespace (the chart set up its Spark service account and
RBAC there); each module removes its GICJobs and Savepoints when it ends. Stopping the
operator scales its Deployment to zero and force-deletes its pods (a crash); starting it
scales it back and waits for a Ready pod.

Thread-safety: used from the test thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver, join

from .cluster import Cluster, JobDefaults, Place
from .kubectl import Kubectl


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name) or default
    if not value:
        raise RuntimeError(f"{name} must be set to run the e2e tests against a real cluster")
    return value


class RealCluster(Cluster):
    """The test namespace of a real cluster (see the module doc)."""

    mode = "real"

    def __init__(self, place: Place, *, operator_namespace: str, operator_selector: str) -> None:
        super().__init__(place)
        self.operator_namespace = operator_namespace
        self.operator_selector = operator_selector
        self._replicas = 1

    def _operator_kubectl(self, *args: str, timeout: float = 120.0) -> str:
        result = self._kubectl(
            "-n", self.operator_namespace, *args, check=False, timeout=timeout * self.scale
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def kill_driver(self, pod: str) -> None:
        self.kubectl("delete", "pod", pod, "--force", "--grace-period=0", "--wait=false")

    def stop_operator(self) -> None:
        sel = self.operator_selector
        deployments = json.loads(self._operator_kubectl("get", "deploy", "-l", sel, "-o", "json"))
        replicas = [int(d["spec"].get("replicas") or 1) for d in deployments.get("items") or []]
        self._replicas = max(replicas or [1])
        self._operator_kubectl("scale", "deploy", "-l", sel, "--replicas=0")
        self._operator_kubectl(
            "delete", "pod", "-l", sel, "--force", "--grace-period=0", "--ignore-not-found"
        )

    def start_operator(self) -> None:
        sel = self.operator_selector
        self._operator_kubectl("scale", "deploy", "-l", sel, f"--replicas={self._replicas}")
        self.wait_until(
            lambda: self._operator_kubectl("get", "pod", "-l", sel, "-o", "name").strip(),
            120,
            "an operator pod to exist",
        )
        self._operator_kubectl(
            "wait",
            "pod",
            "-l",
            sel,
            "--for=condition=Ready",
            f"--timeout={round(180 * self.scale)}s",
            timeout=240,
        )

    def operator_log(self) -> str:
        result = self._kubectl(
            "-n",
            self.operator_namespace,
            "logs",
            "-l",
            self.operator_selector,
            "--tail=400",
            "--prefix",
            check=False,
            timeout=60,
        )
        return result.stdout + result.stderr


class RealBackend:
    """The real cluster of this run (see the module doc)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.kubeconfig = Path(_env("GIC_E2E_KUBECONFIG"))
        self.namespace = _env("GIC_E2E_NAMESPACE", "gic-e2e")
        run = f"e2e-{uuid.uuid4().hex[:10]}"
        self.storage_root = join(_env("GIC_E2E_STORAGE").rstrip("/"), run)
        self.defaults = JobDefaults(
            image=_env("GIC_E2E_IMAGE"),
            main_file=_env("GIC_E2E_MAIN_FILE", "local:///opt/app/rate_count.py"),
            storage=join(self.storage_root, "gic"),
            output_root=join(self.storage_root, "output"),
            credentials_secret=_env("GIC_E2E_CREDENTIALS_SECRET"),
            s3_endpoint_url=os.environ.get("GIC_E2E_S3_ENDPOINT_URL") or None,
            spark_conf={"spark.sql.shuffle.partitions": "2"},
        )

    def __enter__(self) -> RealBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def kubectl(self) -> Kubectl:
        return Kubectl(self.kubeconfig, self.workdir / "kubectl-cache")

    @contextlib.contextmanager
    def open(self, namespace_hint: str) -> Iterator[RealCluster]:
        """The run's namespace (``namespace_hint`` is not used: one namespace for all),
        cleaned of the module's resources on exit."""
        del namespace_hint
        home = self.workdir / self.namespace
        place = Place(
            namespace=self.namespace,
            kubectl=self.kubectl(),
            resolver=StoreResolver(S3Settings.from_env()),
            defaults=self.defaults,
            workdir=home,
        )
        cluster = RealCluster(
            place,
            operator_namespace=_env("GIC_E2E_OPERATOR_NAMESPACE", "gic-system"),
            operator_selector=_env(
                "GIC_E2E_OPERATOR_SELECTOR", "app.kubernetes.io/name=gic-operator"
            ),
        )
        try:
            yield cluster
        finally:
            cluster.cleanup()
            with contextlib.suppress(AssertionError):
                cluster.wait_until(
                    lambda: (
                        not cluster.list_objects("gicjobs")
                        and not cluster.list_objects("savepoints")
                    ),
                    180,
                    "the module's GICJobs and Savepoints to be deleted",
                )
