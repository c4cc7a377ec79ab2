"""The operator uses only the storage and S3 endpoints its administrator allows.

It reads, writes and deletes a job's storage with its own credentials, so a GICJob whose
``spec.checkpointing.storage``, ``spec.restore.path`` or
``spec.checkpointing.s3EndpointUrl`` lies outside the allowlist
(``GIC_ALLOWED_STORAGE``, ``GIC_ALLOWED_S3_ENDPOINTS``; entries ``VALUE`` or
``NAMESPACE=VALUE``) is ``Invalid`` with ``Ready=False`` naming the field, and no
storage of it is opened: no request is signed for an endpoint a tenant chose (which
would disclose the operator's access key id), no bucket outside the list is touched.
Store clients are kept per allowed endpoint only, and at most a bounded number of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.jobs.job_controller import JobController
from gic_operator.main import parse_args, settings_from_args
from gic_operator.models import GICJobSpec
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.savepoints.savepoint_controller import SavepointController
from gic_operator.storage.job_storage import (
    MAX_RESOLVERS,
    JobStorage,
    open_job_storage,
    resolver_for,
)
from gic_operator.storage.job_storage import _resolvers as resolvers
from gic_runtime.errors import ConfigurationError

ATTACKER = "http://collector.attacker.example:9000"


class Opened:
    """A storage factory that records every storage it opens."""

    def __init__(self) -> None:
        self.opened: list[tuple[str, str | None, str]] = []

    def __call__(self, spec: GICJobSpec, job_id: str) -> JobStorage:
        cp = spec.checkpointing
        self.opened.append((cp.storage, cp.s3_endpoint_url, job_id))
        return open_job_storage(spec, job_id)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "store")


def restricted(world: World, environ: dict[str, str]) -> Opened:
    """Reconcilers with the allowlist ``environ`` configures; returns the storage spy."""
    allowlist = StorageAllowlist.from_env(environ)
    opened = Opened()
    world.jobs = JobController(world.kube, opened, clock=world.clock, allowlist=allowlist)
    world.savepoints = SavepointController(
        world.kube, opened, clock=world.clock, allowlist=allowlist
    )
    return opened


def invalid_because(world: World, field: str, name: str = "wc") -> dict[str, Any]:
    status = world.reconcile(name)
    assert status["phase"] == "Invalid"
    ready = world.condition("Ready", name)
    assert (ready["status"], ready["reason"]) == ("False", "StorageNotAllowed")
    assert field in ready["message"] and field in status["message"]
    assert [pod for (_, pod) in world.kube.pods if pod.startswith(f"{name}-driver")] == []
    assert "StorageNotAllowed" in world.kube.reasons(name)
    return status


def test_storage_outside_the_allowlist_is_invalid_and_never_opened(
    world: World, tmp_path: Path
) -> None:
    opened = restricted(world, {"GIC_ALLOWED_STORAGE": f"file://{tmp_path}/allowed"})
    world.apply_job(checkpointing={"storage": f"file://{tmp_path}/other", "buckets": 8})
    status = invalid_because(world, "spec.checkpointing.storage")
    assert f"file://{tmp_path}/allowed" in status["message"], "says what is allowed"
    assert opened.opened == []
    assert not (tmp_path / "other").exists()


def test_prefix_match_is_at_a_path_boundary(world: World, tmp_path: Path) -> None:
    restricted(world, {"GIC_ALLOWED_STORAGE": f"file://{tmp_path}/team"})
    world.apply_job(checkpointing={"storage": f"file://{tmp_path}/team-b/x", "buckets": 8})
    invalid_because(world, "spec.checkpointing.storage")
    world.apply_job(checkpointing={"storage": f"file://{tmp_path}/team/../x", "buckets": 8})
    invalid_because(world, "spec.checkpointing.storage")
    world.apply_job(checkpointing={"storage": f"file://{tmp_path}/team/jobs", "buckets": 8})
    assert world.reconcile()["phase"] == "Deploying"


def test_endpoint_outside_the_allowlist_is_invalid_and_gets_no_client(
    world: World, tmp_path: Path
) -> None:
    opened = restricted(world, {"GIC_ALLOWED_STORAGE": f"file://{tmp_path}"})
    world.apply_job(
        checkpointing={"storage": world.storage_uri, "buckets": 8, "s3EndpointUrl": ATTACKER}
    )
    invalid_because(world, "spec.checkpointing.s3EndpointUrl")
    assert opened.opened == []
    assert ATTACKER not in resolvers


def test_allowed_endpoint_and_per_namespace_entries(world: World, tmp_path: Path) -> None:
    restricted(
        world,
        {
            "GIC_ALLOWED_STORAGE": f"other-team=file://{tmp_path}, {NS}=file://{tmp_path}/store",
            "GIC_ALLOWED_S3_ENDPOINTS": f"{NS}=HTTP://S3.Local:8333/",
        },
    )
    world.apply_job(
        checkpointing={
            "storage": world.storage_uri,
            "buckets": 8,
            "s3EndpointUrl": "http://s3.local:8333",
        }
    )
    assert world.reconcile()["phase"] == "Deploying"
    world.apply_job("other", checkpointing={"storage": f"file://{tmp_path}", "buckets": 8})
    invalid_because(world, "spec.checkpointing.storage", "other")


def test_restore_path_outside_the_allowlist_is_invalid(world: World, tmp_path: Path) -> None:
    opened = restricted(world, {"GIC_ALLOWED_STORAGE": world.storage_uri})
    world.apply_job(restore={"path": f"file://{tmp_path}/elsewhere/savepoints/x"})
    invalid_because(world, "spec.restore.path")
    assert opened.opened == []


def test_a_savepoint_of_a_job_with_disallowed_storage_opens_nothing(
    world: World, tmp_path: Path
) -> None:
    world.apply_job()
    world.run_driver()
    world.kube.create_object(
        "savepoints", NS, {"metadata": {"name": "sp", "namespace": NS}, "spec": {"job": "wc"}}
    )
    opened = restricted(world, {"GIC_ALLOWED_STORAGE": f"file://{tmp_path}/allowed"})
    body = world.kube.get_object("savepoints", NS, "sp")
    assert body is not None
    world.savepoints.reconcile(body)
    sp = world.kube.get_object("savepoints", NS, "sp")
    assert sp is not None
    assert sp["status"].get("state", "TriggerPending") == "TriggerPending"
    assert opened.opened == []
    reconciled = [c for c in sp["status"]["conditions"] if c["type"] == "Reconciled"]
    assert reconciled and reconciled[0]["reason"] == "StorageNotAllowed"


def test_no_allowlist_allows_nothing(world: World) -> None:
    allowlist = StorageAllowlist.from_env({})
    assert not allowlist.configured
    assert not allowlist.storage_allowed(NS, world.storage_uri)
    opened = restricted(world, {})
    world.apply_job(
        checkpointing={"storage": world.storage_uri, "buckets": 8, "s3EndpointUrl": ATTACKER}
    )
    status = invalid_because(world, "spec.checkpointing.storage")
    assert "allowed: none" in status["message"] and "storageAllowlist.storage" in status["message"]
    assert opened.opened == []


def test_only_an_explicit_star_allows_everything(world: World) -> None:
    restricted(world, {"GIC_ALLOWED_STORAGE": "*", "GIC_ALLOWED_S3_ENDPOINTS": "*"})
    world.apply_job(
        checkpointing={"storage": world.storage_uri, "buckets": 8, "s3EndpointUrl": ATTACKER}
    )
    assert world.reconcile()["phase"] == "Deploying"


@pytest.mark.parametrize(
    ("storage", "endpoints", "namespace", "uri", "allowed"),
    [
        ("s3://gic/prod", "", "a", "s3://gic/prod", True),
        ("s3://gic/prod", "", "a", "s3://gic/prod/team", True),
        ("s3://gic/prod", "", "a", "s3://gic/production", False),
        ("s3://gic/prod", "", "a", "s3://gic", False),
        ("s3://gic", "", "a", "s3://gic/anything", True),
        ("s3://gic", "", "a", "s3://gic2/x", False),
        ("b=s3://gic", "", "a", "s3://gic/x", False),
        ("b=s3://gic,a=*", "", "a", "s3://anywhere/x", True),
        ("*", "", "a", "file:///anything", True),
        ("", "http://s3:8333", "a", "s3://gic", False),
    ],
)
def test_storage_allowlist_format(
    storage: str, endpoints: str, namespace: str, uri: str, allowed: bool
) -> None:
    allowlist = StorageAllowlist.from_env(
        {"GIC_ALLOWED_STORAGE": storage, "GIC_ALLOWED_S3_ENDPOINTS": endpoints}
    )
    assert allowlist.storage_allowed(namespace, uri) is allowed


def test_endpoint_allowlist_format() -> None:
    allowlist = StorageAllowlist.from_env(
        {"GIC_ALLOWED_STORAGE": "s3://gic", "GIC_ALLOWED_S3_ENDPOINTS": "https://S3.example.com/"}
    )
    assert allowlist.endpoint_allowed("a", "https://s3.example.com")
    assert not allowlist.endpoint_allowed("a", "http://s3.example.com")
    assert not allowlist.endpoint_allowed("a", "https://s3.example.com.attacker.example")
    assert not allowlist.endpoint_allowed("a", "https://user:pw@s3.example.com")
    no_endpoints = StorageAllowlist.from_env({"GIC_ALLOWED_STORAGE": "s3://gic"})
    assert not no_endpoints.endpoint_allowed("a", "https://s3.example.com")


@pytest.mark.parametrize(
    "environ",
    [
        {"GIC_ALLOWED_STORAGE": "gic/prod"},
        {"GIC_ALLOWED_STORAGE": "ftp://host/x"},
        {"GIC_ALLOWED_STORAGE": "s3://gic/../x"},
        {"GIC_ALLOWED_S3_ENDPOINTS": "s3.example.com"},
        {"GIC_ALLOWED_S3_ENDPOINTS": "https://k:s@s3.example.com"},
    ],
)
def test_malformed_allowlists_are_refused(
    environ: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigurationError):
        StorageAllowlist.from_env(environ)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--namespace", "team"])
    assert exit_info.value.code == 2
    assert next(iter(environ)) in capsys.readouterr().err


def test_the_command_line_reads_the_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIC_ALLOWED_STORAGE", "team=s3://gic/team")
    settings = settings_from_args(parse_args(["--namespace", "team"]))
    assert settings.allowlist.storage_allowed("team", "s3://gic/team/x")
    assert not settings.allowlist.storage_allowed("other", "s3://gic/team/x")


def test_store_clients_are_bounded() -> None:
    for port in range(MAX_RESOLVERS + 20):
        resolver_for(f"http://127.0.0.1:{20000 + port}")
    assert len(resolvers) <= MAX_RESOLVERS
