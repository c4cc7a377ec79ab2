"""Operator metrics and the probe/metrics HTTP server (a real server on a free port)."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest

from gic_operator.operator_metrics import OperatorMetrics, default_metrics
from gic_operator.probes import HealthServer


def get(port: int, path: str) -> tuple[int, str, str]:
    """``(status, content type, body)`` of GET ``path``."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_reconcile_metrics() -> None:
    metrics = OperatorMetrics()
    metrics.observe_reconcile("gicjob", 0.2, error=False)
    metrics.observe_reconcile("gicjob", 0.3, error=True)
    with pytest.raises(RuntimeError), metrics.time_reconcile("savepoint"):
        raise RuntimeError("boom")
    with metrics.time_reconcile("savepoint"):
        pass
    value = metrics.registry.get_sample_value
    assert value("gic_operator_reconciles_total", {"resource": "gicjob"}) == 2
    assert value("gic_operator_reconcile_errors_total", {"resource": "gicjob"}) == 1
    assert value("gic_operator_reconcile_seconds_count", {"resource": "gicjob"}) == 2
    assert value("gic_operator_reconcile_seconds_sum", {"resource": "gicjob"}) == pytest.approx(0.5)
    assert value("gic_operator_reconciles_total", {"resource": "savepoint"}) == 2
    assert value("gic_operator_reconcile_errors_total", {"resource": "savepoint"}) == 1


def test_gauges_are_set_and_removed() -> None:
    metrics = OperatorMetrics()
    value = metrics.registry.get_sample_value
    job = {"namespace": "ns", "job": "wc"}
    metrics.set_checkpoint_age("ns", "wc", 12.5)
    assert value("gic_operator_checkpoint_age_seconds", job) == 12.5
    metrics.set_checkpoint_age("ns", "wc", None)
    metrics.set_checkpoint_age("ns", "never-set", None)
    assert value("gic_operator_checkpoint_age_seconds", job) is None

    metrics.set_savepoint_counts({"Completed": 3, "InProgress": 1})
    metrics.set_savepoint_counts({"Completed": 4})
    assert value("gic_operator_savepoints", {"state": "Completed"}) == 4
    assert value("gic_operator_savepoints", {"state": "InProgress"}) == 0

    metrics.set_job_phase("ns", "wc", "Running")
    assert value("gic_operator_job_phase", {**job, "phase": "Running"}) == 1
    assert value("gic_operator_job_phase", {**job, "phase": "Failed"}) == 0
    metrics.set_job_phase("ns", "wc", "SomethingNew")
    assert value("gic_operator_job_phase", {**job, "phase": "Running"}) == 0
    assert value("gic_operator_job_phase", {**job, "phase": "SomethingNew"}) == 1
    metrics.set_job_phase("ns", "wc", None)
    assert value("gic_operator_job_phase", {**job, "phase": "SomethingNew"}) is None
    assert value("gic_operator_job_phase", {**job, "phase": "Running"}) is None


def test_instances_do_not_share_a_registry() -> None:
    a, b = OperatorMetrics(), OperatorMetrics()
    a.observe_reconcile("gicjob", 0.1, error=False)
    assert (
        b.registry.get_sample_value("gic_operator_reconciles_total", {"resource": "gicjob"}) is None
    )
    assert default_metrics() is default_metrics()


def test_health_server_endpoints() -> None:
    metrics = OperatorMetrics()
    metrics.set_savepoint_counts({"Completed": 2})
    ready = threading.Event()
    with HealthServer(0, metrics, ready.is_set, host="127.0.0.1") as server:
        port = server.port
        assert port > 0
        assert get(port, "/healthz") == (200, "text/plain", "ok\n")
        assert get(port, "/readyz")[0] == 503
        ready.set()
        assert get(port, "/readyz") == (200, "text/plain", "ready\n")
        status, ctype, body = get(port, "/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=")
        assert 'gic_operator_savepoints{state="Completed"} 2.0' in body
        assert get(port, "/nothing")[0] == 404
    with pytest.raises(urllib.error.URLError):
        get(port, "/healthz")
    server.stop()  # idempotent


def test_health_server_without_metrics_and_with_a_failing_check() -> None:
    def broken() -> bool:
        raise RuntimeError("cannot tell")

    with HealthServer(0, None, broken, host="127.0.0.1") as server:
        assert get(server.port, "/readyz")[0] == 503
        assert get(server.port, "/metrics")[0] == 404
        assert get(server.port, "/healthz")[0] == 200


def test_two_servers_share_a_port_on_their_own_addresses() -> None:
    """Two replicas sharing one network namespace (the process kubelet), each bound to
    its own pod IP, serve the same port; a third on a taken address says which."""
    metrics = default_metrics()
    with HealthServer(0, metrics, lambda: True, host="127.131.0.1") as first:
        port = first.port
        with HealthServer(port, metrics, lambda: True, host="127.131.0.2") as second:
            assert second.port == port and second.addresses == ("127.131.0.2",)
            for host in ("127.131.0.1", "127.131.0.2"):
                with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=10) as r:
                    assert r.read() == b"ok\n"
        with pytest.raises(OSError, match=f"127.131.0.1:{port}"):
            HealthServer(port, None, lambda: True, host="127.131.0.1").start()
