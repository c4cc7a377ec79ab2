"""The cluster networking of a real node (:mod:`tests.e2e.real_node`): what a pod on it
needs to reach the API server, Services by name and this machine's test servers.

:class:`NodeNetwork` starts, for one :class:`~tests.e2e.real_node.RealNode` (its bridge
made, before its kubelet starts):

* **the API server on the bridge address.** The control plane listens on 127.0.0.1 only
  (one ``--bind-address``, shared with the process-kubelet suite); a forwarder
  (:class:`~tests.e2e.tcp_forwarder.TcpForwarder`) listens on ``<bridge>:<API port>`` and
  pipes to it, TLS untouched. The API server's serving certificate is reissued with the
  same key to name the bridge address as well (kube-apiserver reloads it from its file,
  no restart). The ``kubernetes`` Service gets an EndpointSlice ``kubernetes`` with
  ``<bridge>:<API port>`` (the control plane runs with ``--endpoint-reconciler-type=none``,
  so nothing else writes one): what ``--advertise-address=<bridge>`` would publish.
* **kube-proxy** (``k8s.io/kubernetes/cmd/kube-proxy`` of the pinned release, built by
  ``controlplane/node/build.sh``) in ``iptables`` mode as ``system:kube-proxy`` (bound to
  ``system:node-proxier`` by the default RBAC policy): ClusterIP Services, the
  ``kubernetes`` one included, are DNAT rules to their endpoints. The cluster CIDR is the
  bridge's subnet; NodePorts only on the bridge address; no localhost NodePorts (no
  ``route_localnet``) and no conntrack limits or timeouts changed.
* **CoreDNS** (``controlplane/node/dns``: CoreDNS's own module, pinned, with the plugins a
  cluster DNS needs) on ``<bridge>:53``, serving ``cluster.local`` (and reverse zones)
  from the API server with its ``kubernetes`` plugin, other names forwarded to this
  machine's resolvers. The kubelet's ``clusterDNS`` is the bridge address: CoreDNS runs
  on the host, not as a pod, so there is no ``kube-dns`` Service to route.
* :meth:`NodeNetwork.expose` forwards ``<bridge>:<port>`` to ``127.0.0.1:<port>`` for a
  test server of this machine (SeaweedFS's S3 port): pods reach it at the bridge address.

:meth:`NodeNetwork.stop` stops CoreDNS, kube-proxy (then ``kube-proxy --cleanup``
removes its rules) and the forwarders, deletes the EndpointSlice and the RBAC objects,
reissues the API server's certificate without the bridge address, removes any
``KUBE-*`` iptables chain (and the rules jumping to it) that was not there before
:meth:`start` (the kubelet's canaries and firewall chains included), and restores the
kernel settings kube-proxy may change.

Thread-safety: start and stop from one thread.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.processes import free_port, spawn_logged, terminate, wait_until

from ..controlplane.cluster import SERVICE_IP, write_kubeconfig
from ..controlplane.pki import (
    Identity,
    apiserver_hosts,
    client_cert,
    reissue_server_cert,
)
from .tcp_forwarder import TcpForwarder

if TYPE_CHECKING:
    from .real_node import RealNode

#: The name of the ``kubernetes`` Service's EndpointSlice written here.
KUBERNETES_SLICE = "kubernetes"
MANAGED_BY = "gic-real-node.gic.io"
DNS_USER = "gic:real-node-dns"
KUBE_PROXY_USER = "system:kube-proxy"
#: Kernel settings kube-proxy may change (restored at stop when they were readable).
PROXY_SYSCTLS = (
    "net/ipv4/conf/all/route_localnet",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
    "net/netfilter/nf_conntrack_tcp_be_liberal",
)
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")

_DNS_RULES = [
    {"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
     "verbs": ["list", "watch"]},
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
     "verbs": ["list", "watch"]},
]  # fmt: skip


def _iptables_chains(tool: str) -> set[tuple[str, str]]:
    """(table, chain) of every ``KUBE-*`` chain ``tool`` lists."""
    found = set()
    for table in TABLES:
        result = subprocess.run(
            [tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        )
        for line in result.stdout.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == "-N" and words[1].startswith("KUBE-"):
                found.add((table, words[1]))
    return found


def _remove_chains(tool: str, chains: set[tuple[str, str]]) -> None:
    """Delete the rules jumping to ``chains``, then flush and delete them."""
    for table in {t for t, _ in chains}:
        names = {c for t, c in chains if t == table}
        listed = subprocess.run(
            [tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False
        ).stdout
        for line in listed.splitlines():
            words = shlex.split(line)
            jumps = "-j" in words and words[words.index("-j") + 1] in names
            if words[:1] == ["-A"] and words[1] not in names and jumps:
                command = [tool, "-w", "-t", table, "-D", *words[1:]]
                subprocess.run(command, capture_output=True, check=False)
        for name in names:
            subprocess.run([tool, "-w", "-t", table, "-F", name], capture_output=True, check=False)
        for name in names:
            subprocess.run([tool, "-w", "-t", table, "-X", name], capture_output=True, check=False)


def kubernetes_chains() -> dict[str, set[tuple[str, str]]]:
    """The ``KUBE-*`` chains of this machine, per tool (``iptables``, ``ip6tables``)."""
    return {tool: _iptables_chains(tool) for tool in IPTABLES}


class NodeNetwork:
    """The API server, kube-proxy, CoreDNS and forwarders for ``node`` (see the module doc)."""

    def __init__(self, node: RealNode) -> None:
        self.node = node
        self.plane = node.plane
        self.dir = node.workdir / "network"
        self._forwarders: dict[int, TcpForwarder] = {}
        self._kube_proxy: subprocess.Popen[bytes] | None = None
        self._coredns: subprocess.Popen[bytes] | None = None
        self._chains_before: dict[str, set[tuple[str, str]]] | None = None
        self._sysctls: dict[str, str] = {}
        self._reissued = False
        self.proxy_healthz = 0
        self.dns_ready_port = 0

    @property
    def dns_address(self) -> str:
        """Where CoreDNS answers (the kubelet's ``clusterDNS``)."""
        return self.node.address

    # -- what tests use ---------------------------------------------------------------------

    def expose(self, port: int) -> str:
        """Forward ``<bridge>:<port>`` to ``127.0.0.1:<port>``; ``<bridge>:<port>``."""
        if port not in self._forwarders:
            self._forwarders[port] = TcpForwarder(
                (self.node.address, port), ("127.0.0.1", port)
            ).start()
        return f"{self.node.address}:{port}"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """The API server on the bridge and CoreDNS; the node's bridge must exist. Then
        the kubelet, then :meth:`start_proxy`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._chains_before = kubernetes_chains()
        for key in PROXY_SYSCTLS:
            with contextlib.suppress(OSError):
                self._sysctls[key] = Path("/proc/sys", key).read_text().strip()
        self._serve_api()
        self._start_coredns()
        self._wait("CoreDNS /ready", self._dns_ready, self._coredns)

    def start_proxy(self) -> None:
        """kube-proxy, once the kubelet registered the Node (kube-proxy reads its
        addresses from it)."""
        self._start_kube_proxy()
        self._wait("kube-proxy /healthz", self._proxy_healthy, self._kube_proxy)

    def stop(self) -> None:
        """Tear down what :meth:`start` made (see the module doc); safe to call twice."""
        for process in (self._coredns, self._kube_proxy):
            if process is not None:
                terminate(process, grace_s=5.0, group=True)
        self._coredns = None
        if self._kube_proxy is not None:
            self._kube_proxy = None
            subprocess.run(
                [str(self.node.bin_dir / "kube-proxy"), "--cleanup", "--v=0"],
                capture_output=True, check=False, timeout=60,
            )  # fmt: skip
        for forwarder in self._forwarders.values():
            forwarder.stop()
        self._forwarders = {}
        client, error = self.plane.client, self.node._api_error
        for path in (
            f"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/{KUBERNETES_SLICE}",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gic-real-node-dns",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/gic-real-node-dns",
        ):
            with contextlib.suppress(OSError, error):
                client.delete(path)
        if self._reissued:
            pki = self.plane.pki
            reissue_server_cert(pki, "apiserver", "kube-apiserver",
                                apiserver_hosts(SERVICE_IP), days=7)  # fmt: skip
            self._reissued = False
        if self._chains_before is not None:
            after = kubernetes_chains()
            for tool in IPTABLES:
                _remove_chains(tool, after[tool] - self._chains_before[tool])
            self._chains_before = None
        for key, value in self._sysctls.items():
            with contextlib.suppress(OSError):
                if Path("/proc/sys", key).read_text().strip() != value:
                    Path("/proc/sys", key).write_text(value)
        self._sysctls = {}

    # -- the API server ---------------------------------------------------------------------

    def _serve_api(self) -> None:
        pki, address, port = self.plane.pki, self.node.address, self.plane.port
        reissue_server_cert(pki, "apiserver", "kube-apiserver",
                            apiserver_hosts(SERVICE_IP, address), days=7)  # fmt: skip
        self._reissued = True
        self.expose(port)
        endpoints = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": KUBERNETES_SLICE,
                "namespace": "default",
                "labels": {
                    "kubernetes.io/service-name": "kubernetes",
                    "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }
        client = self.plane.client
        path = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
        with contextlib.suppress(self.node._api_error):
            client.delete(f"{path}/{KUBERNETES_SLICE}")
        client.create(path, endpoints)

    # -- kube-proxy -------------------------------------------------------------------------

    def _kubeconfig(self, stem: str, identity: Identity) -> Path:
        pki = self.plane.pki
        client_cert(pki, stem, identity, days=7)
        return write_kubeconfig(
            self.dir / f"{stem}.kubeconfig",
            server=self.plane.server,
            ca=pki.ca_cert,
            cert=pki.cert(stem),
            key=pki.key(stem),
            user=identity.user,
        )

    def _start_kube_proxy(self) -> None:
        kubeconfig = self._kubeconfig("real-node-kube-proxy", Identity(KUBE_PROXY_USER))
        self.proxy_healthz = free_port()
        subnet = f"10.89.{self.node.subnet}.0/24"
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": self.node.name,
            "bindAddress": self.node.address,
            "clusterCIDR": subnet,
            "healthzBindAddress": f"127.0.0.1:{self.proxy_healthz}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "nodePortAddresses": [subnet],
            "iptables": {
                "localhostNodePorts": False,
                "masqueradeAll": False,
                "syncPeriod": "30s",
                "minSyncPeriod": "0s",
            },
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.dir / "kube-proxy.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        self._kube_proxy = spawn_logged(
            [str(self.node.bin_dir / "kube-proxy"), f"--config={path}", "--v=2"],
            self.node.logs_dir / "kube-proxy.log",
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd=self.dir,
            start_new_session=True,
        )

    def _proxy_healthy(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.proxy_healthz}/healthz")

    # -- CoreDNS ----------------------------------------------------------------------------

    def _start_coredns(self) -> None:
        client = self.plane.client
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "gic-real-node-dns"},
            "rules": _DNS_RULES,
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "gic-real-node-dns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "gic-real-node-dns"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": DNS_USER}],
        }  # fmt: skip
        for path, body in (
            ("/apis/rbac.authorization.k8s.io/v1/clusterroles", role),
            ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding),
        ):
            with contextlib.suppress(self.node._api_error):  # left by a killed run
                client.delete(f"{path}/{body['metadata']['name']}")  # type: ignore[index]
            client.create(path, body)
        kubeconfig = self._kubeconfig("real-node-dns", Identity(DNS_USER))
        health, self.dns_ready_port = free_port(), free_port()
        corefile = f"""\
.:53 {{
    bind {self.dns_address}
    errors
    health 127.0.0.1:{health}
    ready 127.0.0.1:{self.dns_ready_port}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} gic-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""
        path = self.dir / "Corefile"
        path.write_text(corefile)
        self._coredns = spawn_logged(
            [str(self.node.bin_dir / "coredns"), f"-conf={path}"],
            self.node.logs_dir / "coredns.log",
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd=self.dir,
            start_new_session=True,
        )

    def _dns_ready(self) -> bool:
        return _http_ok(f"http://127.0.0.1:{self.dns_ready_port}/ready")

    # -- helpers ----------------------------------------------------------------------------

    def _wait(self, what: str, ready: object, process: subprocess.Popen[bytes] | None) -> None:
        from .real_node import RealNodeError

        def check() -> None:
            if process is not None and process.poll() is not None:
                raise RealNodeError(
                    f"{what}: exited with {process.returncode}\n" + self.node.log_tails()
                )

        wait_until(
            ready,  # type: ignore[arg-type]
            timeout=self.node.startup_timeout,
            interval=0.2,
            check=check,
            on_timeout=lambda _: RealNodeError(f"no {what}\n" + self.node.log_tails()),
        )


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False
