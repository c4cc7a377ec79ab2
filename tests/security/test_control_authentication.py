"""Control requests are honoured only when authenticated for the job.

Two tenants share one bucket (one key for both, as the storage allowlist invites):
tenant A can write into tenant B's control directory. In the report, a request written
there made B's driver take a stop-with-savepoint into A's prefix. Here B's driver runs
its real control path (:func:`gic_runtime.spark.control_requests.serve_pending` with the
:class:`~gic_runtime.control.auth.RequestGuard` the driver builds from
``GIC_CONTROL_KEY``) against requests written by A: with no key, a wrong key, A's own
key, A's genuine request copied over, a replay and an expired one -- none is served, each
gets a failed outcome saying why, is counted, and B keeps running. What the operator or
the CLI writes with B's key is served.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.cli.conftest import BUCKETS, GIC, TestingStorage

from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.config import GICSettings
from gic_runtime.control import ControlChannel, OutcomeState
from gic_runtime.control.auth import CONTROL_KEY_ENV, ControlKey, RequestGuard, canonical_bytes
from gic_runtime.control.channel import outcome_uri, request_uri
from gic_runtime.control.model import SavepointRequest
from gic_runtime.driver import CheckpointTimeline
from gic_runtime.errors import ConfigurationError
from gic_runtime.layout import SAVEPOINT_MANIFEST
from gic_runtime.spark.control_requests import serve_pending
from gic_runtime.spark.telemetry import Telemetry
from gic_runtime.status import JobState

JOB_A = "tenant-a.events"
JOB_B = "tenant-b.orders"
MARKER = "FORGED-BY-TENANT-A"


def _key() -> ControlKey:
    return ControlKey.from_text(secrets.token_urlsafe(32))


class Tenant:
    """One tenant's storage root in the shared bucket, its job and its control key."""

    def __init__(self, bucket: TestingStorage, name: str, job_id: str) -> None:
        self.storage = copy.copy(bucket)
        self.storage.root = f"{bucket.root}/{name}"
        self.root = self.storage.root
        self.job_id = job_id
        self.key = _key()

    def channel(self, key: ControlKey | None = None, job_id: str | None = None) -> ControlChannel:
        """A channel writing into this tenant's control directory (of ``job_id``)."""
        return ControlChannel(self.storage.resolver, self.root, job_id or self.job_id, key=key)


class RunningDriver:
    """Tenant B's driver between batches: its timeline, telemetry and guard, as
    :class:`gic_runtime.spark.driver.Driver` builds them."""

    def __init__(self, tenant: Tenant, key: ControlKey | None) -> None:
        tenant.storage.run_job(tenant.job_id, range(1, 3))
        s = tenant.storage
        self.tenant = tenant
        self.timeline = CheckpointTimeline(
            s.resolver, tenant.root, tenant.job_id, epoch=2, num_buckets=BUCKETS
        )
        settings = GICSettings(storage=tenant.root, job_id=tenant.job_id)
        self.telemetry = Telemetry(s.resolver, settings, 2)
        self.control = ControlChannel(s.resolver, tenant.root, tenant.job_id)
        self.guard = RequestGuard(tenant.root, tenant.job_id, key, wall=time.time)

    def serve(self) -> str | None:
        return serve_pending(
            self.tenant.storage.resolver, self.timeline, self.control, self.telemetry, self.guard
        )

    def refused(self) -> float:
        text = self.telemetry.metrics.render().decode()
        for line in text.splitlines():
            if line.startswith("gic_control_requests_refused_total{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError("no gic_control_requests_refused_total series")

    def close(self) -> None:
        self.timeline.close()


@pytest.fixture
def bucket(tmp_path: Path) -> TestingStorage:
    return TestingStorage(tmp_path / "bucket")


@pytest.fixture
def tenants(bucket: TestingStorage) -> tuple[Tenant, Tenant]:
    return Tenant(bucket, "tenant-a", JOB_A), Tenant(bucket, "tenant-b", JOB_B)


@pytest.fixture
def driver_b(tenants: tuple[Tenant, Tenant]) -> Any:
    _, b = tenants
    driver = RunningDriver(b, b.key)
    yield driver
    driver.close()


def _exists(tenant: Tenant, uri: str) -> bool:
    store, key = tenant.storage.resolver.resolve(uri)
    return store.exists(key)


def _assert_refused(driver: RunningDriver, rid: str, target: str | None, why: str) -> None:
    outcome = driver.control.outcome(rid)
    assert outcome is not None, "a refused request gets an outcome saying why"
    assert outcome.state is OutcomeState.FAILED
    assert outcome.error is not None and outcome.error.startswith("refused: ")
    assert why in outcome.error
    assert MARKER not in outcome.error
    if target is not None:
        assert not _exists(driver.tenant, f"{target}/{SAVEPOINT_MANIFEST}")


@pytest.mark.parametrize("forger", ["no key", "wrong key", "other job's key"])
def test_a_forged_stop_with_savepoint_is_not_honoured_and_the_job_keeps_running(
    tenants: tuple[Tenant, Tenant],
    driver_b: RunningDriver,
    forger: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = tenants
    key = {"no key": None, "wrong key": _key(), "other job's key": a.key}[forger]
    into_a = f"{a.root}/savepoints/stolen"
    forged = b.channel(key).request_savepoint(
        "terminal", target=into_a, request_id="sp-forged", requested_by=MARKER
    )
    with caplog.at_level(logging.WARNING):
        assert driver_b.serve() is None  # keeps running
    _assert_refused(driver_b, forged.request_id, into_a, "not authenticated for job")
    assert driver_b.refused() == 1
    assert "refused control request sp-forged" in caplog.text
    assert MARKER not in caplog.text
    # the refusal is final: the next pass neither serves nor counts it again
    assert driver_b.serve() is None
    assert driver_b.refused() == 1


def test_a_request_authenticated_for_another_job_does_not_verify_when_copied(
    tenants: tuple[Tenant, Tenant], driver_b: RunningDriver
) -> None:
    """A's genuine request, signed with the very key B uses, copied byte for byte into
    B's directory: the MAC binds the job id."""
    a, b = tenants
    shared = ControlKey(b.key.secret)
    genuine = a.channel(shared).request_stop(request_id="stop-1", requested_by=MARKER)
    data = a.storage.store.get(_rel(a, request_uri(a.root, a.job_id, "stop-1")))
    b.storage.store.put(_rel(b, request_uri(b.root, b.job_id, genuine.request_id)), data)

    assert driver_b.serve() is None
    _assert_refused(driver_b, "stop-1", None, "not authenticated for job")


def test_a_replayed_request_is_not_honoured_again(
    tenants: tuple[Tenant, Tenant], driver_b: RunningDriver
) -> None:
    _, b = tenants
    target = f"{b.root}/savepoints/nightly"
    b.channel(b.key).request_savepoint(target=target, request_id="sp-nightly")
    assert driver_b.serve() is None
    first = driver_b.control.outcome("sp-nightly")
    assert first is not None and first.succeeded
    # someone removes the outcome: the signed request is pending again
    (b.storage.store.root / _rel(b, outcome_uri(b.root, b.job_id, "sp-nightly"))).unlink()
    assert driver_b.control.poll().savepoints
    assert driver_b.serve() is None
    _assert_refused(driver_b, "sp-nightly", None, "already honoured")
    assert driver_b.refused() == 1


def test_an_expired_request_is_not_honoured(
    tenants: tuple[Tenant, Tenant], driver_b: RunningDriver
) -> None:
    _, b = tenants
    two_days_ago = time.time() - 2 * 86400
    b.channel(b.key).request_stop(request_id="stop-old", requested_at=two_days_ago)
    assert driver_b.serve() is None
    _assert_refused(driver_b, "stop-old", None, "stays valid")


@pytest.mark.parametrize("where", ["other tenant", "jobs directory", "dotted"])
def test_an_authenticated_request_targeting_outside_the_job_is_not_honoured(
    tenants: tuple[Tenant, Tenant], driver_b: RunningDriver, where: str
) -> None:
    a, b = tenants
    target, lands = {
        "other tenant": (f"{a.root}/savepoints/stolen",) * 2,
        "jobs directory": (f"{b.root}/jobs/{a.job_id}/checkpoints",) * 2,
        "dotted": (f"{b.root}/savepoints/../../tenant-a/x", f"{a.root}/x"),
    }[where]
    rid = b.channel(b.key).request_savepoint("terminal", target=target, request_id="sp-out")
    assert driver_b.serve() is None
    _assert_refused(driver_b, rid.request_id, lands, "outside job")


def test_the_authenticated_stop_with_savepoint_is_honoured(
    tenants: tuple[Tenant, Tenant], driver_b: RunningDriver
) -> None:
    _, b = tenants
    target = f"{b.root}/savepoints/final"
    b.channel(ControlKey.from_text(b.key.secret.decode())).request_savepoint(
        "terminal", target=target, request_id="sp-final", requested_by="gic-operator upgrade"
    )
    assert driver_b.serve() == "stopped by request sp-final"
    outcome = driver_b.control.outcome("sp-final")
    assert outcome is not None and outcome.succeeded and outcome.path == target
    assert _exists(b, f"{target}/{SAVEPOINT_MANIFEST}")
    assert driver_b.refused() == 0


def test_a_driver_without_a_key_serves_unauthenticated_requests_inside_its_storage(
    tenants: tuple[Tenant, Tenant],
) -> None:
    """Local runs (no ``GIC_CONTROL_KEY``): requests need no MAC, targets stay inside."""
    a, b = tenants
    driver = RunningDriver(b, None)
    try:
        b.channel().request_savepoint(target=f"{a.root}/savepoints/x", request_id="sp-a")
        b.channel().request_savepoint(target=f"{b.root}/savepoints/y", request_id="sp-b")
        assert driver.serve() is None
        _assert_refused(driver, "sp-a", f"{a.root}/savepoints/x", "outside job")
        served = driver.control.outcome("sp-b")
        assert served is not None and served.succeeded
    finally:
        driver.close()


def _rel(tenant: Tenant, uri: str) -> str:
    prefix = tenant.storage.store.root_uri.rstrip("/") + "/"
    assert uri.startswith(prefix)
    return uri[len(prefix) :]


def test_the_cli_authenticates_with_the_jobs_key(
    tenants: tuple[Tenant, Tenant],
    driver_b: RunningDriver,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """``gic savepoint`` with ``GIC_CONTROL_KEY`` or ``--control-key-file`` is served;
    without the key it is refused and says so."""
    _, b = tenants
    b.storage.write_status(b.job_id, JobState.RUNNING)
    gic = GIC()
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            driver_b.serve()
            stop.wait(0.02)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        args = ("savepoint", "--storage", b.root, "--job-id", b.job_id, "--timeout", "60")
        for name in [n for n in os.environ if n.startswith("GIC_")]:
            monkeypatch.delenv(name)
        refused = gic(*args)
        assert refused.exit_code == 1
        assert "refused: the request is not authenticated" in refused.output

        key_file = tmp_path / "key"
        key_file.write_text(b.key.secret.decode() + "\n")
        by_file = gic(*args, "--control-key-file", str(key_file))
        assert by_file.exit_code == 0, by_file.output

        monkeypatch.setenv(CONTROL_KEY_ENV, b.key.secret.decode())
        by_env = gic(*args)
        assert by_env.exit_code == 0, by_env.output
    finally:
        stop.set()
        thread.join(timeout=30)
    assert driver_b.refused() == 1


GOLDEN_KEY = "0123456789abcdef0123456789abcdef"
GOLDEN_CANONICAL = (
    b"gic control request v2\nns.wc\n"
    b'{"format":"native","kind":"terminal","request_id":"sp-1",'
    b'"requested_at":1700000000.25,"requested_by":"gic-operator",'
    b'"target":"s3://b/gic/savepoints/ns.wc/sp-1","type":"savepoint"}'
)
GOLDEN_MAC = "14ebff3bfd45f7d920f96193ed70dc4816705e5761c29fe9a6801daac0e5ac8e"


def test_the_mac_covers_the_job_and_every_field_and_stays_stable() -> None:
    """The operator and drivers of other versions must compute the same bytes: pinned.
    Changing any field, or the job, breaks the MAC."""
    key = ControlKey.from_text(GOLDEN_KEY)
    request = SavepointRequest(
        "sp-1",
        SavepointType.TERMINAL,
        SavepointFormat.NATIVE,
        "s3://b/gic/savepoints/ns.wc/sp-1",
        1700000000.25,
        "gic-operator",
    )
    assert canonical_bytes("ns.wc", request) == GOLDEN_CANONICAL
    signed = dataclasses.replace(request, mac=key.mac("ns.wc", request))
    assert signed.mac == GOLDEN_MAC and key.verifies("ns.wc", signed)
    assert not key.verifies("ns.wc2", signed)
    for change in (
        {"target": "s3://b/gic/savepoints/ns.other/sp-1"},
        {"kind": SavepointType.INTERMEDIATE},
        {"format": SavepointFormat.CANONICAL},
        {"requested_at": 1700000000.5},
        {"requested_by": "someone"},
    ):
        assert not key.verifies("ns.wc", dataclasses.replace(signed, **change)), change
    assert not key.verifies("ns.wc", dataclasses.replace(signed, mac=GOLDEN_MAC.upper()))


def test_a_bad_key_is_refused_without_quoting_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="it needs 32 to 4096") as caught:
        ControlKey.from_env({CONTROL_KEY_ENV: "short-secret"})
    assert "short-secret" not in str(caught.value)
    assert ControlKey.from_env({CONTROL_KEY_ENV: " "}) is None
    with pytest.raises(ConfigurationError, match="cannot read the control key file"):
        ControlKey.from_file(str(tmp_path / "missing"))
    assert GOLDEN_KEY not in repr(ControlKey.from_text(GOLDEN_KEY))
