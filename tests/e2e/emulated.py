"""Emulator mode: the API emulator, a local kubelet, SeaweedFS and the operator process.

:class:`EmulatedBackend` (one per test session) starts the Kubernetes API emulator on
loopback, writes a kubeconfig, serves Tables for ``kubectl get`` of custom resources,
applies the CRDs from ``crds/`` with ``kubectl apply`` (as a user would), and creates one
S3 bucket. :meth:`EmulatedBackend.open` then gives each test module a namespace of its
own: the credentials Secret applied with kubectl, a :class:`LocalKubelet` running that
namespace's driver pods as local ``spark-submit`` processes (``local[2]``), and the
operator as a subprocess (``python -m gic_operator --namespace <ns> --standalone ...``)
with the S3 credentials in its environment.

Invariants: every process started here (operator, drivers) is killed and reaped when the
namespace closes; the operator is SIGKILLed by :meth:`EmulatedCluster.stop_operator`,
never asked to stop, so a restart exercises recovery from a crash.

Thread-safety: used from the test thread; the kubelet and emulator run their own threads.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kubectl import Kubectl
from gic_operator.testing.kubelet import LocalKubelet, default_rewrite
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing_s3server import TestingS3Server

from .cluster import Cluster, JobDefaults, Place
from .tables import install_tables

REPO = Path(__file__).resolve().parents[2]
MAIN_FILE = REPO / "examples" / "rate_count.py"
SECRET_NAME = "gic-e2e-s3"
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    # A faster launch on a busy 2-core machine (about 20% here): no web UI, and a driver
    # JVM that compiles quickly rather than well (the batches are tiny).
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def spark_rewrite(command: list[str]) -> list[str]:
    """Run ``spark-submit`` as the one beside this interpreter (the venv's PySpark).

    A local kubelet runs every pod in the host's network namespace and file system, where
    a real pod has its own: the driver's fixed metrics port (``GIC_METRICS_PORT``) would
    collide between drivers on this machine, and its local directory (Spark's checkpoint
    directory, the executor cache) would be shared between runs. So the command runs
    with metrics on any free port and the local directory inside the pod's own working
    directory.
    """
    command = default_rewrite(command)
    if command[:1] == ["spark-submit"]:
        spark_submit = str(Path(sys.executable).with_name("spark-submit"))
        script = 'export GIC_METRICS_PORT=0 GIC_LOCAL_DIR="$PWD/gic-local"; exec "$@"'
        return ["sh", "-c", script, "sh", spark_submit, *command[1:]]
    return command


def operator_command(namespace: str) -> list[str]:
    """The operator's command line: ``gic-operator`` if installed beside this
    interpreter, else ``python -m gic_operator``."""
    script = Path(sys.executable).with_name("gic-operator")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "gic_operator"]
    return [
        *head,
        "--namespace",
        namespace,
        "--standalone",
        "--reconcile-interval",
        "1",
        "--metrics-port",
        "0",
        "--health-port",
        "0",
    ]


class OperatorProcess:
    """The operator as a subprocess with its log in a file; restartable."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path) -> None:
        self.command = command
        self.env = env
        self.log_path = log_path
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("the operator is already running")
        self.starts += 1
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop/kill
        self._log.write(f"----- operator start {self.starts} -----\n".encode())
        self._log.flush()
        self._process = subprocess.Popen(
            self.command,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        """SIGKILL the operator's process group and reap it."""
        self._signal(signal.SIGKILL)
        self._reap(timeout=30)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``."""
        self._signal(signal.SIGTERM)
        try:
            self._reap(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _signal(self, signum: int) -> None:
        if self._process is not None and self._process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signum)

    def _reap(self, timeout: float) -> None:
        if self._process is not None:
            self._process.wait(timeout=timeout)
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None


class EmulatedCluster(Cluster):
    """A namespace of the emulator with a local kubelet and an operator process."""

    mode = "emulator"

    def __init__(self, place: Place, *, operator: OperatorProcess, kubelet: LocalKubelet) -> None:
        super().__init__(place)
        self.operator = operator
        self.kubelet = kubelet

    def kill_driver(self, pod: str) -> None:
        self.kubelet.kill(pod)

    @contextlib.contextmanager
    def driver_paused(self, pod: str) -> Iterator[None]:
        """SIGSTOP the pod's process group for the block, SIGCONT after it."""
        group = self.kubelet.processes()[pod]
        os.killpg(group, signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGCONT)

    def stop_operator(self) -> None:
        self.operator.kill()

    def start_operator(self) -> None:
        self.operator.start()

    def operator_log(self) -> str:
        return self.operator.log()

    def pod_log(self, pod: str) -> str:
        return self.kubelet.log(pod)


class EmulatedBackend:
    """The session's emulator, kubeconfig, CRDs and S3 bucket (see the module doc)."""

    def __init__(self, s3: TestingS3Server, workdir: Path) -> None:
        self.s3 = s3
        self.workdir = workdir
        self.emulator = KubeEmulator()
        self.kubeconfig = workdir / "kubeconfig"
        self.bucket = ""
        self._kubelets: dict[str, LocalKubelet] = {}

    def __enter__(self) -> EmulatedBackend:
        self.emulator.start()
        try:
            install_tables(self.emulator)
            self.emulator.write_kubeconfig(self.kubeconfig)
            self.emulator.set_log_source(self._log_source)
            kubectl = self.kubectl()
            kubectl("apply", "--validate=false", "-f", str(REPO / "crds"))
            self.bucket = self.s3.create_bucket()
        except BaseException:
            self.emulator.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.emulator.stop()

    def kubectl(self) -> Kubectl:
        return Kubectl(self.kubeconfig, self.workdir / "kubectl-cache")

    def _log_source(self, namespace: str, pod: str) -> str | None:
        kubelet = self._kubelets.get(namespace)
        return kubelet.log(pod) if kubelet is not None else None

    def _credentials(self) -> dict[str, str]:
        settings = self.s3.settings
        return {
            "AWS_ACCESS_KEY_ID": settings.access_key_id or "",
            "AWS_SECRET_ACCESS_KEY": settings.secret_access_key or "",
            "AWS_REGION": settings.region or "us-east-1",
        }

    def defaults(self) -> JobDefaults:
        return JobDefaults(
            image="gic-e2e:local",
            main_file=str(MAIN_FILE),
            storage=f"s3://{self.bucket}/gic",
            output_root=f"s3://{self.bucket}/output",
            credentials_secret=SECRET_NAME,
            s3_endpoint_url=self.s3.endpoint_url,
            spark_conf=SPARK_CONF,
        )

    @contextlib.contextmanager
    def open(self, namespace: str) -> Iterator[EmulatedCluster]:
        """A fresh namespace with its kubelet and operator, torn down on exit."""
        kubectl = self.kubectl()
        kubectl("create", "namespace", namespace)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": namespace},
            "type": "Opaque",
            "data": {
                k: base64.b64encode(v.encode()).decode() for k, v in self._credentials().items()
            },
        }
        home = self.workdir / namespace
        home.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **self._credentials(),
            "KUBECONFIG": str(self.kubeconfig),
            "GIC_S3_ENDPOINT_URL": self.s3.endpoint_url,
        }
        operator = OperatorProcess(operator_command(namespace), env, home / "operator.log")
        kubelet = LocalKubelet(
            self.kubeconfig,
            namespace,
            workdir=home / "pods",
            rewrite=spark_rewrite,
            extra_env={"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        )
        with kubelet:
            self._kubelets[namespace] = kubelet
            place = Place(
                namespace=namespace,
                kubectl=kubectl,
                resolver=StoreResolver(self.s3.settings),
                defaults=self.defaults(),
                workdir=home,
            )
            cluster = EmulatedCluster(place, operator=operator, kubelet=kubelet)
            cluster.apply(secret)
            operator.start()
            try:
                yield cluster
            finally:
                operator.stop()
                self._kubelets.pop(namespace, None)
