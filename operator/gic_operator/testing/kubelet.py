"""A local kubelet: runs the pods of one namespace as local processes, for end-to-end tests.

:class:`LocalKubelet` watches the pods of a namespace through the API. A pod that is not
being deleted and not yet run gets bound to node ``local-kubelet`` (``spec.nodeName``,
by a normal patch), and its first container's ``command`` + ``args`` start as a process
in its own process group, in the container's ``workingDir`` if that exists locally (else
``workdir/<pod>``), with stdout and stderr appended to ``workdir/<pod>.log``. The
environment is this process's, then ``extra_env``, then the container's ``envFrom``
(secrets, configmaps) and ``env`` (values with ``$(VAR)`` expansion, secret and
configmap keys read through the API, ``fieldRef`` to the pod's name, namespace, uid,
node, service account and IP). The status goes through the ``status`` subresource:
``Running`` (pod IP 127.0.0.1) when started, ``Succeeded``/``Failed`` with the exit code
when the process ends (128+N for signal N; reason ``Completed`` or ``Error``).
``restartPolicy`` is not honoured: a pod's process runs once. When the process ends,
whatever is left in its process group is killed (the container is gone). A pod whose
environment cannot be built (a missing secret, say) stays ``Pending`` with a waiting
``CreateContainerConfigError`` status, and is retried at the next resync: every
``resync_s`` seconds the kubelet lists its pods again.

Deleting a pod (the emulator keeps a running pod, marked, until its kubelet is done)
sends SIGTERM to its process group and SIGKILL after the grace period (the pod's, capped
at ``grace_cap_s``), then deletes the pod with grace period 0; finalizers, if any, still
hold it. :meth:`LocalKubelet.kill` is a crash: SIGKILL, and the pod fails with 137. On
exit every process group it started is killed and reaped, and pods still running are
reported failed.

Thread-safety: the public methods may be called from any thread; the watch runs on one
thread of its own and each process has a waiter thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from gic_operator.testing.kube_client import KubeClient, KubeClientError, WatchStream
from gic_operator.testing.kube_objects import now_rfc3339
from gic_operator.testing.pod_env import EnvError, resolve_command, resolve_env

NODE_NAME = "local-kubelet"
_log = logging.getLogger(__name__)


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


@dataclass
class _Run:
    """One pod's process, identified by the pod's uid."""

    name: str
    uid: str
    process: subprocess.Popen[bytes]
    started_at: str
    waiter: threading.Thread | None = None
    deleting: bool = False
    killer: threading.Timer | None = None
    exit_code: int | None = None


class LocalKubelet:
    """Runs one namespace's pods as local processes (see the module docstring)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        *,
        workdir: Path,
        rewrite: Callable[[list[str]], list[str]] | None = None,
        extra_env: Mapping[str, str] | None = None,
        grace_cap_s: float = 5.0,
        resync_s: float = 5.0,
    ) -> None:
        self._client = KubeClient(kubeconfig)
        self._namespace = namespace
        self._workdir = Path(workdir)
        self._rewrite = rewrite if rewrite is not None else default_rewrite
        self._extra_env = dict(extra_env or {})
        self._grace_cap_s = grace_cap_s
        self._resync = str(max(1, round(resync_s)))
        self._lock = threading.RLock()
        self._runs: dict[str, _Run] = {}  # by pod uid
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    # -- public -----------------------------------------------------------------------------

    def __enter__(self) -> LocalKubelet:
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._watch_loop, name="local-kubelet", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        with self._lock:
            stream = self._stream
            runs = list(self._runs.values())
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for run in runs:
            if run.killer is not None:
                run.killer.cancel()
            if run.process.poll() is None:
                _signal_group(run.process, signal.SIGKILL)
        for run in runs:
            run.process.wait()
            if run.waiter is not None:
                run.waiter.join(timeout=30)

    def processes(self) -> dict[str, int]:
        """``{pod name: pid}`` of the processes still running."""
        with self._lock:
            return {r.name: r.process.pid for r in self._runs.values() if r.process.poll() is None}

    def kill(self, pod_name: str) -> None:
        """Crash a pod: SIGKILL its process group and wait until the process is gone."""
        with self._lock:
            runs = [r for r in self._runs.values() if r.name == pod_name and r.exit_code is None]
        if not runs:
            raise KeyError(f"no running process for pod {pod_name!r}")
        for run in runs:
            _signal_group(run.process, signal.SIGKILL)
            run.process.wait()

    def log(self, pod_name: str) -> str:
        """Everything the pod's processes wrote so far (all runs of that name)."""
        path = self._workdir / f"{pod_name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_source(self, namespace: str, pod_name: str) -> str | None:
        """A ``pods/log`` source for :meth:`KubeEmulator.set_log_source`."""
        return self.log(pod_name) if namespace == self._namespace else None

    # -- watching ---------------------------------------------------------------------------

    def _pods_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self._namespace}/pods"
        return f"{base}/{name}" if name else base

    def _watch_loop(self) -> None:
        version = ""
        while not self._stopping.is_set():
            try:
                if not version:
                    listing = self._client.get(self._pods_path())
                    for pod in listing["items"]:
                        self._reconcile(pod)
                    version = listing["metadata"]["resourceVersion"]
                stream = self._client.watch(
                    self._pods_path(), resourceVersion=version, timeoutSeconds=self._resync
                )
                with self._lock:
                    self._stream = stream
                if self._stopping.is_set():
                    stream.close()
                for event in stream:
                    if event["type"] == "ERROR":
                        break  # expired
                    if event["type"] == "DELETED":
                        self._on_deleted(event["object"])
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._reconcile(event["object"])
                version = ""  # the watch ended (resync period, expiry): list everything again
            except (OSError, KubeClientError) as exc:
                if self._stopping.wait(0.2):
                    return
                _log.warning("local kubelet: watch failed (%s); listing again", exc)
                version = ""

    def _reconcile(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            run = self._runs.get(meta["uid"])
        if spec.get("nodeName") not in (None, "", NODE_NAME):
            return
        if meta.get("deletionTimestamp"):
            if run is not None and run.exit_code is None:
                self._terminate(run, pod)
            elif spec.get("nodeName") == NODE_NAME:
                self._finish_deletion(meta["name"], meta["uid"])
            return
        if run is None and phase not in ("Succeeded", "Failed"):
            self._start(pod)

    def _on_deleted(self, pod: dict[str, Any]) -> None:
        with self._lock:
            run = self._runs.get(pod["metadata"]["uid"])
        if run is not None and run.exit_code is None:
            self._terminate(run, pod)

    # -- running ----------------------------------------------------------------------------

    def _start(self, pod: dict[str, Any]) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        container = pod["spec"]["containers"][0]
        try:
            self._client.merge_patch(self._pods_path(name), {"spec": {"nodeName": NODE_NAME}})
            defined = resolve_env(self._client, pod, container)
            command = self._rewrite(resolve_command(container, defined))
            env = {**os.environ, **self._extra_env, **defined}
        except EnvError as exc:
            self._report_waiting(name, container, "CreateContainerConfigError", str(exc))
            return
        except KubeClientError as exc:
            _log.warning("local kubelet: cannot start pod %s: %s", name, exc)
            return
        workdir = Path(container.get("workingDir") or self._workdir / name)
        if not workdir.is_dir():
            workdir = self._workdir / name
            workdir.mkdir(parents=True, exist_ok=True)
        with open(self._workdir / f"{name}.log", "ab") as log:
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
                self._report_waiting(name, container, "RunContainerError", str(exc))
                return
        run = _Run(name=name, uid=uid, process=process, started_at=now_rfc3339())
        with self._lock:
            self._runs[uid] = run
        self._report_running(run, container)
        run.waiter = threading.Thread(
            target=self._wait, args=(run, container), name=f"kubelet-{name}", daemon=True
        )
        run.waiter.start()

    def _terminate(self, run: _Run, pod: dict[str, Any]) -> None:
        with self._lock:
            if run.deleting:
                return
            run.deleting = True
        meta, spec = pod["metadata"], pod.get("spec") or {}
        grace = meta.get(
            "deletionGracePeriodSeconds", spec.get("terminationGracePeriodSeconds", 30)
        )
        grace_s = min(float(grace or 0), self._grace_cap_s)
        _signal_group(run.process, signal.SIGTERM)
        run.killer = threading.Timer(grace_s, _signal_group, (run.process, signal.SIGKILL))
        run.killer.daemon = True
        run.killer.start()

    def _wait(self, run: _Run, container: dict[str, Any]) -> None:
        code = run.process.wait()
        _signal_group(run.process, signal.SIGKILL)  # the container ends with its leader
        if run.killer is not None:
            run.killer.cancel()
        run.exit_code = 128 - code if code < 0 else code
        self._report_terminated(run, container)
        if run.deleting:
            self._finish_deletion(run.name, run.uid)

    def _finish_deletion(self, name: str, uid: str) -> None:
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(OSError, KubeClientError):  # gone, or a new pod of that name
            self._client.delete(self._pods_path(name), options)

    # -- status -----------------------------------------------------------------------------

    def _patch_status(self, name: str, status: dict[str, Any]) -> None:
        try:
            self._client.merge_patch(self._pods_path(name) + "/status", {"status": status})
        except (OSError, KubeClientError) as exc:
            _log.info("local kubelet: status of pod %s not reported: %s", name, exc)

    def _container_status(self, container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        running = "running" in state
        return {
            "name": container.get("name", "main"),
            "image": container.get("image", ""),
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": 0,
            "state": state,
        }

    def _report_waiting(self, name: str, container: dict[str, Any], reason: str, why: str) -> None:
        state = {"waiting": {"reason": reason, "message": why}}
        self._patch_status(name, {"containerStatuses": [self._container_status(container, state)]})

    def _report_running(self, run: _Run, container: dict[str, Any]) -> None:
        state = {"running": {"startedAt": run.started_at}}
        status = {
            "phase": "Running",
            "startTime": run.started_at,
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "podIPs": [{"ip": "127.0.0.1"}],
            "conditions": _conditions(ready=True),
            "containerStatuses": [
                {
                    **self._container_status(container, state),
                    "containerID": f"local://{run.process.pid}",
                }
            ],
        }
        self._patch_status(run.name, status)

    def _report_terminated(self, run: _Run, container: dict[str, Any]) -> None:
        code = run.exit_code if run.exit_code is not None else 1
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": run.started_at,
            "finishedAt": now_rfc3339(),
            "containerID": f"local://{run.process.pid}",
        }
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": _conditions(ready=False),
            "containerStatuses": [self._container_status(container, {"terminated": terminated})],
        }
        self._patch_status(run.name, status)


def _conditions(*, ready: bool) -> list[dict[str, Any]]:
    now = now_rfc3339()
    value = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": value, "lastTransitionTime": now},
        {"type": "Ready", "status": value, "lastTransitionTime": now},
    ]


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
