"""Property: whatever happens to a job (driver crashes, finishes, spec edits, suspend and
resume, savepoints succeeding or failing, slow pod deletion, operator restarts), the job
reconciler never runs two drivers at once and every launch gets a higher epoch.

Driven with hypothesis over random event sequences on the seam fake TestingKubeApi and
real local checkpoint storage.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_operator.jobs.job_controller import JobController
from gic_operator.storage.job_storage import open_job_storage
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.model import OutcomeState
from gic_runtime.errors import FencedError
from gic_runtime.fencing import claim_epoch

from .test_job_lifecycle import NS, World

ACTIONS = (
    "reconcile",
    "running",
    "crash",
    "finish",
    "edit",
    "suspend",
    "resume",
    "savepoint_ok",
    "savepoint_fail",
    "time",
    "restart_operator",
    "slow_deletes",
    "driver_claims",
)


def _drivers(world: World) -> list[tuple[str, bool]]:
    return [
        (name, bool(pod["metadata"].get("deletionTimestamp")))
        for (ns, name), pod in world.kube.pods.items()
        if ns == NS
    ]


def _complete_pending(world: World, ok: bool) -> None:
    storage = world.storage()
    channel = ControlChannel(storage.resolver, storage.root, storage.job_id)
    for request in channel.pending():
        if ok:
            outcome = Outcome(
                request.request_id,
                OutcomeState.COMPLETED,
                path=request.target,
                checkpoint_id=1,
                size_bytes=1,
                files=1,
                finished_at=world.clock.t,
            )
        else:
            outcome = Outcome(
                request.request_id, OutcomeState.FAILED, error="boom", finished_at=world.clock.t
            )
        channel.complete(outcome)


def _act(world: World, action: str) -> None:
    kube = world.kube
    status = world.status()
    pod = status.get("driverPod")
    live = pod is not None and (NS, pod) in kube.pods
    if action == "reconcile":
        world.reconcile()
    elif action in ("running", "crash", "finish") and live:
        phase = {"running": "Running", "crash": "Failed", "finish": "Succeeded"}[action]
        kube.set_pod_phase(NS, pod, phase, exit_code={"Failed": 137, "Succeeded": 0}.get(phase))
    elif action == "edit":
        world.set_arguments([str(world.clock.t)])
    elif action in ("suspend", "resume"):
        world.set_state("suspended" if action == "suspend" else "running")
    elif action in ("savepoint_ok", "savepoint_fail"):
        _complete_pending(world, action == "savepoint_ok")
    elif action == "time":
        world.clock.t += 120
    elif action == "restart_operator":
        world.jobs = JobController(kube, open_job_storage, clock=world.clock)
    elif action == "slow_deletes":
        kube.hold_deletions = not kube.hold_deletions
        if not kube.hold_deletions:
            for name, deleting in _drivers(world):
                if deleting:
                    kube.finish_deletion(NS, name)
    elif action == "driver_claims" and live and status.get("epoch"):
        storage = world.storage()
        # Fenced when the operator moved on (a real driver would then stop itself).
        with contextlib.suppress(FencedError):
            claim_epoch(
                storage.resolver,
                storage.root,
                storage.job_id,
                epoch=int(status["epoch"]),
                claimed_by=pod,
            )


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["savepoint", "last-state", "stateless"]),
    st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=40),
)
def test_one_driver_at_a_time_and_epochs_only_grow(mode: str, actions: list[str]) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        world = World(Path(tmp) / "store")
        world.apply_job(upgradeMode=mode, restartPolicy={"maxRestarts": 100, "backoffSeconds": 1})
        world.reconcile()
        epochs_launched: list[int] = []
        seen_pods: set[str] = set()
        for action in actions:
            before = {name for name, _ in _drivers(world)}
            _act(world, action)
            if action != "reconcile":
                world.reconcile()
            drivers = _drivers(world)
            alive = [name for name, deleting in drivers if not deleting]
            assert len(alive) <= 1, f"two drivers alive after {action}: {drivers}"
            created = {name for name, _ in drivers} - before - seen_pods
            if created:
                assert len(drivers) == 1, f"{created} created while {drivers} exist"
            for name in sorted(created):
                epochs_launched.append(int(name.rsplit("-", 1)[1]))
            seen_pods |= created
        assert epochs_launched == sorted(set(epochs_launched)), epochs_launched
