"""A process kubelet: one Node of a real API server whose pods run as local processes.

:class:`ProcessKubelet` authenticates as ``system:node:<name>`` (group ``system:nodes``),
so the Node authorizer and the NodeRestriction admission plugin limit it the way they
limit a real kubelet; everything below stays inside what they allow.

The node:

* registers Node ``<name>`` (labels ``kubernetes.io/hostname|os|arch``) with the
  ``capacity``/``allocatable`` it is given (advertised, not enforced), address
  ``InternalIP`` 127.0.0.1, conditions ``Ready=True`` and no pressure, and its log server's
  port as ``daemonEndpoints.kubeletEndpoint``; the status is refreshed every minute;
* renews its Lease in ``kube-node-lease`` every ``renew_s`` seconds.

Its pods (listed and watched with ``fieldSelector=spec.nodeName=<name>``, as the Node
authorizer requires; listed again every ``resync_s`` seconds):

* each pod gets an IP of its own, a loopback address of 127.128.0.0/9 (:mod:`.pod_ips`):
  ``status.podIP`` and the downward API's ``status.podIP`` give it, the pod's hostname
  names it in an isolated pod's ``/etc/hosts``; a server that binds it does not collide
  with the same port of another pod (every pod still shares this machine's network, so a
  server on 0.0.0.0 does); the address is released when the pod's process has ended;
* the first container's ``command`` + ``args`` start as one process in its own process
  group, in the container's ``workingDir`` when that exists here (else the pod's run
  directory), stdout and stderr appended to ``<workdir>/pods/<ns>_<pod>_<uid>/<container>.log``;
  ``python``/``python3``/``gic`` are rewritten to this interpreter and its scripts (see
  :func:`default_rewrite`), and other commands are looked up on a ``PATH`` that starts
  with this interpreter's directory (a virtualenv's ``bin``: ``gic-operator``,
  ``spark-submit``); :meth:`ProcessKubelet.configure_namespace` gives the pods of one
  namespace a rewrite and variables of their own;
* the environment is this process's (without ``KUBECONFIG``; ``PATH`` as above), then
  ``extra_env``, then
  what a kubelet adds (``HOSTNAME``, ``KUBERNETES_SERVICE_HOST``/``PORT`` pointing at the
  API server on 127.0.0.1), then the container's ``envFrom``/``env`` (:mod:`.pod_env`; secrets and
  configmaps read as the node); a source that cannot be read yet (the Node authorizer
  learns of a new pod's references a moment after its binding) is retried with backoff
  while the pod reports ``CreateContainerConfigError``;
* a pod with a projected ``serviceAccountToken`` volume (any pod with an automounted
  service account) gets a token from the TokenRequest API bound to the pod, written with
  ``ca.crt`` and ``namespace`` to ``<run dir>/serviceaccount/``, and a kubeconfig using it
  in ``KUBECONFIG``; nothing is mounted at the volume's path, so clients that only know
  the in-cluster paths do not find it;
* the status (``pods/status``, strategic merge patch): ``Running`` with the pod's IP, host
  IP 127.0.0.1 and conditions ``PodScheduled``, ``Initialized``, ``ContainersReady`` and
  ``Ready``, then ``Succeeded``/``Failed`` with the exit code (128+N for signal N, reason
  ``Completed`` or ``Error``); when the process ends, what is left of its process group is
  killed;
* deletion: SIGTERM to the container's first process (the group leader; a container
  runtime signals PID 1 only), SIGKILL to the process group after the pod's grace
  period (``deletionGracePeriodSeconds``, else ``terminationGracePeriodSeconds``; capped at
  ``grace_cap_s`` when given), then the kubelet deletes the pod with grace period 0 and a
  uid precondition (finalizers still hold it);
* logs: an HTTPS server on 127.0.0.1 (certificate from the test CA; it accepts only the
  API server's kubelet client certificate) serves ``/containerLogs/<ns>/<pod>/<container>``
  with ``follow``, ``tailLines`` and ``limitBytes``, so ``kubectl logs [-f]`` works.

Per namespace (:meth:`ProcessKubelet.configure_namespace`): a command rewrite and
variables of its own.

Not honoured: other containers and init containers, ``restartPolicy`` (a pod's process
runs once), images (a container without ``command`` cannot run: images run on the real
node, :mod:`tests.e2e.real_node`), volumes (apart from the token above), resources,
probes (a running process is Ready), security contexts, ``hostNetwork``
(every pod shares this machine's network; only its pod IP is its own),
``exec``/``attach``/``port-forward`` (the kubelet answers 501),
``previous``/``timestamps``/``since*`` in log requests, events.

Thread-safety: the public methods may be called from any thread. The watch, the
heartbeat and the log server run on threads of their own; each pod has one thread that
starts its process, waits for it and reports it.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import logging
import os
import platform
import shlex
import signal
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tests.support.processes import Service, signal_group

from .api import STRATEGIC_MERGE_PATCH, ApiClient, ApiError, WatchStream
from .pod_env import HOST_IP, EnvError, resolve_command, resolve_env
from .pod_ips import LoopbackPool

NODE_NAME = "gic-process-node"
#: The API server's client certificate for kubelets (``--kubelet-client-certificate``).
APISERVER_CLIENT = "kube-apiserver-kubelet-client"
DEFAULT_CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "100Gi"}
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
#: Kubelet endpoints for exec, attach, port-forward and run, which this kubelet refuses.
_STREAMING = ("exec", "attach", "portForward", "run")
_log = logging.getLogger(__name__)


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes ``Time`` fields."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """The current UTC time as Kubernetes writes ``MicroTime`` fields."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def search_path(path: str) -> str:
    """``path`` (a ``PATH`` value) with this interpreter's directory first, so pods find
    the commands of the virtualenv the kubelet runs in (``gic-operator``, ``spark-submit``)
    without it being activated. The directory is not resolved: a virtualenv's ``python``
    is a link to the base interpreter, whose directory has none of them."""
    here = str(Path(sys.executable).parent)
    rest = [entry for entry in path.split(os.pathsep) if entry and entry != here]
    return os.pathsep.join([here, *rest])


def default_rewrite(command: list[str]) -> list[str]:
    """Run ``python``/``python3`` as this interpreter and ``gic`` as the script beside it."""
    if not command:
        return command
    head = command[0]
    if head in ("python", "python3"):
        return [sys.executable, *command[1:]]
    if head == "gic":
        return [str(Path(sys.executable).with_name("gic")), *command[1:]]
    return command


@dataclass(frozen=True)
class PodRuntime:
    """How the kubelet runs the pods of one namespace (see
    :meth:`ProcessKubelet.configure_namespace`)."""

    rewrite: Callable[[list[str]], list[str]]
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class _Pod:
    """One pod this kubelet runs, by uid; its thread owns the process."""

    namespace: str
    name: str
    uid: str
    container: str
    rundir: Path
    log_path: Path
    ip: str
    cancel: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    deleting: bool = False
    grace_s: float = 30.0
    killer: threading.Timer | None = None
    exit_code: int | None = None
    done: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None


class ProcessKubelet(Service):
    """Keeps one Node Ready and runs its pods as local processes (see the module doc)."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        workdir: Path,
        serving_cert: Path,
        serving_key: Path,
        client_ca: Path,
        node_name: str = NODE_NAME,
        kubelet_version: str = "v0.0.0",
        capacity: Mapping[str, str] | None = None,
        rewrite: Callable[[list[str]], list[str]] | None = None,
        extra_env: Mapping[str, str] | None = None,
        grace_cap_s: float | None = None,
        renew_s: float = 10.0,
        resync_s: float = 30.0,
    ) -> None:
        self.node_name = node_name
        self._client = ApiClient.from_kubeconfig(kubeconfig)
        self._ca = Path(client_ca)
        self._workdir = Path(workdir)
        self._serving = (Path(serving_cert), Path(serving_key))
        self._version = kubelet_version
        self._capacity = dict(capacity or DEFAULT_CAPACITY)
        self._rewrite = rewrite if rewrite is not None else default_rewrite
        self._extra_env = dict(extra_env or {})
        self._namespaces: dict[str, PodRuntime] = {}
        self._grace_cap_s = grace_cap_s
        self._renew_s = renew_s
        self._resync = str(max(1, round(resync_s)))
        self._lock = threading.RLock()
        self._pods: dict[str, _Pod] = {}  # by uid
        self._latest: dict[tuple[str, str], _Pod] = {}  # (namespace, name) -> newest run
        self._ips = LoopbackPool()
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self._threads: list[threading.Thread] = []
        self._server: _LogServer | None = None
        self._node_uid = ""
        self._boot = now_rfc3339()

    # -- public -----------------------------------------------------------------------------

    def start(self) -> None:
        """Serve logs, register the Node and start watching pods."""
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._server = _LogServer(self, self._serving, self._ca)
        self._spawn(self._server.serve_forever, "kubelet-logs")
        try:
            self._register()
            self._renew_lease()
        except BaseException:
            self.stop()
            raise
        self._spawn(self._watch_loop, "kubelet-pods")
        self._spawn(self._heartbeat_loop, "kubelet-heartbeat")

    def stop(self) -> None:
        """Stop watching, kill every pod's process group and wait for the threads."""
        self._stopping.set()
        with self._lock:
            stream = self._stream
            pods = list(self._pods.values())
        if stream is not None:
            stream.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for pod in pods:
            pod.cancel.set()
            if pod.killer is not None:
                pod.killer.cancel()
            if pod.process is not None and pod.process.poll() is None:
                signal_group(pod.process, signal.SIGKILL)
        for pod in pods:
            if pod.process is not None:
                pod.process.wait()
            if pod.thread is not None:
                pod.thread.join(timeout=30)
        for thread in self._threads:
            thread.join(timeout=30)

    @property
    def stopping(self) -> threading.Event:
        """Set when the kubelet stops."""
        return self._stopping

    @property
    def port(self) -> int:
        """The log server's port (``daemonEndpoints.kubeletEndpoint.Port``)."""
        if self._server is None:
            raise RuntimeError("the kubelet is not started")
        return self._server.server_address[1]

    def configure_namespace(
        self,
        namespace: str,
        *,
        rewrite: Callable[[list[str]], list[str]] | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """How pods of ``namespace`` that start from now on run: ``rewrite`` replaces the
        kubelet's command rewrite, ``extra_env`` is added to the kubelet's ``extra_env``
        (the pod's own ``env`` still wins)."""
        runtime = PodRuntime(
            rewrite=rewrite or self._rewrite,
            extra_env=dict(extra_env or {}),
        )
        with self._lock:
            self._namespaces[namespace] = runtime

    def processes(self) -> dict[str, int]:
        """``{"<namespace>/<pod>": pid}`` of the processes still running."""
        with self._lock:
            return {
                f"{p.namespace}/{p.name}": p.process.pid
                for p in self._pods.values()
                if p.process is not None and p.process.poll() is None
            }

    def log_path(self, namespace: str, pod_name: str) -> Path | None:
        """The log file of the newest run of a pod, if it has run here."""
        with self._lock:
            pod = self._latest.get((namespace, pod_name))
        return None if pod is None else pod.log_path

    def kill(self, namespace: str, pod_name: str) -> None:
        """Crash a pod: SIGKILL its process group and wait until the process is gone."""
        with self._lock:
            pod = self._latest.get((namespace, pod_name))
        if pod is None or pod.process is None or pod.process.poll() is not None:
            raise KeyError(f"no running process for pod {namespace}/{pod_name}")
        signal_group(pod.process, signal.SIGKILL)
        pod.process.wait()

    # -- node -------------------------------------------------------------------------------

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _register(self) -> None:
        arch = _ARCH.get(platform.machine(), platform.machine())
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node_name,
                "labels": {
                    "kubernetes.io/hostname": self.node_name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": arch,
                },
            },
            "spec": {},
        }
        try:
            created = self._client.create("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
            created = self._client.get(f"/api/v1/nodes/{self.node_name}")
        self._node_uid = created["metadata"]["uid"]
        self._report_node()

    def _report_node(self) -> None:
        now = now_rfc3339()
        arch = _ARCH.get(platform.machine(), platform.machine())

        def condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": self._boot,
            }

        status = {
            "capacity": self._capacity,
            "allocatable": self._capacity,
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "ok"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "ok"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "ok"),
                condition("Ready", "True", "KubeletReady", "process kubelet is posting ready"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": HOST_IP},
                {"type": "Hostname", "address": self.node_name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.node_name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, self.node_name)),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, self._boot)),
                "kernelVersion": platform.release(),
                "osImage": "local processes",
                "containerRuntimeVersion": "process://0",
                "kubeletVersion": self._version,
                "operatingSystem": "linux",
                "architecture": arch,
            },
        }
        self._client.patch(
            f"/api/v1/nodes/{self.node_name}/status",
            {"status": status},
            content_type=STRATEGIC_MERGE_PATCH,
        )

    def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.node_name}"
        spec = {
            "holderIdentity": self.node_name,
            "leaseDurationSeconds": 40,
            "renewTime": now_micro(),
        }
        try:
            self._client.patch(path, {"spec": spec})
            return
        except ApiError as exc:
            if exc.status != 404:
                raise
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.node_name,
                "namespace": "kube-node-lease",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": self.node_name,
                        "uid": self._node_uid,
                    }
                ],
            },
            "spec": spec,
        }
        self._client.create(path.rsplit("/", 1)[0], lease)

    def _heartbeat_loop(self) -> None:
        last_status = time.monotonic()
        while not self._stopping.wait(self._renew_s):
            try:
                self._renew_lease()
                if time.monotonic() - last_status >= 60:
                    self._report_node()
                    last_status = time.monotonic()
            except (OSError, ApiError) as exc:
                _log.warning("process kubelet: heartbeat failed: %s", exc)

    # -- pods -------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        path = "/api/v1/pods"
        selector = f"spec.nodeName={self.node_name}"
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    listing = self._client.get(path, fieldSelector=selector)
                    for pod in listing["items"]:
                        self._reconcile(pod)
                    version = listing["metadata"]["resourceVersion"]
                stream = self._client.watch(
                    path,
                    fieldSelector=selector,
                    resourceVersion=version,
                    allowWatchBookmarks="true",
                    timeoutSeconds=self._resync,
                )
                with self._lock:
                    self._stream = stream
                if self._stopping.is_set():
                    stream.close()
                for event in stream:
                    kind = event["type"]
                    if kind == "ERROR":
                        break  # expired: list again
                    if kind == "DELETED":
                        self._on_deleted(event["object"])
                    elif kind in ("ADDED", "MODIFIED"):
                        self._reconcile(event["object"])
                version = ""  # the watch ended (resync period, expiry): list everything again
            except (OSError, ApiError) as exc:
                if self._stopping.wait(0.5):
                    return
                _log.warning("process kubelet: pod watch failed (%s); listing again", exc)
                version = ""

    def _reconcile(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            known = self._pods.get(meta["uid"])
        if meta.get("deletionTimestamp"):
            if known is None:
                self._finish_deletion(meta["namespace"], meta["name"], meta["uid"])
            else:
                self._terminate(known, pod)
            return
        if known is None and phase not in ("Succeeded", "Failed") and not self._stopping.is_set():
            self._admit(pod)

    def _on_deleted(self, pod: dict[str, Any]) -> None:
        with self._lock:
            known = self._pods.get(pod["metadata"]["uid"])
        if known is not None:
            self._terminate(known, pod)

    def _admit(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        container = pod["spec"]["containers"][0]["name"]
        rundir = self._workdir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid']}"
        rundir.mkdir(parents=True, exist_ok=True)
        run = _Pod(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            container=container,
            rundir=rundir,
            log_path=rundir / f"{container}.log",
            ip=self._ips.allocate(),
        )
        run.log_path.touch()
        with self._lock:
            self._pods[run.uid] = run
            self._latest[(run.namespace, run.name)] = run
        run.thread = threading.Thread(
            target=self._run_pod, args=(run, pod), name=f"pod-{run.name}", daemon=True
        )
        run.thread.start()

    def _terminate(self, run: _Pod, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        grace = float(
            meta.get("deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30))
            or 0
        )
        if self._grace_cap_s is not None:
            grace = min(grace, self._grace_cap_s)
        with self._lock:
            if run.deleting:
                return
            run.deleting = True
            run.grace_s = grace
            run.cancel.set()
            process = run.process
        if run.done.is_set():
            self._finish_deletion(run.namespace, run.name, run.uid)
        elif process is not None:
            self._stop_process(run, process)
        # else still starting: its thread sees the cancel and deletes the pod

    @staticmethod
    def _stop_process(run: _Pod, process: subprocess.Popen[bytes]) -> None:
        """SIGTERM now, SIGKILL to the whole group when the grace period is over. Like
        a container runtime, SIGTERM goes to the container's first process only (the
        group leader, PID 1 of a real container): whatever it started must learn of the
        stop from it."""
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        run.killer = threading.Timer(run.grace_s, signal_group, (process, signal.SIGKILL))
        run.killer.daemon = True
        run.killer.start()

    def _finish_deletion(self, namespace: str, name: str, uid: str) -> None:
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(OSError, ApiError):  # gone, or a new pod of that name
            self._client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}", options)

    # -- one pod's thread -------------------------------------------------------------------

    def _run_pod(self, run: _Pod, pod: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        try:
            prepared = self._prepare(run, pod, container)
            if prepared is None:  # deleted, or the kubelet stopped, before it could start
                if run.deleting:
                    self._finish_deletion(run.namespace, run.name, run.uid)
                return
            command, env = prepared
            (run.rundir / "command").write_text(shlex.join(command) + "\n")  # for diagnosis
            workdir = Path(container.get("workingDir") or run.rundir)
            if not workdir.is_dir():
                workdir = run.rundir
            with run.log_path.open("ab") as log:
                try:
                    process = subprocess.Popen(
                        command,
                        cwd=workdir,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                except OSError as exc:
                    self._report_waiting(run, container, "RunContainerError", str(exc))
                    return
            with self._lock:
                run.process = process
                run.started_at = now_rfc3339()
                cancelled = run.cancel.is_set()
            if cancelled:  # deleted while starting: the deletion never saw this process
                self._stop_process(run, process)
            self._report_running(run, container)
            code = process.wait()
            signal_group(process, signal.SIGKILL)  # the container ends with its leader
            if run.killer is not None:
                run.killer.cancel()
            run.exit_code = 128 - code if code < 0 else code
            self._report_terminated(run, container)
        finally:
            self._ips.release(run.ip)
            run.done.set()
        if run.deleting:
            self._finish_deletion(run.namespace, run.name, run.uid)

    def _prepare(
        self, run: _Pod, pod: dict[str, Any], container: dict[str, Any]
    ) -> tuple[list[str], dict[str, str]] | None:
        """The command line and environment; retried with backoff while sources are
        missing or not yet readable. None when the pod goes away first."""
        delay = 0.1
        reported = ""
        with self._lock:
            runtime = self._namespaces.get(run.namespace) or PodRuntime(self._rewrite)
        while not run.cancel.is_set() and not self._stopping.is_set():
            try:
                defined = resolve_env(self._client, pod, container, run.ip)
                account = self._service_account(run, pod)
                env = self._environment(run, runtime, account, defined)
                command = runtime.rewrite(resolve_command(container, defined))
            except (EnvError, ApiError, OSError) as exc:
                message = str(exc)
                if message != reported and delay >= 0.8:  # not just the authorizer's lag
                    self._report_waiting(run, container, "CreateContainerConfigError", message)
                    reported = message
                if run.cancel.wait(delay):
                    return None
                delay = min(delay * 2, 5.0)
                continue
            return command, env
        return None

    def _environment(
        self,
        run: _Pod,
        runtime: PodRuntime,
        account: Mapping[str, str],
        defined: Mapping[str, str],
    ) -> dict[str, str]:
        port = self._client.port
        kubelet_env = {
            "HOSTNAME": run.name,
            "KUBERNETES_SERVICE_HOST": HOST_IP,
            "KUBERNETES_SERVICE_PORT": str(port),
            "KUBERNETES_SERVICE_PORT_HTTPS": str(port),
            "KUBERNETES_PORT": f"tcp://{HOST_IP}:{port}",
        }
        inherited = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        inherited["PATH"] = search_path(inherited.get("PATH", os.defpath))
        return {
            **inherited,
            **self._extra_env,
            **runtime.extra_env,
            **kubelet_env,
            **account,
            **defined,
        }

    def _service_account(self, run: _Pod, pod: dict[str, Any]) -> dict[str, str]:
        """A pod-bound token for a pod with a projected service-account token volume."""
        spec = pod["spec"]
        sources = [
            source["serviceAccountToken"]
            for volume in spec.get("volumes") or []
            for source in (volume.get("projected") or {}).get("sources") or []
            if "serviceAccountToken" in source
        ]
        if not sources:
            return {}
        projection = sources[0]
        account = spec.get("serviceAccountName") or "default"
        request: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": int(projection.get("expirationSeconds") or 3600),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": run.name,
                    "uid": run.uid,
                },
            },
        }
        if projection.get("audience"):
            request["spec"]["audiences"] = [projection["audience"]]
        answer = self._client.create(
            f"/api/v1/namespaces/{run.namespace}/serviceaccounts/{account}/token", request
        )
        directory = run.rundir / "serviceaccount"
        directory.mkdir(exist_ok=True)
        (directory / "token").write_text(answer["status"]["token"])
        (directory / "ca.crt").write_bytes(self._ca.read_bytes())
        (directory / "namespace").write_text(run.namespace)
        kubeconfig = run.rundir / "kubeconfig"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "in-cluster",
                    "cluster": {
                        "server": self._client.server,
                        "certificate-authority": str(directory / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": account, "user": {"tokenFile": str(directory / "token")}}],
            "contexts": [
                {
                    "name": "in-cluster",
                    "context": {
                        "cluster": "in-cluster",
                        "user": account,
                        "namespace": run.namespace,
                    },
                }
            ],
            "current-context": "in-cluster",
        }
        kubeconfig.write_text(yaml.safe_dump(config))
        return {"KUBECONFIG": str(kubeconfig)}

    # -- status -----------------------------------------------------------------------------

    def _patch_status(self, run: _Pod, status: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{run.namespace}/pods/{run.name}/status"
        patch = {"metadata": {"uid": run.uid}, "status": status}  # uid: not a newer namesake
        try:
            self._client.patch(path, patch, content_type=STRATEGIC_MERGE_PATCH)
        except (OSError, ApiError) as exc:
            _log.info("process kubelet: status of pod %s not reported: %s", run.name, exc)

    @staticmethod
    def _container_status(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        running = "running" in state
        return {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": 0,
            "state": state,
        }

    def _report_waiting(self, run: _Pod, container: dict[str, Any], reason: str, why: str) -> None:
        state = {"waiting": {"reason": reason, "message": why}}
        status = {
            "phase": "Pending",
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "conditions": _conditions(ready=False),
            "containerStatuses": [self._container_status(container, state)],
        }
        self._patch_status(run, status)

    def _report_running(self, run: _Pod, container: dict[str, Any]) -> None:
        assert run.process is not None
        state = {"running": {"startedAt": run.started_at}}
        status = {
            "phase": "Running",
            "startTime": run.started_at,
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "podIP": run.ip,
            "podIPs": [{"ip": run.ip}],
            "conditions": _conditions(ready=True),
            "containerStatuses": [
                {
                    **self._container_status(container, state),
                    "containerID": f"process://{run.process.pid}",
                }
            ],
        }
        self._patch_status(run, status)

    def _report_terminated(self, run: _Pod, container: dict[str, Any]) -> None:
        assert run.process is not None
        code = run.exit_code if run.exit_code is not None else 1
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"process://{run.process.pid}",
        }
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": _conditions(ready=False),
            "containerStatuses": [self._container_status(container, {"terminated": terminated})],
        }
        self._patch_status(run, status)

    # -- logs -------------------------------------------------------------------------------

    def log_source(self, namespace: str, name: str, container: str) -> tuple[_Pod | None, str]:
        """The newest run of a pod's container, or None and why not."""
        with self._lock:
            run = self._latest.get((namespace, name))
        if run is None:
            return None, f'pod "{name}" in namespace "{namespace}" has not run on this node'
        if container and container != run.container:
            return None, f'container "{container}" of pod "{name}" is not run by this kubelet'
        return run, ""


def _conditions(*, ready: bool) -> list[dict[str, Any]]:
    now = now_rfc3339()
    value = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now},
        {"type": "Ready", "status": value, "lastTransitionTime": now},
    ]


class _LogServer(http.server.ThreadingHTTPServer):
    """The kubelet's HTTPS endpoint for ``/containerLogs`` (see the module doc)."""

    daemon_threads = True

    def __init__(self, kubelet: ProcessKubelet, serving: tuple[Path, Path], ca: Path) -> None:
        super().__init__(("127.0.0.1", 0), _LogHandler)
        self.kubelet = kubelet
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(serving[0]), str(serving[1]))
        context.load_verify_locations(str(ca))
        context.verify_mode = ssl.CERT_REQUIRED
        self.socket = context.wrap_socket(
            self.socket, server_side=True, do_handshake_on_connect=False
        )

    def handle_error(self, request: Any, client_address: Any) -> None:
        _log.debug("process kubelet: log request from %s failed", client_address, exc_info=True)


class _LogHandler(http.server.BaseHTTPRequestHandler):
    server: _LogServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(30)
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("process kubelet: " + format, *args)

    def _caller(self) -> str:
        if not isinstance(self.connection, ssl.SSLSocket):
            return ""
        peer: Any = self.connection.getpeercert() or {}
        for rdn in peer.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    return str(value)
        return ""

    def _reply(self, code: int, message: str) -> None:
        body = message.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self._caller() != APISERVER_CLIENT:
            self._reply(403, "forbidden: only the API server reads logs here")
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        if url.path in ("/healthz", "/readyz", "/livez"):
            self._reply(200, "ok")
            return
        if parts[0] in _STREAMING:
            self._reply(501, f"{parts[0]} is not supported: pods are local processes")
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._reply(404, f"{url.path}: not served by the process kubelet")
            return
        if query.get("previous") in ("true", "1"):
            self._reply(400, "previous terminated container not found (containers run once)")
            return
        run, why = self.server.kubelet.log_source(parts[1], parts[2], parts[3])
        if run is None:
            self._reply(404, why)
            return
        self._send_log(run, query)

    def do_POST(self) -> None:
        if self._caller() != APISERVER_CLIENT:
            self._reply(403, "forbidden: only the API server calls this kubelet")
            return
        what = urllib.parse.urlsplit(self.path).path.strip("/").split("/")[0]
        self._reply(501, f"{what} is not supported: pods are local processes")

    def _send_log(self, run: _Pod, query: Mapping[str, str]) -> None:
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError:
            self._reply(400, "tailLines and limitBytes must be integers")
            return
        follow = query.get("follow") in ("true", "1")
        stopping = self.server.kubelet.stopping
        with run.log_path.open("rb") as log:
            data = log.read()
            if tail is not None:
                lines = data.splitlines(keepends=True)
                data = b"".join(lines[-tail:]) if tail > 0 else b""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = data if limit is None else data[:limit]
            self.wfile.write(chunk)
            self.wfile.flush()
            sent = len(chunk)
            while follow and (limit is None or sent < limit):
                more = log.read(65536 if limit is None else min(65536, limit - sent))
                if more:
                    self.wfile.write(more)
                    self.wfile.flush()
                    sent += len(more)
                    continue
                if run.done.is_set() or stopping.is_set():
                    if log.tell() >= run.log_path.stat().st_size:
                        return
                    continue
                time.sleep(0.1)
