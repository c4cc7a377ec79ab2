"""The fault-injecting store fake: rules fire as configured and calls are counted."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gic_runtime.errors import StorageTimeoutError, TransientStorageError
from gic_runtime.storage import LocalObjectStore
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore

PUT = frozenset({"put"})


def _store(tmp_path: Path, seed: int = 0) -> tuple[LocalObjectStore, TestingFaultyStore]:
    inner = LocalObjectStore(tmp_path)
    return inner, TestingFaultyStore(inner, seed=seed, sleep=lambda _s: None)


def test_counts_calls_per_method(tmp_path: Path) -> None:
    _, store = _store(tmp_path)
    store.put("a", b"1")
    store.put("b", b"2")
    assert store.get("a") == b"1"
    assert (store.calls("put"), store.calls("get"), store.calls("list")) == (2, 1, 0)


def test_error_fires_for_the_next_n_calls_only(tmp_path: Path) -> None:
    inner, store = _store(tmp_path)
    store.add_rule(FaultRule(methods=PUT, error=lambda: TransientStorageError("503"), times=2))
    for _ in range(2):
        with pytest.raises(TransientStorageError):
            store.put("k", b"v")
    assert not inner.exists("k")
    store.put("k", b"v")
    assert inner.get("k") == b"v"


def test_error_after_the_call_leaves_its_effect(tmp_path: Path) -> None:
    inner, store = _store(tmp_path)
    store.add_rule(FaultRule(methods=PUT, error=lambda: StorageTimeoutError("t"), after=True))
    with pytest.raises(StorageTimeoutError):
        store.put("k", b"v")
    assert inner.get("k") == b"v"


def test_probability_is_reproducible_for_a_seed(tmp_path: Path) -> None:
    def pattern(seed: int) -> list[bool]:
        _, store = _store(tmp_path / str(seed), seed=seed)
        rule = store.add_rule(FaultRule(methods=PUT, delay_s=1.0, probability=0.3))
        fired = []
        for i in range(200):
            before = store.fired(rule)
            store.put(f"k{i}", b"")
            fired.append(store.fired(rule) > before)
        return fired

    first, again = pattern(3), pattern(3)
    assert first == again
    assert 30 < sum(first) < 90


def test_delay_uses_the_injected_sleep(tmp_path: Path) -> None:
    slept: list[float] = []
    store = TestingFaultyStore(LocalObjectStore(tmp_path), sleep=slept.append)
    store.add_rule(FaultRule(methods=PUT, delay_s=2.0))
    store.add_rule(FaultRule(methods=frozenset({"get"}), delay_s=5.0))
    store.put("k", b"v")
    assert slept == [2.0]


def test_gate_holds_calls_until_released(tmp_path: Path) -> None:
    inner, store = _store(tmp_path)
    gate = threading.Event()
    store.add_rule(FaultRule(methods=PUT, gate=gate, times=1))
    worker = threading.Thread(target=store.put, args=("k", b"v"))
    worker.start()
    assert store.wait_for_calls("put", 1)
    assert not inner.exists("k")
    gate.set()
    worker.join(10)
    assert inner.exists("k")
