"""A real Kubernetes control plane on loopback: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and one process-kubelet Node.

The binaries come from ``controlplane/build.sh`` (Kubernetes' own Go modules, pinned by
``controlplane/go.mod``), in ``.cache/controlplane/<version>/bin``; ``GIC_CONTROLPLANE_BIN``
points elsewhere. :class:`ControlPlane` starts, in a work directory it owns:

* ``etcd`` (plain HTTP on 127.0.0.1, no fsync: test data only);
* ``kube-apiserver`` on ``https://127.0.0.1:<random port>`` with a CA made for the run
  (:mod:`.pki`): x509 client certificates, ``--authorization-mode=Node,RBAC``, the
  default admission plugins plus ``NodeRestriction`` (PodSecurity is among the
  defaults), service-account tokens signed and verified with the run's key pair, service
  cluster IPs from ``10.0.0.0/24``, logs fetched from the kubelet over TLS checked
  against the same CA, and request-header (front proxy) authentication for the
  aggregation layer with a CA of its own;
* ``kube-controller-manager`` with every default controller (``--controllers=*``), one
  service account per controller (``--use-service-account-credentials``), the
  service-account token signer and the root CA publisher (``kube-root-ca.crt``);
* ``kube-scheduler``;
* a :class:`~.kubelet.ProcessKubelet` as Node ``gic-process-node``.

It is ready when ``/readyz`` answers ``ok``, the controller manager and the scheduler
answer ``/healthz``, the Node is Ready without the ``not-ready`` taint, and the ``default``
namespace has its ``default`` ServiceAccount and ``kube-root-ca.crt`` ConfigMap.

Layout of the work directory: ``pki/`` (certificates and keys), ``<user>.kubeconfig``
(``admin`` in ``system:masters``, ``controller-manager``, ``scheduler``, ``kubelet``),
``logs/<component>.log``, ``etcd/``, ``kubelet/pods/<ns>_<pod>_<uid>/`` (each pod's run
directory and ``<container>.log``).

Errors: :class:`ControlPlaneError` when a binary is missing, a component exits, or
readiness does not come within ``startup_timeout``; its message ends with the tail of
every component's log. A failed start stops whatever was started.

:meth:`ControlPlane.stop_apiserver` and :meth:`ControlPlane.start_apiserver` kill
kube-apiserver (SIGKILL, a crash) and start it again on the same port with the same etcd,
for tests of what clients do while it is away.

Thread-safety: start and stop from one thread; the other methods may be called from any.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import (
    Service,
    free_port,
    kill_group,
    log_tail,
    record_phase,
    require_started,
    spawn_logged,
    start_or_stop,
    terminate,
    wait_until,
)

from .api import ApiClient, ApiError
from .kubelet import NODE_NAME, ProcessKubelet
from .pki import FRONT_PROXY_CLIENT, Pki, make_pki

REPO = Path(__file__).resolve().parents[2]
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
ISSUER = "https://kubernetes.default.svc.cluster.local"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
_NOT_STARTED = "the control plane is not started"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (see the module doc)."""


def kubernetes_version() -> str:
    """The Kubernetes release ``controlplane/go.mod`` pins (``v1.37.2``)."""
    text = (REPO / "controlplane" / "go.mod").read_text()
    match = re.search(r"^\s*k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise ControlPlaneError("controlplane/go.mod does not require k8s.io/kubernetes")
    return match.group(1)


def built_bin_dir(override: str, build: str) -> Path:
    """Where a build under ``controlplane/`` put its binaries: the directory the environment
    variable ``override`` names, else ``.cache/controlplane/<build>/bin``."""
    named = os.environ.get(override)
    return Path(named) if named else REPO / ".cache" / "controlplane" / build / "bin"


def bin_dir() -> Path:
    """Where the binaries are: ``GIC_CONTROLPLANE_BIN`` or the build script's output."""
    return built_bin_dir("GIC_CONTROLPLANE_BIN", kubernetes_version())


def kubectl_path() -> Path:
    """The built kubectl."""
    return bin_dir() / "kubectl"


def missing_binaries(directory: Path | None = None) -> list[str]:
    """The binaries not (yet) in ``directory`` (default :func:`bin_dir`)."""
    where = bin_dir() if directory is None else directory
    return [name for name in BINARIES if not os.access(where / name, os.X_OK)]


def build_binaries() -> None:
    """Run ``controlplane/build.sh`` (a no-op when the binaries are up to date); its
    progress goes to this process's stdout."""
    subprocess.run([str(REPO / "controlplane" / "build.sh")], check=True)


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    cert: Path,
    key: Path,
    user: str,
    namespace: str | None = None,
) -> Path:
    """A kubeconfig for one client-certificate user (files referenced by absolute path)."""
    context: dict[str, str] = {"cluster": "gic-test", "user": user}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "gic-test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [{"name": "gic-test", "context": context}],
        "current-context": "gic-test",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)
    return path


@dataclass
class _Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


class ControlPlane(Service):
    """etcd, the Kubernetes control plane and a process kubelet (see the module doc)."""

    def __init__(
        self,
        workdir: Path,
        *,
        binaries: Path | None = None,
        node_name: str = NODE_NAME,
        kubelet_env: Mapping[str, str] | None = None,
        kubelet_rewrite: Callable[[list[str]], list[str]] | None = None,
        grace_cap_s: float | None = None,
        startup_timeout: float = 120.0,
        verbosity: int = 1,
    ) -> None:
        self.workdir = Path(workdir).resolve()
        self.bin_dir = Path(binaries) if binaries is not None else bin_dir()
        self.node_name = node_name
        self.version = kubernetes_version()
        self.startup_timeout = startup_timeout
        self.verbosity = verbosity
        self._kubelet_env = dict(kubelet_env or {})
        self._kubelet_rewrite = kubelet_rewrite
        self._grace_cap_s = grace_cap_s
        self._components: list[_Component] = []
        self._kubelet: ProcessKubelet | None = None
        self._client: ApiClient | None = None
        self.pki = Pki(self.workdir / "pki")
        self.logs_dir = self.workdir / "logs"
        self.port = 0
        self._etcd_url = ""
        #: Seconds from :meth:`start` to ready, and how long each step took.
        self.startup_seconds = 0.0
        self.phases: dict[str, float] = {}

    # -- what tests use ---------------------------------------------------------------------

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user ``gic-admin`` in ``system:masters``)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        """The CA certificate that signed the API server's serving certificate."""
        return self.pki.ca_cert

    @property
    def kubectl_path(self) -> Path:
        """The kubectl binary built with the control plane."""
        return self.bin_dir / "kubectl"

    @property
    def client(self) -> ApiClient:
        """An admin API client."""
        return require_started(self._client, ControlPlaneError, _NOT_STARTED)

    @property
    def kubelet(self) -> ProcessKubelet:
        """The process kubelet of the one Node."""
        return require_started(self._kubelet, ControlPlaneError, _NOT_STARTED)

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as admin (or with ``kubeconfig``); raises
        :class:`subprocess.CalledProcessError` with kubectl's stderr when ``check``
        and it fails."""
        command = [
            str(self.kubectl_path),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(
                result.returncode, command, result.stdout, result.stderr
            )
        return result

    def startup_summary(self) -> str:
        """One line on how long the start took, step by step."""
        steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phases.items())
        took = f"{self.startup_seconds:.1f}s"
        return f"Kubernetes {self.version} control plane ready in {took} ({steps})"

    def log_tails(self, lines: int = 20) -> str:
        """The last ``lines`` of every component's log, for failure reports."""
        paths = sorted(self.logs_dir.glob("*.log"))
        return "\n".join(f"--- {path} ---\n" + log_tail(path, lines) for path in paths)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start everything and wait until it is ready (see the module doc)."""
        missing = missing_binaries(self.bin_dir)
        if missing:
            raise ControlPlaneError(
                f"missing in {self.bin_dir}: {', '.join(missing)}; run `make controlplane`"
            )
        started = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.startup_seconds = start_or_stop(lambda: self._start(started), self.stop, since=started)

    def stop_apiserver(self) -> None:
        """SIGKILL kube-apiserver (a crash; etcd and the other components keep running)."""
        for component in [c for c in self._components if c.name == "kube-apiserver"]:
            self._components.remove(component)
            kill_group(component.process)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again (same port, etcd and flags) and wait for
        ``/readyz``."""
        if any(c.name == "kube-apiserver" for c in self._components):
            raise ControlPlaneError("kube-apiserver is running")
        self._start_apiserver(self._etcd_url)
        self._wait("kube-apiserver /readyz", self._apiserver_ready)

    def _start(self, started: float) -> None:
        etcd_url = self._etcd_url = self._start_etcd()
        mark = time.monotonic()
        make_pki(self.pki.directory, node_name=self.node_name, service_ip=SERVICE_IP)
        mark = record_phase(self.phases, "certificates", mark)
        self.port = free_port()
        kubeconfigs = self._write_kubeconfigs()
        self._start_apiserver(etcd_url)
        self._client = ApiClient.from_kubeconfig(self.kubeconfig)
        self._wait("kube-apiserver /readyz", self._apiserver_ready)
        mark = record_phase(self.phases, "etcd + kube-apiserver ready", mark)
        manager_port, scheduler_port = free_port(), free_port()
        self._start_controller_manager(kubeconfigs["controller-manager"], manager_port)
        self._start_scheduler(kubeconfigs["scheduler"], scheduler_port)
        self._kubelet = ProcessKubelet(
            kubeconfigs["kubelet"],
            workdir=self.workdir / "kubelet",
            serving_cert=self.pki.cert("kubelet-serving"),
            serving_key=self.pki.key("kubelet-serving"),
            client_ca=self.pki.ca_cert,
            node_name=self.node_name,
            kubelet_version=self.version,
            rewrite=self._kubelet_rewrite,
            extra_env=self._kubelet_env,
            grace_cap_s=self._grace_cap_s,
        )
        self._kubelet.start()
        self._wait("kube-controller-manager /healthz", lambda: _healthy(manager_port))
        self._wait("kube-scheduler /healthz", lambda: _healthy(scheduler_port))
        mark = record_phase(self.phases, "controller manager + scheduler healthy", mark)
        self._wait(f"node {self.node_name} Ready and untainted", self._node_ready)
        mark = record_phase(self.phases, "node Ready", mark)
        self._wait("ServiceAccount default/default", self._default_account)
        record_phase(self.phases, "default ServiceAccount", mark)

    def stop(self) -> None:
        """Stop the kubelet (killing its pods' processes), then every component."""
        if self._kubelet is not None:
            with contextlib.suppress(Exception):
                self._kubelet.stop()
            self._kubelet = None
        for component in reversed(self._components):
            terminate(component.process, grace_s=10.0, group=True)
        self._components.clear()
        self._client = None

    # -- components -------------------------------------------------------------------------

    def _spawn(self, name: str, args: Sequence[str]) -> _Component:
        log = self.logs_dir / f"{name}.log"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir),
        }
        process = spawn_logged(
            [str(self.bin_dir / name), *args],
            log,
            append=True,
            env=env,
            cwd=self.workdir,
            start_new_session=True,
        )
        component = _Component(name, process, log)
        self._components.append(component)
        return component

    def _start_etcd(self) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                "--name=gic",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=gic={peer_url}",
                "--initial-cluster-state=new",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        return client_url

    def _write_kubeconfigs(self) -> dict[str, Path]:
        users = {
            "admin": "gic-admin",
            "controller-manager": "system:kube-controller-manager",
            "scheduler": "system:kube-scheduler",
            "kubelet": f"system:node:{self.node_name}",
        }
        return {
            stem: write_kubeconfig(
                self.workdir / f"{stem}.kubeconfig",
                server=self.server,
                ca=self.pki.ca_cert,
                cert=self.pki.cert(stem),
                key=self.pki.key(stem),
                user=user,
            )
            for stem, user in users.items()
        }

    def _start_apiserver(self, etcd_url: str) -> None:
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={pki.cert('apiserver')}",
                f"--tls-private-key-file={pki.key('apiserver')}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--allow-privileged=true",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--requestheader-client-ca-file={pki.cert('front-proxy-ca')}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki.cert('front-proxy-client')}",
                f"--proxy-client-key-file={pki.key('front-proxy-client')}",
                f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
                f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
                f"--kubelet-certificate-authority={pki.ca_cert}",
                "--kubelet-preferred-address-types=InternalIP",
                # The endpoints of the `kubernetes` Service may not be loopback addresses.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--v={self.verbosity}",
            ],
        )

    def _component_flags(self, kubeconfig: Path, port: int, name: str) -> list[str]:
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / name}",
            "--leader-elect=false",
            f"--v={self.verbosity}",
        ]

    def _start_controller_manager(self, kubeconfig: Path, port: int) -> None:
        pki = self.pki
        self._spawn(
            "kube-controller-manager",
            [
                *self._component_flags(kubeconfig, port, "controller-manager"),
                "--controllers=*",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--node-monitor-period=1s",
                f"--flex-volume-plugin-dir={self.workdir / 'controller-manager' / 'flexvolume'}",
            ],
        )

    def _start_scheduler(self, kubeconfig: Path, port: int) -> None:
        self._spawn("kube-scheduler", self._component_flags(kubeconfig, port, "scheduler"))

    # -- readiness --------------------------------------------------------------------------

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        def check_running() -> None:
            for component in self._components:
                code = component.process.poll()
                if code is not None:
                    raise ControlPlaneError(
                        f"{component.name} exited with {code} while waiting for {what}\n"
                        + self.log_tails()
                    )

        wait_until(
            ready,
            timeout=self.startup_timeout,
            check=check_running,
            on_timeout=lambda _: ControlPlaneError(
                f"no {what} after {self.startup_timeout:.0f}s\n" + self.log_tails()
            ),
        )

    def _apiserver_ready(self) -> bool:
        try:
            return self.client.text("/readyz").strip() == "ok"
        except (OSError, ApiError):
            return False

    def _node_ready(self) -> bool:
        try:
            node = self.client.get(f"/api/v1/nodes/{self.node_name}")
        except (OSError, ApiError):
            return False
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        return conditions.get("Ready") == "True" and not any(
            key.startswith("node.kubernetes.io/") for key in taints
        )

    def _default_account(self) -> bool:
        try:
            self.client.get("/api/v1/namespaces/default/serviceaccounts/default")
            self.client.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
        except (OSError, ApiError):
            return False
        return True

    # -- helpers for tests ------------------------------------------------------------------

    def wait_for(
        self, what: str, condition: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1
    ) -> Any:
        """Poll ``condition`` until it returns something truthy; AssertionError naming
        ``what`` after ``timeout`` seconds. ``OSError``/:class:`ApiError` count as not yet."""
        return wait_until(
            condition,
            timeout=timeout,
            interval=interval,
            retry_on=(OSError, ApiError),
            on_timeout=lambda _: AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}"
            ),
        )


def _healthy(port: int) -> bool:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # self-signed serving certificate of the component
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/healthz", context=context, timeout=2
        ) as answer:
            return bool(answer.status == 200 and answer.read().strip() == b"ok")
    except OSError:
        return False
