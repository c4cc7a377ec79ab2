"""The cluster an end-to-end test talks to, through ``kubectl`` like a user.

A :class:`Cluster` is one namespace of a Kubernetes API with the GIC operator watching it,
driver pods that really run, and S3 storage the test can read. Two kinds exist:

* :class:`~tests.e2e.controlplane_backend.ControlPlaneCluster` (the default): a real
  Kubernetes control plane on this machine (:mod:`tests.controlplane`), its process
  kubelet running driver pods as local ``spark-submit`` processes, SeaweedFS, and the
  operator as a subprocess (authenticated as the chart's ServiceAccount) the test can
  kill and start again;
* :class:`~tests.e2e.real.RealCluster` (``GIC_E2E_KUBECONFIG`` set): a real cluster with
  the operator installed by Helm (see ``tests/e2e/README.md``).

Everything a test does goes through the methods here, so the same test runs on both:
``kubectl``/``apply``/``get``/``wait`` for resources, :meth:`Cluster.kill_driver` and
:meth:`Cluster.restart_operator` for faults, :attr:`Cluster.storage` for the files, and
:meth:`Cluster.job_manifest` for a GICJob running ``examples/rate_count.py``.

Invariant: every wait has a deadline (scaled by ``GIC_E2E_TIMEOUT_SCALE``) and says what
it waited for when it runs out.

Thread-safety: a cluster belongs to the test thread; each kubectl call is its own process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from gic_runtime.storage.uri import StoreResolver, join

from .kubectl import Kubectl, wait_until

T = TypeVar("T")

#: The job every test runs: ``rate_count.py`` with this many keys and rows per batch.
KEYS = 13
ROWS_PER_BATCH = 200
API_VERSION = "gic.io/v1alpha1"
#: kopf's log lines for every successful handler or timer run (noise in a failure report).
_ROUTINE = re.compile(r"(Timer|Handler) '[^']+' succeeded\.$")


def timeout_scale() -> float:
    """``GIC_E2E_TIMEOUT_SCALE``: every deadline is multiplied by it (default 1 against
    the test control plane, 3 against a real cluster, where images start executor pods
    too)."""
    default = 3.0 if os.environ.get("GIC_E2E_KUBECONFIG") else 1.0
    return float(os.environ.get("GIC_E2E_TIMEOUT_SCALE") or default)


@dataclass(frozen=True)
class JobDefaults:
    """What every GICJob of the run has in common: where the job's code is, how Spark
    runs, where checkpoints and sink output go, and the storage credentials Secret."""

    image: str
    main_file: str
    storage: str
    output_root: str
    credentials_secret: str
    s3_endpoint_url: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    buckets: int = 8


@dataclass(frozen=True)
class Place:
    """Where a cluster's tests act: the namespace, kubectl for the cluster, a resolver
    reading the storage, the jobs' defaults, and a local directory for files and logs."""

    namespace: str
    kubectl: Kubectl
    resolver: StoreResolver
    defaults: JobDefaults
    workdir: Path


class Cluster:
    """One namespace of a cluster with the operator watching it (see the module doc)."""

    mode = "abstract"

    def __init__(self, place: Place) -> None:
        self.namespace = place.namespace
        self._kubectl = place.kubectl
        self.storage = place.resolver
        self.defaults = place.defaults
        self.workdir = place.workdir
        self.scale = timeout_scale()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._manifests = 0

    # --- kubectl ----------------------------------------------------------------------------

    def run_kubectl(
        self, *args: str, stdin: str | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl -n <namespace> ARGS`` (exit status not checked)."""
        return self._kubectl(
            "-n", self.namespace, *args, check=False, stdin=stdin, timeout=timeout * self.scale
        )

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> str:
        """``kubectl -n <namespace> ARGS``; its stdout. A non-zero exit raises
        AssertionError with kubectl's stderr."""
        result = self.run_kubectl(*args, stdin=stdin, timeout=timeout)
        if result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result.stdout

    def in_namespace(self, namespace: str, *args: str, check: bool = True) -> str:
        """``kubectl -n NAMESPACE ARGS`` in another namespace (a release's); its stdout."""
        result = self._kubectl("-n", namespace, *args, check=check, timeout=60 * self.scale)
        return result.stdout

    def pods_in(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` that ``selector`` selects."""
        text = self.in_namespace(namespace, "get", "pods", "-l", selector, "-o", "json")
        return list(json.loads(text).get("items") or [])

    def manifest_file(self, *documents: Mapping[str, Any]) -> Path:
        """Write ``documents`` as one YAML file in the work directory; its path."""
        self._manifests += 1
        path = self.workdir / f"manifest-{self._manifests:03d}.yaml"
        path.write_text(yaml.safe_dump_all([dict(d) for d in documents], sort_keys=False))
        return path

    def apply(self, *documents: Mapping[str, Any], flags: Sequence[str] = ()) -> str:
        """``kubectl apply [FLAGS] -f`` ``documents`` (kubectl's default validation:
        the server refuses fields the CRD's schema does not know)."""
        return self.kubectl("apply", *flags, "-f", str(self.manifest_file(*documents)))

    def get(self, resource: str, name: str) -> dict[str, Any] | None:
        """``kubectl get RESOURCE NAME -o json``, or None when it does not exist."""
        result = self.run_kubectl("get", resource, name, "-o", "json", "--ignore-not-found")
        if result.returncode != 0:
            raise AssertionError(f"kubectl get {resource} {name}: {result.stderr.strip()}")
        text = result.stdout.strip()
        return dict(json.loads(text)) if text else None

    def list_objects(self, resource: str, selector: str | None = None) -> list[dict[str, Any]]:
        """The items of ``kubectl get RESOURCE [-l SELECTOR] -o json``."""
        args = ["get", resource, "-o", "json"]
        if selector:
            args += ["-l", selector]
        return list(json.loads(self.kubectl(*args)).get("items") or [])

    def status(self, resource: str, name: str) -> dict[str, Any]:
        """The ``status`` of an object (``{}`` when it has none or does not exist)."""
        obj = self.get(resource, name) or {}
        return dict(obj.get("status") or {})

    def wait(self, resource: str, condition: str, timeout: float = 60.0) -> None:
        """``kubectl wait RESOURCE --for=CONDITION`` (``condition=Ready``,
        ``jsonpath={.status.phase}=Running``, ``delete``) with a deadline. kubectl fails
        at once on an object that does not exist yet, so first wait for it to exist."""
        started = time.monotonic()
        if condition != "delete" and "/" in resource:
            kind, name = resource.split("/", 1)
            self.wait_until(lambda: self.get(kind, name), timeout, f"{resource} to exist")
        left = timeout * self.scale - (time.monotonic() - started)
        seconds = max(1, round(left))
        result = self.run_kubectl(
            "wait",
            resource,
            f"--for={condition}",
            f"--timeout={seconds}s",
            timeout=timeout + 30,
        )
        if result.returncode != 0:
            raise AssertionError(
                f"kubectl wait {resource} --for={condition} failed after {seconds} s: "
                f"{result.stderr.strip()}"
            )

    def wait_until(
        self, condition: Callable[[], T | None], timeout: float = 60.0, what: str = "condition"
    ) -> T:
        """Poll ``condition`` (about twice a second) until it returns something truthy."""
        return wait_until(condition, timeout * self.scale, what, interval=0.5)

    def events(self, involved: str | None = None) -> list[dict[str, Any]]:
        """Events of the namespace (about object ``involved`` only, when given), oldest
        first."""
        items = self.list_objects("events")
        if involved is not None:
            items = [e for e in items if (e.get("involvedObject") or {}).get("name") == involved]
        return sorted(items, key=_event_time)

    def event_reasons(self, involved: str) -> list[str]:
        """The reasons of the events about ``involved``, oldest first."""
        return [str(e.get("reason")) for e in self.events(involved)]

    # --- driver pods ------------------------------------------------------------------------

    def driver_pods(self, job: str) -> list[dict[str, Any]]:
        """The driver pods of GICJob ``job`` (every epoch still present)."""
        return self.list_objects("pods", f"gic.io/job={job},gic.io/role=driver")

    # --- faults (per kind of cluster) -------------------------------------------------------

    def kill_driver(self, pod: str) -> None:
        """Crash driver pod ``pod`` (its process dies at once, like a node failure)."""
        raise NotImplementedError

    def stop_operator(self) -> None:
        """Kill the operator without a chance to clean up (SIGKILL)."""
        raise NotImplementedError

    def start_operator(self) -> None:
        """Start the operator again after :meth:`stop_operator`."""
        raise NotImplementedError

    @contextlib.contextmanager
    def driver_paused(self, pod: str) -> Iterator[None]:
        """Freeze driver pod ``pod`` for the block, where the cluster can (it cannot serve
        control requests meanwhile); elsewhere a no-op. Tests use it to hold a state that
        would otherwise pass too quickly to act in."""
        del pod
        yield

    def restart_operator(self) -> None:
        """SIGKILL the operator, then start it again."""
        self.stop_operator()
        self.start_operator()

    # --- logs -------------------------------------------------------------------------------

    def operator_log(self) -> str:
        """What the operator logged so far."""
        raise NotImplementedError

    def pod_log(self, pod: str) -> str:
        """What a driver pod's process wrote so far."""
        return self.run_kubectl("logs", pod, "--tail=200").stdout

    def diagnostics(self) -> str:
        """Operator log, driver logs, resources and events: why a test failed."""
        log = "\n".join(
            line for line in self.operator_log().splitlines() if not _ROUTINE.search(line)
        )
        parts = [f"===== operator log (tail, routine kopf lines left out) =====\n{_tail(log, 250)}"]
        for pod in self.list_objects("pods", "gic.io/role=driver"):
            name = str(pod["metadata"]["name"])
            parts.append(
                f"===== driver pod {name} log (tail) =====\n{_tail(self.pod_log(name), 80)}"
            )
        resources = self.run_kubectl("get", "gj,gsp,pods,services", "-o", "yaml")
        parts.append(f"===== kubectl get gj,gsp,pods,services -o yaml =====\n{resources.stdout}")
        events = [
            f"{(e.get('involvedObject') or {}).get('name')}: {e.get('type')} {e.get('reason')}"
            f" x{e.get('count', 1)}: {e.get('message')}"
            for e in self.events()
        ]
        parts.append("===== events =====\n" + "\n".join(events))
        return "\n".join(parts)

    # --- jobs -------------------------------------------------------------------------------

    def output_uri(self, job: str) -> str:
        """Where GICJob ``job`` writes its sink output."""
        return join(self.defaults.output_root, self.namespace, job)

    def job_manifest(
        self,
        name: str,
        *,
        rows_per_batch: int = ROWS_PER_BATCH,
        restore: Mapping[str, Any] | None = None,
        upgrade_mode: str = "savepoint",
        env: Sequence[Mapping[str, str]] = (),
        extra_spec: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A GICJob running ``rate_count.py`` (13 keys, a batch a second) on the run's
        image, Spark settings and storage; ``extra_spec`` is merged into ``spec`` last."""
        d = self.defaults
        arguments = [
            "--output",
            self.output_uri(name),
            "--rows-per-batch",
            str(rows_per_batch),
            "--keys",
            str(KEYS),
            "--trigger",
            "1 second",
        ]
        checkpointing: dict[str, Any] = {
            "storage": d.storage,
            "credentialsSecret": d.credentials_secret,
            "buckets": d.buckets,
        }
        if d.s3_endpoint_url:
            checkpointing["s3EndpointUrl"] = d.s3_endpoint_url
        spec: dict[str, Any] = {
            "application": {
                "image": d.image,
                "mainFile": d.main_file,
                "arguments": arguments,
                "sparkConf": dict(d.spark_conf),
                "env": [dict(e) for e in env],
            },
            "checkpointing": checkpointing,
            "upgradeMode": upgrade_mode,
            "restartPolicy": {"maxRestarts": 5, "backoffSeconds": 1},
        }
        if restore is not None:
            spec["restore"] = dict(restore)
        _merge(spec, extra_spec or {})
        return {
            "apiVersion": API_VERSION,
            "kind": "GICJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
        }

    def delete_job(self, name: str, timeout: float = 90.0) -> None:
        """``kubectl delete gicjob NAME`` and wait until it and its driver pods are gone."""
        self.kubectl("delete", "gicjob", name, "--ignore-not-found", "--wait=false")
        self.wait_until(
            lambda: self.get("gicjob", name) is None and not self.driver_pods(name),
            timeout,
            f"GICJob {name} and its driver pods to be gone",
        )

    def cleanup(self) -> None:
        """Delete what the tests left in the namespace (jobs first, then savepoints)."""
        self.run_kubectl("delete", "gicjobs", "--all", "--wait=false")
        self.run_kubectl("delete", "savepoints", "--all", "--wait=false")


def _merge(target: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def _event_time(event: Mapping[str, Any]) -> tuple[str, int]:
    """Sort key: first time (seconds resolution), then the creation order where the
    resource version tells it."""
    meta = event.get("metadata") or {}
    when = (
        event.get("firstTimestamp") or event.get("eventTime") or meta.get("creationTimestamp") or ""
    )
    version = str(meta.get("resourceVersion") or "")
    return str(when), int(version) if version.isdigit() else 0


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])
