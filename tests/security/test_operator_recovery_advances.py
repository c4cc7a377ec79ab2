"""Recovery always advances, whatever a driver wrote.

* A status record the operator cannot read (too deep, too large, not JSON, of the wrong
  types, not even a file) counts as the report of a dead driver, not as an error that
  stops the pass: a job whose driver died is recovered.
* A recovery chooses its epoch and records it in ``status.pending.epoch`` before it
  claims it: a claim that fails (here on a manifest claiming an epoch below its
  writer's, next to a start record the driver garbled) is retried by every later pass
  with that same epoch, so passes never claim new epochs.
* Every text the operator writes into a status or an Event is bounded, whatever a
  driver reports: a status patch is never refused for its size.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.kube.kube_events import EVENT_MESSAGE_MAX, STATUS_TEXT_MAX
from gic_runtime.fencing import highest_epoch
from gic_runtime.formats import encode_text_record
from gic_runtime.status.record_file import MAGIC as STATUS_MAGIC
from gic_runtime.status.record_file import STATUS_MAX_BYTES

JOB = f"{NS}.wc"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def job_dir(world: World) -> Path:
    return world.root / "jobs" / JOB


def _status(payload: bytes) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(encode_text_record(STATUS_MAGIC, 1, payload))

    return write


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_bytes(b"x")


UNREADABLE: dict[str, Callable[[Path], None]] = {
    "too-deep": _status(b'{"a":' * 200_000 + b"1" + b"}" * 200_000),
    "too-large": lambda path: path.write_bytes(b"GICT 1 " + b"x" * (STATUS_MAX_BYTES + 10)),
    "not-json": _status(b"{not json"),
    "wrong-types": _status(json.dumps({"job_id": 5, "epoch": "one", "state": []}).encode()),
    "a-directory": _directory,
}


@pytest.mark.parametrize("spoil", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_a_dead_driver_with_an_unreadable_status_record_is_recovered(
    world: World, spoil: Callable[[Path], None]
) -> None:
    world.apply_job()
    pod = world.run_driver()
    spoil(job_dir(world) / "status.json")
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    status = world.reconcile()
    assert status["phase"] == "Recovering", status.get("message")
    status = world.reconcile()
    assert status["phase"] == "Deploying", status.get("message")
    assert status["driverPod"] != pod and status["restarts"] == 1
    assert world.kube.get_pod(NS, status["driverPod"]) is not None
    assert world.condition("Reconciled")["status"] == "True"


def _manifest(checkpoint: int, epoch: int) -> bytes:
    body = {
        "job_id": JOB,
        "checkpoint_id": checkpoint,
        "epoch": epoch,
        "created_at": 1.0,
        "num_buckets": 1,
        "kind": "checkpoint",
        "savepoint": None,
        "restored_from": None,
        "base": "..",
        "engine": {},
        "sink": {},
        "objects": [],
        "tokens": [],
        "buckets": [],
    }
    text = json.dumps(body, separators=(",", ":"), sort_keys=True)
    return encode_text_record("GICM", 2, text.encode())


def test_a_claim_that_fails_is_retried_with_the_same_epoch(world: World) -> None:
    world.apply_job()
    pod = world.run_driver()
    # The driver of epoch 1 writes a manifest claiming epoch 0 and garbles its epoch's
    # start record: a claim reading the newest manifest then fails after its marker.
    checkpoints = job_dir(world) / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "chk-000000000005.manifest").write_bytes(_manifest(5, epoch=0))
    epochs = job_dir(world) / "epochs"
    epochs.mkdir(parents=True)
    (epochs / "epoch-000000000001").write_bytes(b"garbage")
    (epochs / "epoch-000000000001.start").write_bytes(b"GICB 1 crc32c=00000000\ngarbage")
    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=1)
    world.reconcile()  # schedules the recovery
    storage = world.storage()
    claimed = []
    for _ in range(5):
        status = world.reconcile()
        claimed.append(highest_epoch(storage.resolver, storage.root, storage.job_id))
    assert claimed == [2] * 5, f"one epoch for the recovery, got {claimed}"
    assert status["pending"]["epoch"] == 2 and status["restarts"] == 1
    assert status["phase"] == "Recovering"
    assert world.condition("Reconciled")["reason"] == "UnreadableFile"
    assert "epoch-000000000001.start" in status["message"]
    # Once the driver's garbage is moved away, the same epoch's claim completes.
    (epochs / "epoch-000000000001.start").unlink()
    status = world.reconcile()
    assert status["phase"] == "Deploying" and status["epoch"] == 3
    assert highest_epoch(storage.resolver, storage.root, storage.job_id) == 2
    assert (epochs / "epoch-000000000002.start").exists()


def _texts(world: World, plural: str, name: str) -> list[str]:
    body = world.kube.get_object(plural, NS, name)
    assert body is not None
    status: dict[str, Any] = body["status"]
    texts = [str(status.get(key, "")) for key in ("message", "error")]
    return texts + [c["message"] for c in status.get("conditions", [])]


def test_a_huge_text_a_driver_reports_is_cut_in_what_the_operator_writes(world: World) -> None:
    huge = "tenant text " * 5_000  # 60,000 characters, under the control record bound
    world.apply_job()
    world.run_driver()
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None
    world.savepoints.reconcile(sp)
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None
    world.set_state("suspended")
    rid = world.reconcile()["pending"]["requestId"]
    world.complete(rid, error=huge)
    world.complete(sp["status"]["requestId"], error=huge)
    status = world.reconcile()
    world.savepoints.reconcile(sp)

    assert status["message"].startswith("suspend savepoint failed: tenant text")
    for plural, name in (("gicjobs", "wc"), ("savepoints", "sp")):
        texts = _texts(world, plural, name)
        assert any(len(t) == STATUS_TEXT_MAX for t in texts), f"{plural}: the text was cut"
        assert max(map(len, texts)) <= STATUS_TEXT_MAX
    events = [e for e in world.kube.events if e.name in ("wc", "sp")]
    assert any("tenant text" in e.message for e in events)
    assert max(len(e.message) for e in events) <= EVENT_MESSAGE_MAX
