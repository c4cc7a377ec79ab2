"""Driver metrics: the series exist with the job label, values move, HTTP serving."""

from __future__ import annotations

import re
import urllib.request

import pytest

from gic_runtime.errors import ConfigurationError
from gic_runtime.listen import listen_addresses
from gic_runtime.metrics import DriverMetrics

SERIES = [
    "gic_checkpoint_duration_seconds_bucket",
    "gic_checkpoint_duration_seconds_count",
    "gic_checkpoint_bytes_uploaded_total",
    "gic_changelog_bytes_total",
    "gic_snapshot_bytes_total",
    "gic_local_hit_ratio",
    "gic_manifest_bytes",
    "gic_materializations_total",
    "gic_last_checkpoint_id",
    "gic_last_checkpoint_timestamp_seconds",
    "gic_batches_total",
    "gic_restore_source_released",
    "gic_restore_pending_buckets",
    "gic_restore_bytes_total",
    "gic_orphans_deleted_total",
    "gic_savepoints_total",
    "gic_control_requests_refused_total",
    "gic_epoch",
]


def sample(text: str, line_start: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {line_start!r} in:\n{text}")


def test_every_series_is_there_from_the_start() -> None:
    text = DriverMetrics("job-a").render().decode()
    for name in SERIES:
        assert re.search(rf'^{name}{{[^}}]*job_id="job-a"', text, re.MULTILINE), name
    assert sample(text, 'gic_materializations_total{event="started",job_id="job-a"}') == 0
    assert sample(text, 'gic_savepoints_total{job_id="job-a",state="failed"}') == 0


def test_observations_move_the_series() -> None:
    m = DriverMetrics("job-a")
    m.set_epoch(3)
    m.observe_checkpoint(
        7,
        0.2,
        bytes_uploaded=300,
        changelog_bytes=200,
        snapshot_bytes=100,
        local_hit_ratio=0.5,
        manifest_bytes=4096,
        completed_at=1700000000.0,
    )
    m.observe_checkpoint(8, 0.3, bytes_uploaded=10, changelog_bytes=10, completed_at=1700000001.0)
    m.observe_batch()
    m.observe_batch()
    m.observe_materializations(started=2, adopted=1)
    m.observe_sweep(4, 4000)
    m.observe_savepoint("completed")
    m.set_restore_source_released(True)
    text = m.render().decode()
    j = 'job_id="job-a"'
    assert sample(text, f"gic_checkpoint_duration_seconds_count{{{j}}}") == 2
    assert sample(text, f"gic_checkpoint_duration_seconds_sum{{{j}}}") == pytest.approx(0.5)
    assert sample(text, f"gic_checkpoint_bytes_uploaded_total{{{j}}}") == 310
    assert sample(text, f"gic_changelog_bytes_total{{{j}}}") == 210
    assert sample(text, f"gic_snapshot_bytes_total{{{j}}}") == 100
    assert sample(text, f"gic_local_hit_ratio{{{j}}}") == 0.5  # unchanged by None
    assert sample(text, f"gic_manifest_bytes{{{j}}}") == 4096  # unchanged by None
    assert sample(text, f"gic_last_checkpoint_id{{{j}}}") == 8
    assert sample(text, f"gic_last_checkpoint_timestamp_seconds{{{j}}}") == 1700000001.0
    assert sample(text, f"gic_batches_total{{{j}}}") == 2
    assert sample(text, f'gic_materializations_total{{event="started",{j}}}') == 2
    assert sample(text, f'gic_materializations_total{{event="adopted",{j}}}') == 1
    assert sample(text, f"gic_orphans_deleted_total{{{j}}}") == 4
    assert sample(text, f"gic_orphan_bytes_deleted_total{{{j}}}") == 4000
    assert sample(text, f'gic_savepoints_total{{{j},state="completed"}}') == 1
    assert sample(text, f"gic_restore_source_released{{{j}}}") == 1
    assert sample(text, f"gic_epoch{{{j}}}") == 3


def test_two_drivers_in_one_process_do_not_share_series() -> None:
    a, b = DriverMetrics("job-a"), DriverMetrics("job-b")
    a.observe_batch(5)
    assert sample(b.render().decode(), 'gic_batches_total{job_id="job-b"}') == 0
    assert 'job_id="job-b"' not in a.render().decode()


def test_bad_observations_are_refused() -> None:
    m = DriverMetrics("job-a")
    with pytest.raises(ConfigurationError, match="bytes_uploaded needs a finite, non-negative"):
        m.observe_checkpoint(1, 0.1, bytes_uploaded=-5)
    with pytest.raises(ConfigurationError, match="unknown savepoint state 'lost'"):
        m.observe_savepoint("lost")


def test_serving_over_http() -> None:
    m = DriverMetrics("job-a")
    m.observe_batch()
    with m.serve(0, addr="127.0.0.1") as server:
        assert server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
            body = r.read().decode()
    assert sample(body, 'gic_batches_total{job_id="job-a"}') == 1


def test_a_busy_port_is_a_clear_error() -> None:
    m = DriverMetrics("job-a")
    with m.serve(0, addr="127.0.0.1") as server:
        with pytest.raises(ConfigurationError) as refused:
            m.serve(server.port, addr="127.0.0.1")
        message = str(refused.value)
        assert message.startswith(f"cannot serve metrics on 127.0.0.1:{server.port}: ")
        # The advice works: a free port, any free port (0), or another address.
        assert "metrics_port (GIC_METRICS_PORT) to a free port, 0 for any free port" in message
        assert "metrics_host (GIC_METRICS_HOST)" in message
        with m.serve(0, addr="127.0.0.1") as other:
            assert other.port != server.port
        with m.serve(server.port, addr="127.132.0.1") as beside:
            assert (beside.port, beside.addresses) == (server.port, ("127.132.0.1",))


def test_a_pod_ip_is_served_with_the_loopback_address() -> None:
    """A pod IP that is not a loopback address is served with 127.0.0.1 on the same port
    (kubectl port-forward reaches a pod there); a loopback pod IP alone."""
    assert listen_addresses("10.0.0.7") == ("10.0.0.7", "127.0.0.1")
    assert listen_addresses("fd00::7") == ("fd00::7", "::1")
    assert listen_addresses("127.140.0.9") == ("127.140.0.9",)
    assert listen_addresses(None) == listen_addresses("") == ("0.0.0.0",)
    with pytest.raises(ConfigurationError, match="'pod' is not an IP address"):
        listen_addresses("pod")
