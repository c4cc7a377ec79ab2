"""The method of W1, W2 and the S3 runs: the latency proxy adds the latency it says, W2's
list-state baselines emit what GIC's W2 emits, the repeated comparisons' result shape
(sections, systems run in local modes only, conditions, contention), the S3 latency
levels, the pinned checkpoint file manager jar and the storage sampler."""

from __future__ import annotations

import hashlib
import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from bench.streaming import (
    checkpoint_bytes,
    latency_proxy,
    modes,
    plots_timed,
    repeats,
    runner,
    s3a,
    spark_event_log,
    systems,
    w1_keyed_count,
    w1_s3,
    w2_event_log,
)
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import EVENT_LOG, WorkloadSpec, keyed_count

from bench import common

if TYPE_CHECKING:
    from tests.support.testing_s3server import TestingS3Server

# --- the latency proxy -------------------------------------------------------------------


class _Echo(BaseHTTPRequestHandler):
    """Answers at once: the sha256 of the request body, and the method."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        reply = f"{self.command} {hashlib.sha256(body).hexdigest()}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer  # noqa: N815


@contextmanager
def _echo_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _times_ms(url: str, method: str, body: bytes | None, n: int) -> tuple[list[float], bytes]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    out, reply = [], b""
    try:
        for _ in range(n):
            began = time.perf_counter()
            conn.request(method, "/bucket/key", body=body)
            reply = conn.getresponse().read()
            out.append((time.perf_counter() - began) * 1000)
    finally:
        conn.close()
    return out, reply


def test_the_proxy_adds_its_latency_once_per_request_and_relays_bodies_unchanged() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    with _echo_server() as upstream, latency_proxy.LatencyProxy(upstream, 0.05) as proxy:
        direct, _ = _times_ms(upstream, "GET", None, 10)
        proxied, _ = _times_ms(proxy.endpoint_url, "GET", None, 10)
        added = statistics.median(proxied) - statistics.median(direct)
        assert 48 <= added <= 75
        times, reply = _times_ms(proxy.endpoint_url, "PUT", body, 3)
        assert reply == f"PUT {hashlib.sha256(body).hexdigest()}".encode()
        assert min(times) >= 50
        assert proxy.requests_by_method() == {"GET": 10, "PUT": 3}
    with pytest.raises(BenchmarkError, match="http://host:port"):
        latency_proxy.LatencyProxy("https://example.com", 0.02)
    with pytest.raises(BenchmarkError, match=">= 0"):
        latency_proxy.LatencyProxy("http://127.0.0.1:1", -1.0)


def test_the_measured_added_latency_on_s3_is_the_configured_one(
    s3_server: TestingS3Server, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    with latency_proxy.LatencyProxy(s3_server.endpoint_url, 0.03) as proxy:
        got = latency_proxy.measure_added_latency(
            s3_server.endpoint_url, proxy.endpoint_url, s3_bucket, samples=8
        )
        assert proxy.requests_by_method()["HEAD"] == 9
    assert 29 <= got["added_ms_min"] <= 45
    assert 25 <= got["added_ms_p50"] <= 50  # medians move with the machine's load
    assert got["head_ms_proxied_p50"] > got["head_ms_direct_p50"] + 25
    assert got["get_ms_proxied_p50"] > got["get_ms_direct_p50"] + 25


def test_s3_latencies_and_sections_come_from_the_environment() -> None:
    assert w1_s3.latencies_from_env({}) == [20, 80]
    assert w1_s3.latencies_from_env({"GIC_BENCH_S3_LATENCY_MS": "0, 40"}) == [0, 40]
    with pytest.raises(BenchmarkError, match="whole milliseconds"):
        w1_s3.latencies_from_env({"GIC_BENCH_S3_LATENCY_MS": "20ms"})
    with pytest.raises(BenchmarkError, match=">= 0"):
        w1_s3.latencies_from_env({"GIC_BENCH_S3_LATENCY_MS": "-5"})
    sections = w1_s3.sections("http://127.0.0.1:1", [20, 80])
    assert [s.name for s in sections] == ["local2_20ms", "local2_80ms"]
    assert sections[1].describe == {"latency_ms_per_request": 80}
    assert w1_s3.COMPARISON.contenders == ("gic_s3",)
    assert all(b.endswith("_s3a") for b in w1_s3.COMPARISON.baselines)


# --- the checkpoint file manager jar -----------------------------------------------------


def test_the_cloud_jar_is_taken_from_the_cache_only_with_the_pinned_checksum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = tmp_path / f"spark-hadoop-cloud_2.13-{s3a.CLOUD_JAR_VERSION}.jar"
    jar.write_bytes(b"not really a jar")
    monkeypatch.setattr(s3a, "CLOUD_JAR_SHA256", hashlib.sha256(b"not really a jar").hexdigest())
    assert s3a.cloud_jar(tmp_path) == jar
    assert s3a.cloud_jar_url().startswith("https://repo1.maven.org/maven2/org/apache/spark/")
    assert s3a.cloud_jar_url().endswith(f"spark-hadoop-cloud_2.13-{s3a.CLOUD_JAR_VERSION}.jar")
    monkeypatch.setattr(s3a, "cloud_jar", lambda cache=None: jar)
    conf = s3a.spark_conf(
        {
            "GIC_S3_ENDPOINT_URL": "http://x:1",
            "AWS_ACCESS_KEY_ID": "a",
            "AWS_SECRET_ACCESS_KEY": "b",
        }
    )
    assert conf[s3a.CHECKPOINT_FILE_MANAGER] == s3a.ABORTABLE_MANAGER
    assert conf["spark.jars"] == str(jar)
    assert s3a.CHECKPOINT_FILE_MANAGER in s3a.REPORTED


# --- W2's list-state baselines -------------------------------------------------------------


class _FakeList:
    def __init__(self) -> None:
        self.items: list[tuple[Any, ...]] = []
        self.calls = 0

    def appendList(self, values: list[tuple[Any, ...]]) -> None:  # noqa: N802 - Spark's name
        self.calls += 1
        self.items.extend(values)


class _FakeHandle:
    def __init__(self) -> None:
        self.lists: dict[str, _FakeList] = {}

    def getListState(self, name: str, schema: Any) -> _FakeList:  # noqa: N802 - Spark's name
        return self.lists.setdefault(name, _FakeList())


def test_both_list_state_processors_append_once_and_emit_the_count() -> None:
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark.sql import Row

    row_handle, pandas_handle = _FakeHandle(), _FakeHandle()
    row_log, pandas_log = spark_event_log.RowEventLog(), spark_event_log.PandasEventLog()
    row_log.init(row_handle)  # type: ignore[arg-type]
    pandas_log.init(pandas_handle)  # type: ignore[arg-type]
    rows = [Row(key=7, payload="a"), Row(key=7, payload="b"), Row(key=7, payload="c")]
    out = list(row_log.handleInputRows((7,), iter(rows), None))  # type: ignore[arg-type]
    assert out == [Row(key=7, appended=3)]
    frames = [
        pd.DataFrame({"key": [7, 7], "payload": ["a", "b"]}),
        pd.DataFrame({"key": [7], "payload": ["c"]}),
    ]
    got = list(pandas_log.handleInputRows((7,), iter(frames), None))  # type: ignore[arg-type]
    assert got[0].to_dict("list") == {"key": [7], "appended": [3]}
    for handle in (row_handle, pandas_handle):
        events = handle.lists["events"]
        assert (events.items, events.calls) == ([("a",), ("b",), ("c",)], 1)


def test_w2_list_state_baselines_write_the_same_output_as_gic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "SCRATCH", tmp_path)
    workload = WorkloadSpec("w2_event_log", EVENT_LOG, 40, 200, 2)
    params = BenchParams(warmup=1, measured=2, timeout_s=300.0, quick=True)
    prints = {}
    for name in ("spark_tws_row", "spark_tws_pandas", "gic"):
        result = w2_event_log.COMPARISON.systems[name](workload, params)
        prints[name] = result.notes["output"]
    assert prints["gic"]["rows"] > 0
    for name in ("spark_tws_row", "spark_tws_pandas"):
        assert prints[name]["rows_by_batch_sha256"] == prints["gic"]["rows_by_batch_sha256"]
        assert prints[name]["rows"] == prints["gic"]["rows"]


# --- the result shape ----------------------------------------------------------------------


def _fixed(rows_per_s: float, kind: str) -> runner.SystemFn:
    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        batch_ms = workload.rows_per_batch / rows_per_s * 1000
        parts = {"commit_offsets_ms": 2.0, "wal_commit_ms": 3.0}
        records = [
            BatchRecord(b, workload.rows_per_batch, batch_ms, 10.0, 100, parts)
            for b in range(params.total_batches)
        ]
        output = {"rows": 5, "batches": params.total_batches, "rows_sha256": "a"}
        output["rows_by_batch_sha256"] = "b"
        return RunResult(
            kind,
            tuple(records[: params.warmup]),
            tuple(records[params.warmup :]),
            {"kind": kind, "output": output},
        )

    return run


def test_sections_write_the_repeated_comparison_shape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "SCRATCH", tmp_path)
    monkeypatch.setattr("bench.streaming.harness.QUICK_RESULTS", tmp_path / "results")
    monkeypatch.setenv("GIC_BENCH_QUICK", "1")
    monkeypatch.setenv("GIC_BENCH_ROUNDS", "3")
    comparison = repeats.Comparison(
        name="shape",
        workload=keyed_count,
        systems={
            "spark_a": _fixed(1_000.0, "spark_baseline"),
            "spark_b": _fixed(2_000.0, "spark_baseline"),
            "gic": _fixed(3_000.0, "gic"),
            "gic_extra": _fixed(500.0, "gic"),
        },
        baselines=("spark_a", "spark_b"),
        contenders=("gic",),
        goal=1.5,
        local_only=("gic_extra",),
    )
    entered: list[str] = []

    @contextmanager
    def around() -> Iterator[dict[str, Any]]:
        conditions: dict[str, Any] = {"latency_ms_per_request": 20}
        entered.append("in")
        yield conditions
        conditions["requests_relayed"] = {"GET": 1}

    sections = [
        repeats.Section(
            "local2_20ms", modes.MODES["local2"], around, {"latency_ms_per_request": 20}
        ),
        repeats.Section("cluster3", modes.MODES["cluster3"]),
    ]
    data = repeats.run_sections(comparison, lambda base: sections)
    assert entered == ["in"]
    local, three = data["modes"]["local2_20ms"], data["modes"]["cluster3"]
    assert set(local["systems"]) == {"spark_a", "spark_b", "gic", "gic_extra"}
    assert set(three["systems"]) == {"spark_a", "spark_b", "gic"}  # local only
    assert local["systems"]["gic"]["rows_per_s"]["n"] == 3
    assert local["systems"]["gic"]["commit_with_logs_ms_p50"]["median"] == 15.0
    assert local["systems"]["spark_a"]["commit_with_logs_ms_p50"]["median"] == 10.0
    assert local["ratios"]["ratios"]["gic"]["median"] == 1.5
    assert len(local["rounds"]) == 3 and local["goals"]["met"] is True
    assert local["conditions"] == {"latency_ms_per_request": 20, "requests_relayed": {"GET": 1}}
    assert local["outputs"]["identical"] is True
    assert local["contention"]["contention"] is False
    assert three["contention"] == modes.contention(modes.MODES["cluster3"])
    assert data["setup"]["modes"]["local2_20ms"]["latency_ms_per_request"] == 20
    assert data["setup"]["modes"]["local2_20ms"]["name"] == "local2"
    written = json.loads((tmp_path / "results" / "shape.json").read_text())
    assert written["goals"] == data["goals"]
    assert (tmp_path / "results" / "shape.png").is_file()


def test_cluster3_on_two_cores_is_labelled_contention_and_runs_only_on_request() -> None:
    assert modes.DEFAULT_MODES == ("local2", "cluster2")
    assert [m.name for m in modes.modes_from_env({})] == ["local2", "cluster2"]
    three = modes.contention(modes.MODES["cluster3"], cores=2)
    assert three["contention"] is True and "contention" in three["note"]
    assert modes.contention(modes.MODES["cluster2"], cores=2)["contention"] is False
    assert modes.contention(modes.MODES["local2"], cores=2)["task_slots"] == 2
    assert modes.MODES["cluster3"].describe()["task_slots"] == 3


def test_w1_and_w2_compare_gic_with_spark_at_the_issue_goal() -> None:
    for comparison in (w1_keyed_count.COMPARISON, w2_event_log.COMPARISON):
        assert comparison.goal == 1.5 and comparison.contenders == ("gic",)
        assert comparison.local_only == ("gic_no_changelog",)
        assert all(b.startswith("spark_") for b in comparison.baselines)
    assert w1_keyed_count.COMPARISON.floor == systems.NO_STATE
    assert systems.NO_STATE in w1_keyed_count.COMPARISON.systems
    assert systems.NO_STATE not in w1_keyed_count.COMPARISON.baselines
    assert w2_event_log.COMPARISON.floor is None
    assert set(w2_event_log.COMPARISON.baselines) <= set(spark_event_log.VARIANTS)
    assert systems.GIC_TARGET.endswith(":run_gic")


# --- storage samples -----------------------------------------------------------------------


def test_a_coalescing_sampler_files_each_sample_under_the_latest_waiting_batch(
    tmp_path: Path,
) -> None:
    (tmp_path / "state" / "0").mkdir(parents=True)
    (tmp_path / "state" / "0" / "1.delta").write_bytes(b"x" * 10)
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_bytes(b"y" * 3)
    (tmp_path / "metadata").write_bytes(b"z")
    sampler = checkpoint_bytes.StoredBytesSampler(
        tmp_path, 1, kind=checkpoint_bytes.top_directory, coalesce=True
    )
    for b in range(50):
        sampler.batch_done(b)
    samples = sampler.close()
    assert 49 in samples
    assert samples[49].kinds == {"state": 10, "offsets": 3, "other": 1}
    assert samples[49].bytes == 14


def test_a_system_keeps_its_colour_in_every_mode_of_a_comparison_plot() -> None:
    comparison = repeats.Comparison(
        name="w",
        workload=keyed_count,
        systems={},
        baselines=("spark_a", "spark_b"),
        contenders=("gic",),
        goal=1.5,
        local_only=("gic_variant",),
        floor="floor",
    )
    local = ["spark_a", "spark_b", "gic", "gic_variant", "floor"]
    cluster = ["spark_a", "spark_b", "gic", "floor"]  # the local-only variant is missing
    per_mode = {
        "local2": {"systems": dict.fromkeys(local)},
        "cluster2": {"systems": dict.fromkeys(cluster)},
    }
    colors = plots_timed.system_colors(comparison, per_mode)
    assert colors["spark_a"] == colors["spark_b"] == plots_timed.BASELINE_COLOR
    assert colors["gic"] == plots_timed.CONTENDER_COLOR
    assert len({colors["gic"], colors["gic_variant"], colors["floor"], colors["spark_a"]}) == 4
    # one mapping for the whole figure: the floor is drawn alike in both modes
    assert set(colors) == set(local)


def test_the_ratio_legend_sits_above_every_bar_whisker_and_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    comparison = repeats.Comparison(
        name="w",
        workload=keyed_count,
        systems={},
        baselines=("spark",),
        contenders=("gic",),
        goal=1.5,
        aim=None,
    )

    def spread(median: float) -> dict[str, float]:
        return {"median": median, "min": median * 0.95, "max": median * 1.05}

    # the ratios fill the axis: the tallest bar, its whisker and label reach the top
    per_mode = {
        "local2": {
            "master": "local[2]",
            "systems": {n: {"rows_per_s": spread(r)} for n, r in (("spark", 1e5), ("gic", 1.6e5))},
            "ratios": {"ratios": {"gic": spread(1.6)}},
            "outputs": {"identical": True},
        }
    }
    figures: list[Any] = []

    def keep(fig: Any, path: Path) -> Path:  # the figure, before it is written and closed
        figures.append(fig)
        return path

    monkeypatch.setattr(common, "save_figure", keep)
    plots_timed.plot_comparison(tmp_path / "w.png", comparison, per_mode)
    (fig,) = figures
    right = fig.axes[1]
    renderer = fig.canvas.get_renderer()
    legend = right.get_legend().get_window_extent(renderer)
    drawn = [p.get_window_extent(renderer) for p in right.patches]  # the bar
    drawn += [t.get_window_extent(renderer) for t in right.texts]  # its label
    drawn += [  # its whisker's caps (the goal line may cross the legend)
        line.get_window_extent(renderer)
        for line in right.lines
        if line.get_label() not in {"goal", "aim"}
    ]
    assert len(drawn) == 4
    assert legend.y0 > max(box.y1 for box in drawn)
