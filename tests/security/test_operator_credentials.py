"""The operator's credentials are used only where its administrator allowed, whatever path
of the operator touches storage, and never on a location a tenant wrote into a file.

* Savepoint disposal goes through the same admission as a reconcile: a GICJob whose
  ``s3EndpointUrl`` the allowlist refuses gets no request signed with the operator's key
  when its Savepoint is deleted (a real HTTP listener records what arrives).
* The recovery sweep reads a restore source only when it is the location the operator
  itself restored the job from (``status.restoredFrom``): a manifest naming another one
  (a local file such as ``/etc/passwd``, another job's checkpoint) is not read, and
  nothing of it appears in the status or an Event.
* Every object access of a job's storage is checked against the allowlist
  (:class:`~gic_operator.storage.storage_access.GuardedResolver`).
* The chart is safe by default: its default render gives the operator an allowlist that
  allows nothing; a root named in values is allowed, nothing else.
"""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World
from tests.operator.test_chart import _container, _render

from gic_operator.jobs.job_controller import JobController
from gic_operator.kube.naming import savepoint_dir, savepoint_request_id
from gic_operator.models import GICJobSpec
from gic_operator.operator_errors import StorageNotAllowedError
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.savepoints.savepoint_controller import SavepointController
from gic_operator.storage.job_storage import JobStorage, open_job_storage
from gic_operator.storage.storage_access import open_storage
from gic_runtime.checkpoint.catalog import list_checkpoints, read_manifest
from gic_runtime.checkpoint.manifest import RestoreLineage, RestoreMode
from gic_runtime.checkpoint.manifest_codec import encode_manifest
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.uri import StoreResolver

SECRET = "root:x:0:0:TOPSECRET-first-line"


class Recorder(http.server.BaseHTTPRequestHandler):
    """Records every request (method and path) and answers 403."""

    seen: list[str]

    def handle_one_request(self) -> None:
        self.raw_requestline = self.rfile.readline(65537)
        if not self.raw_requestline or not self.parse_request():
            return
        self.seen.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP endpoint on localhost: its URL and the requests it received."""
    seen: list[str] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def operator_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's own S3 credentials, as its environment holds them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAOPERATOROWNKEY00")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")


def test_disposal_sends_no_request_to_an_endpoint_not_allowed(
    tmp_path: Path, listener: tuple[str, list[str]], operator_key: None
) -> None:
    url, seen = listener
    world = World(tmp_path / "store")
    allowlist = StorageAllowlist.from_env(
        {"GIC_ALLOWED_STORAGE": "s3://gic", "GIC_ALLOWED_S3_ENDPOINTS": "https://s3.example.com"}
    )
    world.savepoints = SavepointController(
        world.kube, open_job_storage, clock=world.clock, allowlist=allowlist
    )
    world.apply_job(checkpointing={"storage": "s3://gic/team", "buckets": 8, "s3EndpointUrl": url})
    sp = world.create_savepoint("sp")
    rid = savepoint_request_id("sp", sp["metadata"]["uid"])
    path = savepoint_dir("s3://gic/team", NS, "wc", rid)
    world.kube.patch_status(
        "savepoints", NS, "sp", {"state": "Completed", "path": path, "requestId": rid}
    )
    body = world.kube.get_object("savepoints", NS, "sp")
    assert body is not None

    outcome = world.savepoints.dispose(body, 0)

    assert seen == [], "a request signed with the operator's key reached the endpoint"
    assert outcome.startswith("files kept") and url in outcome
    assert "DisposalRefused" in world.kube.reasons("sp")


def test_the_choke_point_refuses_an_endpoint_before_any_client(
    listener: tuple[str, list[str]], operator_key: None
) -> None:
    url, seen = listener
    allowlist = StorageAllowlist.from_env({"GIC_ALLOWED_STORAGE": "s3://gic"})
    with pytest.raises(StorageNotAllowedError, match="GIC_ALLOWED_S3_ENDPOINTS"):
        open_storage(allowlist, NS, "s3://gic/team", f"{NS}.wc", url)
    assert seen == []


class Recording(StoreResolver):
    """A resolver that records every URI resolved through it."""

    def __init__(self) -> None:
        super().__init__()
        self.resolved: list[str] = []

    def resolve(self, uri: str) -> tuple[ObjectStore, str]:
        self.resolved.append(uri)
        return super().resolve(uri)


def _forge_lineage(world: World, source_uri: str) -> None:
    """Rewrite the job's newest manifest (as its driver could) to name ``source_uri`` as
    its NoClaim restore source."""
    storage = world.storage()
    world.write_checkpoint(checkpoint=5)
    ref = list_checkpoints(storage.resolver, storage.root, storage.job_id)[-1]
    manifest = read_manifest(storage.resolver, ref.uri)
    forged = dataclasses.replace(
        manifest, restored_from=RestoreLineage(source_uri, RestoreMode.NO_CLAIM, 3)
    )
    Path(ref.uri.removeprefix("file://")).write_bytes(encode_manifest(forged, ref.uri))


def _texts(world: World) -> str:
    status = world.status()
    events = " ".join(e.message for e in world.kube.events)
    return f"{status} {events}"


@pytest.mark.parametrize("allowlisted", [True, False], ids=["allowlist", "unrestricted"])
@pytest.mark.parametrize("where", ["local-file", "other-job"])
def test_a_restore_source_a_driver_wrote_is_not_read_by_the_sweep(
    tmp_path: Path, allowlisted: bool, where: str
) -> None:
    world = World(tmp_path / "store")
    recording = Recording()

    def storage_for(spec: GICJobSpec, job_id: str) -> JobStorage:
        return JobStorage(recording, spec.checkpointing.storage, job_id)

    environ = {"GIC_ALLOWED_STORAGE": world.storage_uri}
    allowlist = StorageAllowlist.from_env(environ) if allowlisted else None
    world.jobs = JobController(world.kube, storage_for, clock=world.clock, allowlist=allowlist)
    secret = tmp_path / "etc" / "passwd"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    if where == "local-file":
        source = secret.as_uri()
    else:  # a location inside the allowed root the operator never restored from
        source = f"{world.storage_uri}/jobs/{NS}.other/checkpoints/chk-000000000003.manifest"
    world.apply_job()
    pod = world.run_driver()
    _forge_lineage(world, source)
    recording.resolved.clear()

    world.kube.set_pod_phase(NS, pod, "Failed", exit_code=137, reason="Error")
    world.reconcile()
    status = world.reconcile()

    assert source not in recording.resolved, "the forged restore source was read"
    assert "lastSweep" not in status, "nothing is swept on a forged lineage"
    assert SECRET not in _texts(world) and "TOPSECRET" not in _texts(world)
    reconciled = world.condition("Reconciled")
    assert reconciled["reason"] == "UntrustedInput", reconciled
    assert "not the one the operator restored the job from" in reconciled["message"]


def test_a_file_that_is_not_a_manifest_is_named_not_quoted(tmp_path: Path) -> None:
    secret = tmp_path / "passwd"
    secret.write_text(SECRET + "\n")
    with pytest.raises(Exception) as raised:
        read_manifest(StoreResolver(), secret.as_uri())
    assert str(secret) in str(raised.value) and "TOPSECRET" not in str(raised.value)


def test_every_object_access_is_checked(world_root: Path) -> None:
    allowlist = StorageAllowlist.from_env({"GIC_ALLOWED_STORAGE": world_root.as_uri()})
    storage = open_storage(allowlist, NS, world_root.as_uri(), f"{NS}.wc", None)
    with pytest.raises(StorageNotAllowedError, match="GIC_ALLOWED_STORAGE"):
        read_manifest(storage.resolver, "file:///etc/passwd")
    with pytest.raises(StorageNotAllowedError):
        storage.resolver.resolve(f"{world_root.as_uri()}/../x")
    other = StorageAllowlist.from_env({"GIC_ALLOWED_STORAGE": "team=s3://gic"})
    with pytest.raises(StorageNotAllowedError):
        open_storage(other, NS, world_root.as_uri(), f"{NS}.wc", None)


@pytest.fixture
def world_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir()
    return root


# --- the chart ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python", reason="helm-python-sdk renders the chart"
    )
    return module


def _allowlist(helm: ModuleType, values: dict[str, Any] | None) -> StorageAllowlist:
    """The allowlist the operator builds from the environment the chart gives it."""
    env = _container(_render(helm, values)).get("env", [])
    return StorageAllowlist.from_env({e["name"]: e["value"] for e in env if "value" in e})


def test_the_charts_default_install_allows_no_storage(helm: ModuleType) -> None:
    allowlist = _allowlist(helm, None)
    for uri in ("s3://any-bucket/x", "file:///", "file:///etc/passwd"):
        assert not allowlist.storage_allowed("gic-system", uri), uri
    assert not allowlist.endpoint_allowed("gic-system", "http://collector.example:9000")


def test_the_chart_allows_only_what_its_values_name(helm: ModuleType) -> None:
    values = {
        "storageAllowlist": {
            "storage": ["s3://gic/team"],
            "s3Endpoints": ["https://s3.example.com"],
        }
    }
    allowlist = _allowlist(helm, values)
    assert allowlist.storage_allowed("gic-system", "s3://gic/team/jobs")
    assert not allowlist.storage_allowed("gic-system", "s3://gic/other")
    assert allowlist.endpoint_allowed("gic-system", "https://s3.example.com")
    assert not allowlist.endpoint_allowed("gic-system", "http://collector.example:9000")
