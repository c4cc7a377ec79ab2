"""Control-plane mode (the default): a real Kubernetes control plane on this machine.

:class:`ControlPlaneBackend` (one per test session) takes the session's
:class:`~tests.controlplane.cluster.ControlPlane` (etcd, kube-apiserver with RBAC and
PodSecurity admission, controller manager, scheduler and a process kubelet), applies the
CRDs from ``crds/`` with kubectl and server-side validation (as a user would), creates
the chart's release namespace and one S3 bucket on SeaweedFS. :meth:`ControlPlaneBackend.open`
then gives each test module a namespace of its own:

* labelled ``pod-security.kubernetes.io/enforce=restricted``, so PodSecurity admission
  checks every pod created there against the restricted standard;
* the chart's ServiceAccounts and RBAC for it (:mod:`.chart`: ``helm template`` with
  ``watchNamespaces: [<namespace>]``), applied with kubectl;
* the S3 credentials Secret the jobs name;
* the process kubelet told to run that namespace's ``spark-submit`` (driver pods) as the
  venv's, ``local[2]`` (:func:`spark_rewrite`);
* the operator as a subprocess (``python -m gic_operator --namespace <ns> --standalone
  ...``) whose kubeconfig holds a token of the chart's operator ServiceAccount from the
  TokenRequest API: every request it makes is authorized by the chart's own RBAC.

The tests themselves act as the cluster admin (the control plane's admin kubeconfig).

Invariants: every process started here (the operator) is killed and reaped when the
namespace closes, and the namespace is deleted then (its pods with it); the operator is
SIGKILLed by :meth:`ControlPlaneCluster.stop_operator`, never asked to stop, so a restart
exercises recovery from a crash.

Thread-safety: used from the test thread; the control plane runs its own processes and
threads.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.storage.uri import StoreResolver

from ..controlplane.cluster import ControlPlane
from ..controlplane.kubelet import default_rewrite
from .chart import OPERATOR_ACCOUNT, RELEASE_NAMESPACE, render_access
from .cluster import Cluster, JobDefaults, Place
from .kubectl import Kubectl, wait_until

REPO = Path(__file__).resolve().parents[2]
MAIN_FILE = REPO / "examples" / "rate_count.py"
SECRET_NAME = "gic-e2e-s3"
ENFORCE = "pod-security.kubernetes.io/enforce"
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    # A faster launch on a busy 2-core machine (about 20% here): no web UI, and a driver
    # JVM that compiles quickly rather than well (the batches are tiny).
    "spark.ui.enabled": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
#: Lifetime asked for the operator's token (the API server may shorten it).
TOKEN_DURATION = "24h"


def spark_rewrite(command: list[str]) -> list[str]:
    """Run ``spark-submit`` as the one beside this interpreter (the venv's PySpark), and
    the driver's entry process (``python3 -m ...``) with this interpreter.

    The process kubelet runs every pod in the host's file system and network namespace,
    where a real pod has its own: the driver's local directory (Spark's checkpoint
    directory, the executor cache; by default ``<tmp>/gic-local``) would be shared with
    other test runs on this machine that use the same namespace and job names, and the
    driver's fixed metrics port, though bound on the pod's own IP, is refused while any
    process of this machine listens on port 9090 of every interface (other work on a
    shared machine). So the command runs with the local directory inside the pod's own
    working directory and metrics on any free port. ``test_local_cluster.py`` runs the
    drivers as they are, port 9090 on their pod IPs.
    """
    command = default_rewrite(command)
    if "spark-submit" in command:  # a driver: spark-submit, under the entry process
        at = command.index("spark-submit")
        spark_submit = str(Path(sys.executable).with_name("spark-submit"))
        script = 'export GIC_METRICS_PORT=0 GIC_LOCAL_DIR="$PWD/gic-local"; exec "$@"'
        return ["sh", "-c", script, "sh", *command[:at], spark_submit, *command[at + 1 :]]
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


def token_kubeconfig(path: Path, *, server: str, ca_file: Path, user: str, token: str) -> Path:
    """A kubeconfig authenticating with a bearer ``token`` (written ``0600``)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gic-test",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "gic-test", "context": {"cluster": "gic-test", "user": user}}],
        "current-context": "gic-test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


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


class ControlPlaneCluster(Cluster):
    """A namespace of the test control plane with an operator process watching it."""

    mode = "controlplane"

    def __init__(
        self,
        place: Place,
        *,
        plane: ControlPlane,
        operator: OperatorProcess,
        operator_kubectl: Kubectl,
    ) -> None:
        super().__init__(place)
        self.plane = plane
        self.operator = operator
        #: kubectl as the operator's ServiceAccount (the chart's RBAC applies).
        self.operator_kubectl = operator_kubectl

    def admin_kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS`` as the cluster admin, in no particular namespace."""
        return self._kubectl(*args, stdin=stdin, check=check, timeout=60 * self.scale)

    def kill_driver(self, pod: str) -> None:
        self.plane.kubelet.kill(self.namespace, pod)

    @contextlib.contextmanager
    def driver_paused(self, pod: str) -> Iterator[None]:
        """SIGSTOP the pod's process group for the block, SIGCONT after it."""
        group = self.plane.kubelet.processes()[f"{self.namespace}/{pod}"]
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
        """The pod's log file as the kubelet writes it (readable while the API server is
        down, unlike ``kubectl logs``)."""
        path = self.plane.kubelet.log_path(self.namespace, pod)
        if path is None or not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-200:])


class ControlPlaneBackend:
    """The session's control plane, CRDs, release namespace and S3 bucket (see the
    module doc)."""

    def __init__(self, plane: ControlPlane, s3: TestingS3Server, workdir: Path) -> None:
        self.plane = plane
        self.s3 = s3
        self.workdir = workdir
        self.bucket = ""

    def __enter__(self) -> ControlPlaneBackend:
        kubectl = self.kubectl()
        kubectl("apply", "-f", str(REPO / "crds"), timeout=60)
        kubectl(
            "wait", "--for=condition=Established", "--timeout=60s",
            "crd/gicjobs.gic.io", "crd/savepoints.gic.io",
            timeout=90,
        )  # fmt: skip
        # The API server publishes the CRDs' OpenAPI schema a moment after they are
        # Established; kubectl explain (and client-side tools) need it.
        wait_until(
            lambda: kubectl("explain", "gicjob.spec", check=False).returncode == 0,
            60,
            "the GICJob schema in the API server's OpenAPI document",
            interval=0.5,
        )
        release = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}
        kubectl.apply(json.dumps(release))
        self.bucket = self.s3.create_bucket()
        return self

    def __exit__(self, *exc: object) -> None:
        """Nothing of its own to stop: the control plane and S3 server are the session's."""

    def kubectl(self) -> Kubectl:
        """kubectl as the cluster admin."""
        return Kubectl(self.plane.kubeconfig, self.workdir / "kubectl-cache", self._binary)

    @property
    def _binary(self) -> str:
        return str(self.plane.kubectl_path)

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

    def grant(self, namespace: str) -> None:
        """Apply the chart's ServiceAccounts and RBAC for an operator watching
        ``namespace`` (idempotent: the cluster-wide parts are the same each time)."""
        manifests = "".join(
            "---\n" + yaml.safe_dump(doc, sort_keys=False) for doc in render_access([namespace])
        )
        self.kubectl().apply(manifests)

    def operator_token(self) -> str:
        """A token of the chart's operator ServiceAccount from the TokenRequest API."""
        result = self.kubectl()(
            "create", "token", OPERATOR_ACCOUNT, "-n", RELEASE_NAMESPACE,
            f"--duration={TOKEN_DURATION}",
        )  # fmt: skip
        return result.stdout.strip()

    def create_namespace(self, namespace: str, labels: dict[str, str] | None = None) -> None:
        """A namespace whose pods must meet the restricted Pod Security Standard."""
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {ENFORCE: "restricted", **(labels or {})}},
        }
        self.kubectl().apply(json.dumps(body))

    @contextlib.contextmanager
    def open(self, namespace: str) -> Iterator[ControlPlaneCluster]:
        """A fresh namespace with the chart's RBAC and an operator, torn down on exit."""
        kubectl = self.kubectl()
        self.create_namespace(namespace)
        self.grant(namespace)
        home = self.workdir / namespace
        home.mkdir(parents=True, exist_ok=True)
        operator_kubeconfig = token_kubeconfig(
            home / "operator.kubeconfig",
            server=self.plane.server,
            ca_file=self.plane.ca_file,
            user=OPERATOR_ACCOUNT,
            token=self.operator_token(),
        )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": namespace},
            "type": "Opaque",
            "data": {
                k: base64.b64encode(v.encode()).decode() for k, v in self._credentials().items()
            },
        }
        self.plane.kubelet.configure_namespace(
            namespace,
            rewrite=spark_rewrite,
            extra_env={"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        )
        env = {
            **os.environ,
            **self._credentials(),
            "KUBECONFIG": str(operator_kubeconfig),
            "GIC_S3_ENDPOINT_URL": self.s3.endpoint_url,
            # The operator uses its credentials only on this session's bucket.
            "GIC_ALLOWED_STORAGE": f"s3://{self.bucket}",
            "GIC_ALLOWED_S3_ENDPOINTS": self.s3.endpoint_url,
            # One operator key for the session, as the chart keeps one across restarts:
            # a restarted operator still authenticates to the drivers it launched.
            "GIC_OPERATOR_CONTROL_KEY": secrets.token_urlsafe(32),
        }
        operator = OperatorProcess(operator_command(namespace), env, home / "operator.log")
        place = Place(
            namespace=namespace,
            kubectl=kubectl,
            resolver=StoreResolver(self.s3.settings),
            defaults=self.defaults(),
            workdir=home,
        )
        cluster = ControlPlaneCluster(
            place,
            plane=self.plane,
            operator=operator,
            operator_kubectl=Kubectl(operator_kubeconfig, home / "kubectl-cache", self._binary),
        )
        cluster.apply(secret)
        operator.start()
        try:
            yield cluster
        finally:
            operator.stop()
            # Its pods go with it (the kubelet stops their processes); objects still
            # holding the operator's finalizer keep it Terminating, which harms no one.
            kubectl("delete", "namespace", namespace, "--wait=false", check=False)
