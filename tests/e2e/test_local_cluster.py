"""The local cluster as README.md's "A local cluster" documents it, command by command.

On the session's control plane (what ``make cluster`` starts: the same
:class:`~tests.controlplane.cluster.ControlPlane`, whose process kubelet runs pods with
this virtualenv's ``bin`` first on their ``PATH`` and a loopback pod IP each), in a shell
with the ``KUBECONFIG`` and ``PATH`` that ``make cluster`` prints (the built ``kubectl``
and the ``helm`` of ``controlplane/helm``), from the repository's root:

1. ``helm install`` of the chart with the README's values (two operator replicas, the
   chart's default): both pods run and stay up, each serving its probe and metrics ports
   on its own pod IP; no pod of the release fails;
2. a GICJob in a namespace the operator does not watch gets the Warning Event
   ``NotWatched`` (``warnUnwatchedJobs``);
3. ``sed ... examples/k8s/gicjob-local.yaml | kubectl apply -f -``: the job runs and
   checkpoints, and a second job from the same file runs beside it; both drivers serve
   their metrics on port 9090 of their own pod IPs;
4. the commands ``make cluster`` prints are these.

Control-plane mode only (skipped with ``GIC_E2E_KUBECONFIG``). Leaves the release and the
jobs uninstalled; checkpoints and output stay under ``.cluster/`` (git-ignored), where a
later run resumes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..controlplane.__main__ import APPLY, INSTALL, WATCH, usage
from ..controlplane.cluster import ControlPlane
from ..controlplane.helm import build_helm, helm_bin_dir, helm_missing
from .kubectl import wait_until

pytestmark = [
    pytest.mark.skipif(
        bool(os.environ.get("GIC_E2E_KUBECONFIG")), reason="runs the local cluster's path"
    ),
    pytest.mark.slow,
    pytest.mark.controlplane,
]

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
ELSEWHERE = "kubectl create namespace elsewhere"
APPLY_ELSEWHERE = (
    'sed "s|/path/to/gic|$PWD|g" examples/k8s/gicjob-local.yaml | kubectl -n elsewhere apply -f -'
)
#: A second job from the same file: its own name and output directory.
APPLY_SECOND = (
    'sed -e "s|/path/to/gic|$PWD|g" -e "s|rate-count|rate-count-2|g" '
    "examples/k8s/gicjob-local.yaml | kubectl apply -f -"
)
UNINSTALL = "helm uninstall gic-operator -n gic-system"
JOBS = ("rate-count", "rate-count-2")
SELECTOR = "app.kubernetes.io/instance=gic-operator"


class Shell:
    """``bash -c`` in the repository's root with ``make cluster``'s KUBECONFIG and PATH."""

    def __init__(self, plane: ControlPlane) -> None:
        path = f"{plane.kubectl_path.parent}:{helm_bin_dir()}:{os.environ.get('PATH', '')}"
        self.env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig), "PATH": path}

    def __call__(self, command: str, *, check: bool = True) -> str:
        started = time.monotonic()
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        print(f"$ {command}  ({time.monotonic() - started:.1f} s)\n{result.stdout}{result.stderr}")
        if check and result.returncode != 0:
            raise AssertionError(f"{command!r} exited {result.returncode}: {result.stderr}")
        return result.stdout

    def json(self, command: str) -> Any:
        return json.loads(self(command + " -o json"))


@pytest.fixture(scope="module")
def shell(control_plane: ControlPlane) -> Iterator[Shell]:
    if helm_missing():
        build_helm()
    run = Shell(control_plane)
    try:
        yield run
    finally:
        for namespace in ("default", "elsewhere"):
            run(f"kubectl -n {namespace} delete gicjob --all --wait=false", check=False)
        wait_until(
            lambda: not run("kubectl -n default get gicjob -o name", check=False).strip(),
            120,
            "the jobs to go (the operator removes its finalizers)",
            interval=1,
        )
        run(UNINSTALL, check=False)
        run("kubectl delete namespace elsewhere --wait=false", check=False)
        kubelet = control_plane.kubelet
        wait_until(
            lambda: not [p for p in kubelet.processes() if p.startswith("gic-system/")],
            120,
            "the operator's processes to end",
            interval=1,
        )


def operator_pods(shell: Shell) -> list[dict[str, Any]]:
    return list(shell.json(f"kubectl -n gic-system get pods -l {SELECTOR}")["items"])


def job_status(shell: Shell, name: str, namespace: str = "default") -> dict[str, Any]:
    found = shell.json(f"kubectl -n {namespace} get gicjob {name}")
    return dict(found.get("status") or {})


def last_checkpoint(status: dict[str, Any]) -> int:
    return int((status.get("lastCheckpoint") or {}).get("id", -1))


def checkpointed(shell: Shell, name: str, after: int) -> dict[str, Any] | None:
    """The job's status once it runs with a checkpoint newer than ``after``."""
    status = job_status(shell, name)
    return status if status.get("phase") == "Running" and last_checkpoint(status) > after else None


def start(shell: Shell, command: str, name: str) -> dict[str, Any]:
    """Apply a job and wait for a checkpoint of its own. ``.cluster/storage`` keeps what
    earlier runs checkpointed (applying the job again resumes it, as the README says), and
    the status shows the newest one at once: wait for one newer than those."""
    checkpoints = REPO / ".cluster" / "storage" / "jobs" / f"default.{name}" / "checkpoints"
    kept = [int(path.name[4:16]) for path in checkpoints.glob("chk-*.manifest")]
    before = max(kept, default=-1)
    started = time.monotonic()
    shell(command)
    status = wait_until(lambda: checkpointed(shell, name, before), 300, name, interval=2)
    print(f"apply -> {name} Running with a new checkpoint: {time.monotonic() - started:.1f} s")
    return status


def metrics_of(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}:9090/metrics", timeout=10) as response:
        return str(response.read().decode())


def test_the_readme_and_make_cluster_give_these_commands(control_plane: ControlPlane) -> None:
    commands = (INSTALL, APPLY, WATCH, ELSEWHERE, APPLY_ELSEWHERE, "make cluster", UNINSTALL)
    for command in commands:
        assert command in README, command
    printed = usage(control_plane)
    assert f"export KUBECONFIG={control_plane.kubeconfig}" in printed
    assert f"export PATH={control_plane.kubectl_path.parent}:{helm_bin_dir()}:$PATH" in printed
    for command in (INSTALL, APPLY, WATCH):
        assert f"\n  {command}\n" in printed, command


def test_helm_installs_two_operator_replicas_that_stay_up(shell: Shell) -> None:
    version = shell("helm version --short")
    assert version.startswith(helm_bin_dir().parent.name.removeprefix("helm-")), version
    started = time.monotonic()
    notes = shell(INSTALL)
    assert "Warning Event NotWatched" in notes, notes
    pods = wait_until(lambda: two_running(shell), 120, "two running operator pods", interval=1)
    print(f"helm install -> two operator pods Running: {time.monotonic() - started:.1f} s")
    ips = sorted(p["status"]["podIP"] for p in pods)
    assert len(pods) == 2 and len(set(ips)) == 2, pods
    for ip in ips:  # each replica serves its probes and metrics on its own pod IP
        wait_until(lambda ip=ip: healthz(ip), 90, f"/healthz on {ip}:8081", interval=1)
        # the metrics server starts beside the probes, not necessarily before them
        body = wait_until(lambda ip=ip: metrics(ip), 90, f"/metrics on {ip}:8080", interval=1)
        assert b"gic_operator" in body


def two_running(shell: Shell) -> list[dict[str, Any]] | None:
    """The release's pods when they are exactly two, both Running."""
    pods = operator_pods(shell)
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    return pods if len(pods) == len(running) == 2 else None


def metrics(address: str) -> bytes | None:
    """The replica's metrics page, ``None`` while its server does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}:8080/metrics", timeout=5) as response:
            return bytes(response.read())
    except OSError:
        return None


def healthz(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}:8081/healthz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_a_job_in_an_unwatched_namespace_gets_a_warning(shell: Shell) -> None:
    shell(ELSEWHERE)
    shell(APPLY_ELSEWHERE)

    def warned() -> list[dict[str, Any]]:
        events = shell.json("kubectl -n elsewhere get events")["items"]
        return [e for e in events if e.get("reason") == "NotWatched"]

    [event] = wait_until(warned, 150, "the NotWatched event", interval=2)[:1]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "GICJob"
    assert event["involvedObject"]["name"] == "rate-count"
    assert event["message"].startswith(
        "namespace elsewhere is not watched by the GIC operator (it watches default)"
    )
    assert "--set 'watchNamespaces={default,elsewhere}'" in event["message"]
    assert job_status(shell, "rate-count", "elsewhere") == {}  # not run, as the event says


def test_the_example_job_runs_and_checkpoints_beside_a_second_one(shell: Shell) -> None:
    first = start(shell, APPLY, "rate-count")
    second = start(shell, APPLY_SECOND, "rate-count-2")
    # The first job went on beside the second: same driver, no restart since.
    again = wait_until(
        lambda: checkpointed(shell, "rate-count", last_checkpoint(first)), 60, "rate-count"
    )
    assert again["driverPod"] == first["driverPod"]
    assert again.get("restarts", 0) == first.get("restarts", 0)
    drivers = [shell.json(f"kubectl get pod {s['driverPod']}") for s in (first, second)]
    addresses = [d["status"]["podIP"] for d in drivers]
    assert len(set(addresses)) == 2
    for name, driver, address in zip(JOBS, drivers, addresses, strict=True):
        assert driver["status"]["phase"] == "Running"
        body = metrics_of(address)  # both on port 9090, each on its own pod IP
        assert f'gic_batches_total{{job_id="default.{name}"}}' in body, body[:2000]
    # The operator's replicas are the two of the install: none failed and was replaced.
    assert two_running(shell) is not None, operator_pods(shell)
