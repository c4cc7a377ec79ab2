"""A real node beside the process kubelet: the kubelet of the pinned Kubernetes release
with containerd and runc, joined to a test control plane, running pods as containers.

:class:`RealNode` (a :class:`~tests.support.processes.Service`) starts, in a work
directory it owns:

* a bridge ``gicn<k>`` with address ``10.89.<k>.1/24`` (``<k>`` a free subnet), the pods'
  network and the node's address: the kubelet serves on it, the API server reaches it
  there, the pods reach this machine there;
* ``containerd`` (Debian's, 1.6) with its own root, state, socket and config: the CRI
  plugin with the ``runc`` runtime (Debian's), the ``cgroupfs`` driver, the overlayfs
  snapshotter, CNI from ``/usr/lib/cni`` with one ``bridge`` network (host-local IPAM,
  its data in the work directory, no masquerading), and as sandbox image
  ``localhost/gic-pause:<version>``, an image made here from ``gic-pause``
  (:mod:`.oci_image`) and imported before the kubelet starts: nothing comes from a
  registry;
* ``kubelet`` (``controlplane/node/build.sh``) as ``system:node:<name>`` with a client
  certificate from the control plane's CA, its own root directory, pod logs directory and
  cgroup root (``/gicnode<k>``), ``failCgroupV1: false`` (the release refuses cgroup v1
  hosts unless told otherwise; this machine's layout is hybrid), ``failSwapOn: false``,
  x509 and webhook authentication and webhook authorization of its API (the API server's
  kubelet client is bound to ``system:kubelet-api-admin``), registered with the taint
  :data:`TAINT` so that only pods tolerating it are scheduled there.

* with ``network`` (the default), :class:`~.real_node_net.NodeNetwork`: the API server
  at the bridge address and through the ``kubernetes`` Service, kube-proxy in iptables
  mode, CoreDNS as the kubelet's ``clusterDNS``; ``node.network.expose(port)`` puts a
  loopback test server (S3) on the bridge address.

It is ready when the Node is Ready (and kube-proxy healthy). The kubelet sets kernel
settings it wants (``vm.overcommit_memory``, ``kernel.panic``, ``kernel.panic_on_oops``
...) on this machine; :meth:`RealNode.stop` puts the values back.

:meth:`RealNode.stop` deletes the pods bound to the node (so the kubelet stops them and
tears down their networks), stops the kubelet, kills and deletes any task and container
left, stops containerd and the shims it started, unmounts what is mounted under the work
directory and the pods' network namespaces, stops the cluster networking (and removes its
iptables chains), removes the bridge, the node's cgroups and the Node, and restores the
kernel settings. Every process it stops it started, found by its PID or by the socket path
of this node's containerd on its command line.

Needs root, ``containerd``, ``containerd-shim-runc-v2``, ``ctr``, ``runc``, ``iptables``,
the CNI plugins (Debian's ``containerd``, ``runc`` and ``containernetworking-plugins``;
:func:`missing_tools` lists what is missing), ``ip`` and ``openssl``. ``GIC_NODE_RUNC``
names another runc binary for containerd (e.g. a wrapper keeping runc's log when a sandbox
does not start).

Thread-safety: start and stop from one thread; the other methods may be called from any.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.processes import (
    Service,
    free_port,
    log_tail,
    record_phase,
    spawn_logged,
    start_or_stop,
    terminate,
    wait_until,
)

from ..controlplane.api import ApiError
from ..controlplane.cluster import (
    REPO,
    ControlPlane,
    built_bin_dir,
    kubernetes_version,
    write_kubeconfig,
)
from ..controlplane.pki import client_cert, node_identity, server_cert
from .oci_image import ImageFile, host_programs, oci_archive
from .real_node_net import NodeNetwork

NODE_NAME = "gic-real-node"
#: The taint the node registers with; pods meant for it tolerate it.
TAINT = {"key": "gic.io/real-node", "value": "true", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CNI_DIR = Path("/usr/lib/cni")
CGROUP_V1 = Path("/sys/fs/cgroup")
TOOLS = ("containerd", "containerd-shim-runc-v2", "ctr", "runc", "ip", "openssl", "iptables")
#: What controlplane/node/build.sh builds: the node's own programs.
NODE_BINARIES = ("kubelet", "gic-pause", "gic-http", "kube-proxy", "coredns")
#: Kernel settings the kubelet changes (pkg/kubelet/cm setupKernelTunables); restored.
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


class RealNodeError(RuntimeError):
    """The node could not be started (see the module doc)."""


def node_bin_dir() -> Path:
    """Where ``kubelet`` and ``gic-pause`` are: ``GIC_NODE_BIN`` or the build's output."""
    return built_bin_dir("GIC_NODE_BIN", f"node-{kubernetes_version()}")


def build_node_binaries() -> None:
    """Run ``controlplane/node/build.sh`` (a no-op when up to date)."""
    subprocess.run([str(REPO / "controlplane" / "node" / "build.sh")], check=True)


def missing_tools() -> list[str]:
    """What this machine lacks for a real node (empty when it can run one)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    missing += [
        f"{CNI_DIR}/{plugin}"
        for plugin in ("bridge", "host-local", "loopback")
        if not (CNI_DIR / plugin).exists()
    ]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def _free_subnet() -> int:
    """``k`` such that 10.89.<k>.0/24 is on no route and bridge ``gicn<k>`` is free."""
    routes = subprocess.run(
        ["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True, check=True
    ).stdout
    used = [
        ipaddress.ip_network(word, strict=False)
        for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", routes)
    ]
    for k in range(1, 255):
        net = ipaddress.ip_network(f"10.89.{k}.0/24")
        if any(net.overlaps(u) for u in used) or Path(f"/sys/class/net/gicn{k}").exists():
            continue
        return k
    raise RealNodeError("no free subnet in 10.89.0.0/16")


def _run(*args: str, check: bool = True, timeout: float = 60.0) -> str:
    result = subprocess.run(args, capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise RealNodeError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


class RealNode(Service):
    """containerd + the kubelet as one Node of ``plane`` (see the module doc)."""

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        name: str = NODE_NAME,
        binaries: Path | None = None,
        startup_timeout: float = 120.0,
        verbosity: int = 2,
        network: bool = True,
    ) -> None:
        self.plane = plane
        self.workdir = Path(workdir).resolve()
        self.name = name
        self.bin_dir = Path(binaries) if binaries is not None else node_bin_dir()
        self.startup_timeout = startup_timeout
        self.verbosity = verbosity
        self.version = kubernetes_version()
        self.pause_image = f"localhost/gic-pause:{self.version}"
        self.logs_dir = self.workdir / "logs"
        self.socket = self.workdir / "containerd" / "containerd.sock"
        self.kubelet_dir = self.workdir / "kubelet"
        self.pod_logs_dir = self.workdir / "pod-logs"
        self.subnet = 0
        self.cgroup_root = ""
        self._containerd: subprocess.Popen[bytes] | None = None
        self._kubelet: subprocess.Popen[bytes] | None = None
        self._sysctls: dict[str, str] = {}
        self._netns: set[str] = set()
        #: The cluster networking (API server, kube-proxy, CoreDNS), unless ``network``
        #: is false (pods then reach nothing but each other's pod IPs).
        self.network = NodeNetwork(self) if network else None
        #: Seconds from :meth:`start` to the Node being Ready, and each step's.
        self.startup_seconds = 0.0
        self.phases: dict[str, float] = {}

    @property
    def _api_error(self) -> type[Exception]:
        """The ApiError class of the plane's client: pytest may import the control plane's
        package under two names (``controlplane`` and ``tests.controlplane``), each with
        its own class."""
        module = sys.modules.get(type(self.plane.client).__module__)
        found = getattr(module, "ApiError", ApiError)
        return found if isinstance(found, type) and issubclass(found, Exception) else ApiError

    # -- what tests use ---------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The node's IP address (the bridge's)."""
        return f"10.89.{self.subnet}.1"

    def ctr(self, *args: str, check: bool = True, timeout: float = 120.0) -> str:
        """Run ``ctr`` against this node's containerd, in the CRI's namespace ``k8s.io``."""
        return _run("ctr", f"--address={self.socket}", "--namespace=k8s.io", *args,
                    check=check, timeout=timeout)  # fmt: skip

    def import_image(self, archive: Path) -> str:
        """Import an OCI or Docker archive (``podman save --format oci-archive``,
        :func:`~.oci_image.oci_archive`) into the node's image store; ctr's output."""
        return self.ctr("images", "import", "--no-unpack=false", str(archive))

    def images(self) -> list[str]:
        """The references in the node's image store."""
        return self.ctr("images", "list", "--quiet").split()

    def startup_summary(self) -> str:
        steps = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in self.phases.items())
        return f"real node {self.name} Ready in {self.startup_seconds:.1f}s ({steps})"

    def log_tails(self, lines: int = 30) -> str:
        paths = sorted(self.logs_dir.glob("*.log"))
        return "\n".join(f"--- {path} ---\n" + log_tail(path, lines) for path in paths)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        missing = missing_tools()
        missing += [n for n in NODE_BINARIES if not (self.bin_dir / n).exists()]
        if missing:
            raise RealNodeError(
                "missing for a real node: " + ", ".join(missing)
                + " (apt-get install containerd runc containernetworking-plugins;"
                " controlplane/node/build.sh)"
            )  # fmt: skip
        started = time.monotonic()
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.startup_seconds = start_or_stop(self._start, self.stop, since=started)

    def _start(self) -> None:
        mark = time.monotonic()
        for _ in range(8):  # another node may take the same subnet in between
            self.subnet = _free_subnet()
            try:
                self._bridge()
                break
            except RealNodeError:
                self.subnet = 0
        else:
            raise RealNodeError("could not create a bridge for the pods' network")
        self.cgroup_root = f"/gicnode{self.subnet}"
        self._make_cgroup_root()
        self._certificates()
        mark = record_phase(self.phases, "bridge + certificates", mark)
        if self.network is not None:
            self.network.start()
            mark = record_phase(self.phases, "API server on the bridge + CoreDNS", mark)
        self._start_containerd()
        mark = record_phase(self.phases, "containerd", mark)
        self._import_pause()
        mark = record_phase(self.phases, "sandbox image", mark)
        self._sysctls = {key: self._read_sysctl(key) for key in SYSCTLS}
        self._start_kubelet()
        self._wait(f"node {self.name} Ready", self._node_ready)
        mark = record_phase(self.phases, "kubelet: node Ready", mark)
        if self.network is not None:
            self.network.start_proxy()
            record_phase(self.phases, "kube-proxy", mark)

    def stop(self) -> None:
        """Tear everything down (see the module doc); safe to call more than once."""
        if self._kubelet is not None and self._kubelet.poll() is None:
            with contextlib.suppress(Exception):
                self._drain()
        if self._kubelet is not None:
            terminate(self._kubelet, grace_s=10.0, group=True)
            self._kubelet = None
        if self._containerd is not None:
            if self._containerd.poll() is None:
                with contextlib.suppress(Exception):
                    self._remove_containers()
            terminate(self._containerd, grace_s=10.0, group=True)
            self._containerd = None
        self._kill_shims()
        self._unmount()
        if self.network is not None:
            self.network.stop()
        if self.subnet:
            _run("ip", "link", "delete", f"gicn{self.subnet}", check=False)
        self._remove_cgroups()
        self._remove_log_links()
        for key, value in self._sysctls.items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)
        self._sysctls = {}
        with contextlib.suppress(Exception):
            self.plane.client.delete(f"/api/v1/nodes/{self.name}")

    # -- start ------------------------------------------------------------------------------

    def _bridge(self) -> None:
        bridge = f"gicn{self.subnet}"
        _run("ip", "link", "add", bridge, "type", "bridge")
        try:
            _run("ip", "addr", "add", f"{self.address}/24", "dev", bridge)
            _run("ip", "link", "set", bridge, "up")
        except RealNodeError:
            _run("ip", "link", "delete", bridge, check=False)
            raise

    def _make_cgroup_root(self) -> None:
        """The kubelet wants its cgroup root to exist in every hierarchy; a new cpuset
        cgroup of cgroup v1 starts with no CPUs and memory nodes: give it its parent's."""
        for hierarchy in self._hierarchies():
            top = hierarchy / self.cgroup_root.strip("/")
            top.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (top / name).exists():
                    (top / name).write_text((hierarchy / name).read_text())

    @staticmethod
    def _hierarchies() -> list[Path]:
        """The mounted cgroup hierarchies (v1 controllers, the named ``systemd`` one and
        the v2 ``unified`` one of a hybrid layout, or the v2 root alone)."""
        if (CGROUP_V1 / "cgroup.controllers").exists():
            return [CGROUP_V1]
        return sorted(
            p for p in CGROUP_V1.iterdir()
            if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
        )  # fmt: skip

    def _certificates(self) -> None:
        pki = self.plane.pki
        client_cert(pki, f"node-{self.name}", node_identity(self.name), days=7)
        server_cert(pki, f"node-{self.name}-serving", self.name, [self.address], days=7)
        self.kubeconfig = write_kubeconfig(
            self.workdir / "kubelet.kubeconfig",
            server=self.plane.server,
            ca=pki.ca_cert,
            cert=pki.cert(f"node-{self.name}"),
            key=pki.key(f"node-{self.name}"),
            user=f"system:node:{self.name}",
        )
        # The API server's client for logs, exec and port-forward may use the kubelet's API
        # (kubeadm binds it the same way).
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "gic-apiserver-kubelet-client"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:kubelet-api-admin",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "kube-apiserver-kubelet-client",
                }
            ],
        }
        with contextlib.suppress(self._api_error):  # already there (a second node)
            self.plane.client.create(
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding
            )

    def _containerd_config(self) -> Path:
        base = self.workdir / "containerd"
        cni_conf = self.workdir / "cni" / "net.d"
        cni_conf.mkdir(parents=True, exist_ok=True)
        network = {
            "cniVersion": "1.0.0",
            "name": f"gicn{self.subnet}",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": f"gicn{self.subnet}",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": f"10.89.{self.subnet}.0/24"}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                }
            ],
        }
        (cni_conf / "10-gicn.conflist").write_text(json.dumps(network, indent=2) + "\n")
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config = f"""\
version = 2
root = "{base / "root"}"
state = "{base / "state"}"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{self.socket}"

[ttrpc]
  address = "{self.socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[{cri}]
  sandbox_image = "{self.pause_image}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE, so no process may lower its OOM score below
  # containerd's: clamp the sandboxes' -998 and the kubelet's negative scores to it.
  restrict_oom_score_adj = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{os.environ.get("GIC_NODE_RUNC") or shutil.which("runc")}"
  Root = "{base / "runc"}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_DIR}"
  conf_dir = "{cni_conf}"
  max_conf_num = 1
"""
        path = base / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(config)
        return path

    def _start_containerd(self) -> None:
        config = self._containerd_config()
        self._containerd = spawn_logged(
            ["containerd", f"--config={config}"],
            self.logs_dir / "containerd.log",
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
            cwd=self.workdir,
            start_new_session=True,
        )
        self._wait("containerd's socket", self._containerd_ready)

    def _containerd_ready(self) -> bool:
        if not self.socket.exists():
            return False
        return "io.containerd.grpc.v1" in _run(
            "ctr", f"--address={self.socket}", "plugins", "ls", check=False
        )

    def _import_pause(self) -> None:
        archive = oci_archive(
            self.workdir / "images" / "gic-pause.tar",
            self.pause_image,
            {"/pause": ImageFile(self.bin_dir / "gic-pause")},
            entrypoint=["/pause"],
            env=(),
            user="65535:65535",
        )
        self.import_image(archive)

    def _kubelet_config(self) -> Path:
        pki = self.plane.pki
        self.port = free_port()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "failSwapOn": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.address,
            "port": self.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(pki.cert(f"node-{self.name}-serving")),
            "tlsPrivateKeyFile": str(pki.key(f"node-{self.name}-serving")),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki.ca_cert)},
            },
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(self.pod_logs_dir),
            "clusterDomain": "cluster.local",
            **({"clusterDNS": [self.network.dns_address]} if self.network is not None else {}),
            "resolvConf": "/etc/resolv.conf",
            "registerWithTaints": [TAINT],
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "serializeImagePulls": False,
            "protectKernelDefaults": False,
            # The kubelet's own -999 needs CAP_SYS_RESOURCE, which root lacks on some
            # machines (this one); it would only log an error.
            "oomScoreAdj": 0,
        }
        path = self.workdir / "kubelet-config.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return path

    def _start_kubelet(self) -> None:
        config = self._kubelet_config()
        self.kubelet_dir.mkdir(parents=True, exist_ok=True)
        self._kubelet = spawn_logged(
            [
                str(self.bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.kubelet_dir}",
                f"--cert-dir={self.kubelet_dir / 'pki'}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.address}",
                f"--v={self.verbosity}",
            ],
            self.logs_dir / "kubelet.log",
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
            cwd=self.workdir,
            start_new_session=True,
        )

    def _node_ready(self) -> bool:
        try:
            node = self.plane.client.get(f"/api/v1/nodes/{self.name}")
        except (OSError, self._api_error):
            return False
        conditions = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        return conditions.get("Ready") == "True" and not any(
            key.startswith("node.kubernetes.io/") for key in taints
        )

    def _wait(self, what: str, ready: object) -> None:
        def check_running() -> None:
            for name, process in (("containerd", self._containerd), ("kubelet", self._kubelet)):
                if process is not None and process.poll() is not None:
                    raise RealNodeError(
                        f"{name} exited with {process.returncode} while waiting for {what}\n"
                        + self.log_tails()
                    )

        wait_until(
            ready,  # type: ignore[arg-type]
            timeout=self.startup_timeout,
            interval=0.2,
            check=check_running,
            on_timeout=lambda _: RealNodeError(
                f"no {what} after {self.startup_timeout:.0f}s\n" + self.log_tails()
            ),
        )

    @staticmethod
    def _read_sysctl(key: str) -> str:
        return Path("/proc/sys", key).read_text().strip()

    # -- stop -------------------------------------------------------------------------------

    def _drain(self, timeout: float = 30.0) -> None:
        """Delete the pods bound to this node and wait until containerd runs no task."""
        client = self.plane.client
        pods = client.get("/api/v1/pods", fieldSelector=f"spec.nodeName={self.name}")["items"]
        for pod in pods:
            meta = pod["metadata"]
            with contextlib.suppress(self._api_error):
                client.delete(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 0},
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._netns |= self._netns_paths()
            if not self._tasks():
                return
            time.sleep(0.5)

    def _tasks(self) -> list[str]:
        lines = self.ctr("tasks", "list", check=False, timeout=20).splitlines()[1:]
        return [line.split()[0] for line in lines if line.split()]

    def _netns_paths(self) -> set[str]:
        paths: set[str] = set()
        for container in self.ctr("containers", "list", "--quiet", check=False).split():
            info = self.ctr("containers", "info", container, check=False)
            paths.update(re.findall(r'"path":\s*"(/(?:var/)?run/netns/[^"]+)"', info))
        return paths

    def _remove_containers(self) -> None:
        self._netns |= self._netns_paths()
        for task in self._tasks():
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False)
        for task in self._tasks():
            self.ctr("tasks", "delete", "--force", task, check=False)
        for container in self.ctr("containers", "list", "--quiet", check=False).split():
            self.ctr("containers", "delete", container, check=False)

    def _kill_shims(self) -> None:
        """SIGKILL the shims this node's containerd started (their command line names its
        socket) and whatever is left in their process groups."""
        marker = str(self.socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" in cmdline and marker in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def _unmount(self) -> None:
        """Unmount, deepest first, what is mounted under the work directory, and the pods'
        network namespaces (then remove their files)."""
        root = str(self.workdir) + "/"
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(root) or point in self._netns:
                    mounts.append(point)
        for point in sorted(set(mounts), key=len, reverse=True):
            _run("umount", "-l", point, check=False)
        for path in self._netns:
            with contextlib.suppress(OSError):
                Path(path).unlink()
        self._netns = set()

    def _remove_cgroups(self) -> None:
        if not self.cgroup_root:
            return
        for hierarchy in self._hierarchies():
            top = hierarchy / self.cgroup_root.strip("/")
            if not top.is_dir():
                continue
            for directory in sorted(
                (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                top.rmdir()

    def _remove_log_links(self) -> None:
        """The kubelet links each container's log into /var/log/containers; remove the
        links into this node's pod logs."""
        links = Path("/var/log/containers")
        if not links.is_dir():
            return
        for link in links.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and str(os.readlink(link)).startswith(str(self.pod_logs_dir)):
                    link.unlink()


def processes_under(workdir: Path) -> list[str]:
    """Command lines of this machine's processes naming ``workdir`` (a node's processes
    all do): empty once its node stopped."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                if str(workdir) in cmdline:
                    found.append(cmdline)
    return found


def echo_pod(
    name: str, image: str, words: Sequence[str], node: str = NODE_NAME
) -> dict[str, object]:
    """A pod for ``node`` that prints ``words`` with ``/bin/echo`` and exits, passing the
    ``restricted`` Pod Security standard."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [TOLERATION],
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "echo",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/echo", *words],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


ECHO_IMAGE = "localhost/gic-echo:1"

USAGE = """\
In another shell:

  export KUBECONFIG={kubeconfig}
  export PATH={path}:$PATH
  kubectl get nodes -o wide
  kubectl create namespace demo
  kubectl label namespace demo pod-security.kubernetes.io/enforce=restricted
  kubectl -n demo apply -f {pod}
  kubectl -n demo logs hello            # once it completed: hello from a container

Node {node} ({address}): the kubelet of Kubernetes {version} with containerd and runc,
tainted {taint} (pods for it tolerate that and select it by
kubernetes.io/hostname); images in its store: {images}.
Its pods reach the API server through the kubernetes Service (kube-proxy, iptables mode)
and at {address}:{api_port}, Services by name (CoreDNS at {address}:53){exposed}.
Import more with: ctr --address {socket} -n k8s.io images import ARCHIVE
Logs: {logs} (kubelet, containerd, kube-proxy, coredns),
{plane_logs} (control plane). Ctrl-C stops it all."""


def main(argv: list[str] | None = None) -> int:
    """``make node``: a control plane with a real node, in the foreground until Ctrl-C."""
    import argparse
    import tempfile
    import threading

    from ..controlplane.cluster import build_binaries, missing_binaries

    parser = argparse.ArgumentParser(
        prog="python -m tests.e2e.real_node",
        description="A test control plane with a real node (containerd + kubelet).",
    )
    parser.add_argument("--workdir", type=Path, help="work directory (default: a new temp dir)")
    parser.add_argument(
        "--image", action="append", type=Path, default=[],
        help="an image archive to import (podman save --format oci-archive); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--expose", action="append", type=int, default=[], metavar="PORT",
        help="forward <node address>:PORT to 127.0.0.1:PORT (e.g. a local S3); repeatable",
    )  # fmt: skip
    args = parser.parse_args(argv)
    missing = missing_tools()
    if missing:
        print(f"cannot run a real node here, missing: {', '.join(missing)}", file=sys.stderr)
        return 1
    if missing_binaries():
        build_binaries()
    build_node_binaries()
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="gic-node-"))).resolve()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    plane = ControlPlane(workdir / "controlplane")
    node = RealNode(plane, workdir / "node")
    print(f"starting Kubernetes {plane.version} and node {node.name} in {workdir} ...", flush=True)
    try:
        plane.start()
        print(plane.startup_summary(), flush=True)
        node.start()
        print(node.startup_summary(), flush=True)
        archive = oci_archive(workdir / "gic-echo.tar", ECHO_IMAGE, host_programs(["echo", "sh"]))
        node.import_image(archive)
        for image in args.image:
            print(node.import_image(image.resolve()).strip(), flush=True)
        exposed = [node.network.expose(port) for port in args.expose] if node.network else []
        pod = workdir / "hello.json"
        pod.write_text(json.dumps(echo_pod("hello", ECHO_IMAGE, ["hello from a container"])))
        print(
            "\n"
            + USAGE.format(
                kubeconfig=plane.kubeconfig,
                path=plane.kubectl_path.parent,
                pod=pod,
                node=node.name,
                address=node.address,
                api_port=plane.port,
                exposed="".join(f", {a} (forwarded to 127.0.0.1)" for a in exposed),
                version=node.version,
                taint=f"{TAINT['key']}={TAINT['value']}:{TAINT['effect']}",
                images=", ".join(i for i in node.images() if not i.startswith("sha256:")),
                socket=node.socket,
                logs=node.logs_dir,
                plane_logs=plane.logs_dir,
            ),
            flush=True,
        )
        while not stop.wait(1.0):
            pass
        print("stopping ...", flush=True)
    except (RealNodeError, RuntimeError) as exc:
        print(f"did not start: {exc}", file=sys.stderr)
        return 1
    finally:
        node.stop()
        plane.stop()
    print(f"stopped; logs kept in {node.logs_dir} and {plane.logs_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
