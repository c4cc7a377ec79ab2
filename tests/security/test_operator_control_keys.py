"""The operator authenticates the control requests it writes, with a key per GICJob that
only that job's driver receives.

Each launch creates the job's ``<job>-gic-control`` Secret (immutable, owned by the
GICJob) holding a key derived from the operator key and the job's identity; the driver
gets it as ``GIC_CONTROL_KEY`` by ``secretKeyRef``, executors do not. Requests the
operator writes (a Savepoint, an upgrade's stop-with-savepoint) verify with that key --
as the driver checks them -- and not with another job's.

Drives the reconcilers against the in-memory API and real local storage.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.control_keys import ControlKeys
from gic_runtime.control import ControlChannel
from gic_runtime.control.auth import CONTROL_KEY_ENV, ControlKey, RequestGuard
from gic_runtime.control.model import ControlRequest


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def secret_key(world: World, job: str) -> ControlKey:
    """What the driver of ``job`` reads from ``GIC_CONTROL_KEY``."""
    secret = world.kube.secrets[(NS, f"{job}-gic-control")]
    assert secret["immutable"] is True
    [owner] = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("GICJob", job)
    assert owner["uid"] == world.job(job)["metadata"]["uid"]
    return ControlKey.from_text(base64.b64decode(secret["data"]["key"]).decode())


def driver_accepts(world: World, job: str, request: ControlRequest, key: ControlKey) -> bool:
    storage = world.storage(job)
    guard = RequestGuard(storage.root, storage.job_id, key, wall=time.time)
    return guard.refusal(request) is None


def stored(world: World, job: str, request_id: str) -> ControlRequest:
    storage = world.storage(job)
    request = ControlChannel(storage.resolver, storage.root, storage.job_id).request(request_id)
    assert request is not None
    return request


def test_each_driver_gets_its_own_key_by_reference_and_executors_none(world: World) -> None:
    world.apply_job("wc")
    world.apply_job("other")
    pod_wc = world.run_driver("wc")
    world.run_driver("other")

    assert secret_key(world, "wc").secret != secret_key(world, "other").secret
    pod = world.kube.pods[(NS, pod_wc)]
    [env] = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == CONTROL_KEY_ENV]
    assert env == {
        "name": CONTROL_KEY_ENV,
        "valueFrom": {"secretKeyRef": {"name": "wc-gic-control", "key": "key"}},
    }
    templates = json.dumps(list(world.kube.config_maps.values()))
    assert "executor" in templates and "gic-control" not in templates  # executors


def test_the_operators_requests_verify_with_the_jobs_key_only(world: World) -> None:
    world.apply_job("wc")
    world.apply_job("other")
    world.run_driver("wc")
    world.run_driver("other")

    world.create_savepoint("sp")
    rid = world.reconcile_savepoint("sp")["requestId"]
    request = stored(world, "wc", rid)
    assert driver_accepts(world, "wc", request, secret_key(world, "wc"))
    assert not driver_accepts(world, "wc", request, secret_key(world, "other"))

    world.set_arguments(["--v2"])  # an upgrade: stop-with-savepoint
    upgrade = world.reconcile()["pending"]["requestId"]
    assert driver_accepts(world, "wc", stored(world, "wc", upgrade), secret_key(world, "wc"))


def test_keys_follow_the_operator_key_and_the_jobs_identity() -> None:
    one = ControlKeys.from_env({"GIC_OPERATOR_CONTROL_KEY": "x" * 40})
    two = ControlKeys.from_env({"GIC_OPERATOR_CONTROL_KEY": "y" * 40})
    key = one.for_job("ns", "wc", "uid-1")
    assert key == one.for_job("ns", "wc", "uid-1")  # an operator restart derives the same
    others: list[Any] = [
        one.for_job("ns", "wc", "uid-2"),  # the GICJob deleted and created again
        one.for_job("ns2", "wc", "uid-1"),
        one.for_job("ns", "wc2", "uid-1"),
        two.for_job("ns", "wc", "uid-1"),
    ]
    assert all(k != key for k in others)
    assert "x" * 40 not in repr(one) and key.secret.decode() not in repr(key)
    assert not ControlKeys.from_env({}).configured
