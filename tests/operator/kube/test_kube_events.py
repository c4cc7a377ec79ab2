"""Event bodies and the aggregation cache."""

from __future__ import annotations

from gic_operator.kube.kube_events import (
    EVENT_MESSAGE_MAX,
    ErrorEventGate,
    EventCache,
    event_body,
    event_key,
)

JOB = {
    "apiVersion": "gic.io/v1alpha1",
    "kind": "GICJob",
    "metadata": {"name": "wc", "namespace": "prod", "uid": "u-1"},
}


def test_event_body() -> None:
    body = event_body(JOB, "Warning", "DriverFailed", "m" * 2000, component="op", now="T")
    assert body["metadata"]["namespace"] == "prod"
    assert body["metadata"]["name"].startswith("wc.")
    assert body["involvedObject"] == {
        "apiVersion": "gic.io/v1alpha1",
        "kind": "GICJob",
        "name": "wc",
        "namespace": "prod",
        "uid": "u-1",
    }
    assert len(body["message"]) == EVENT_MESSAGE_MAX and body["message"].endswith("...")
    assert (body["count"], body["firstTimestamp"], body["lastTimestamp"]) == (1, "T", "T")
    other = event_body(JOB, "Warning", "DriverFailed", "x", component="op", now="T")
    assert other["metadata"]["name"] != body["metadata"]["name"]


def test_keys() -> None:
    assert event_key(JOB, "Normal", "R", "m") == event_key(dict(JOB), "Normal", "R", "m")
    assert event_key(JOB, "Normal", "R", "m") != event_key(JOB, "Normal", "R", "n")
    assert event_key({}, "Normal", "R", "m")[0] == "default"


def test_cache_window_and_size() -> None:
    now = [0.0]
    cache = EventCache(size=2, window_s=10.0, clock=lambda: now[0])
    a, b, c = ("a",), ("b",), ("c",)
    cache.remember(a, "ev-a", 1, "T0")
    found = cache.recent(a)
    assert found is not None and (found.name, found.count, found.first) == ("ev-a", 1, "T0")
    now[0] = 10.0
    assert cache.recent(a) is None  # outside the window
    cache.remember(a, "ev-a", 2, "T0")
    cache.remember(b, "ev-b", 1, "T1")
    cache.remember(c, "ev-c", 1, "T2")
    assert cache.recent(a) is None  # least recently used, dropped
    assert cache.recent(b) is not None and cache.recent(c) is not None


def test_error_gate_posts_new_errors_and_repeats_at_most_every_window() -> None:
    now = [0.0]
    gate = ErrorEventGate(size=2, repeat_s=600.0, clock=lambda: now[0])
    key = ("gicjob", "ns", "a", "uid")
    assert gate.admit(key, "StorageError", "no bucket") == "no bucket"
    assert gate.admit(key, "StorageError", "no bucket") is None
    assert gate.admit(key, "StorageError", "no bucket") is None
    now[0] = 601.0
    assert gate.admit(key, "StorageError", "no bucket") == (
        "no bucket (met 3 times in the last 10 min)"
    )
    assert gate.admit(key, "KubeForbidden", "forbidden") == "forbidden"
    gate.clear(key)
    assert gate.admit(key, "KubeForbidden", "forbidden") == "forbidden"
    for name in ("b", "c"):  # bounded: the oldest resource is forgotten
        gate.admit(("gicjob", "ns", name, "uid"), "R", "m")
    assert gate.admit(key, "KubeForbidden", "forbidden") == "forbidden"
