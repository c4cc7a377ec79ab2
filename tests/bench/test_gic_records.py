"""The GIC records' manifest facts: taken as each batch lands, the latest manifest kept."""

from __future__ import annotations

import dataclasses

import pytest
from bench.streaming import gic_records
from bench.streaming.records import BenchmarkError
from tests.support.reports import batch_report

from gic_runtime.checkpoint.manifest import Manifest, StoredManifest
from gic_runtime.handles import BucketState, SnapshotHandle

REPORT = batch_report(manifest_bytes=50)


def stored(checkpoint_id: int, snapshots: dict[int, tuple[str, int]]) -> StoredManifest:
    buckets = {
        b: BucketState(b, 5, SnapshotHandle(uri, b, 5, size, 0))
        for b, (uri, size) in snapshots.items()
    }
    buckets[9] = BucketState(9, 3)  # a bucket without a snapshot counts for nothing
    manifest = Manifest("job", checkpoint_id, 1, 0.0, 16, buckets)
    return StoredManifest(f"file:///m{checkpoint_id}", manifest, size=50)


def progress(batch_id: int) -> dict[str, object]:
    return {"durationMs": {"triggerExecution": 7, "addBatch": 5}, "batchId": batch_id}


def test_facts_count_snapshots_new_since_the_previous_batch() -> None:
    tracker = gic_records.ManifestTracker()
    manifests = [
        stored(0, {0: ("s0a", 100), 1: ("s1a", 40)}),
        stored(1, {0: ("s0a", 100), 1: ("s1b", 60)}),  # bucket 1 re-materialized
        stored(2, {0: ("s0a", 100), 1: ("s1b", 60)}),
    ]
    reports = [
        dataclasses.replace(REPORT, batch_id=i, snapshot_bytes=0, manifest_bytes=50 + i)
        for i in range(3)
    ]
    for report, manifest in zip(reports, manifests, strict=True):
        tracker.add(report, manifest)

    assert tracker.facts == {
        0: gic_records.ManifestFacts(140, 140, 50),
        1: gic_records.ManifestFacts(60, 160, 51),
        2: gic_records.ManifestFacts(0, 160, 52),
    }
    assert tracker.latest is manifests[-1]
    out = gic_records.records(
        3, reports, tracker, {i: progress(i) for i in range(3)}, stages={}, stop_reason=None
    )
    assert [r.bytes for r in out] == [100 + 140 + 50, 100 + 60 + 51, 100 + 0 + 52]
    assert [r.parts["adopted_snapshot_bytes"] for r in out] == [140.0, 60.0, 0.0]
    assert [r.parts["state_snapshot_bytes"] for r in out] == [140.0, 160.0, 160.0]


def test_a_restarted_run_counts_only_snapshots_its_resumed_checkpoint_did_not_have() -> None:
    resumed = stored(6, {0: ("s0a", 100), 1: ("s1a", 40)})
    tracker = gic_records.ManifestTracker()
    tracker.resume_from(resumed)
    first = dataclasses.replace(REPORT, batch_id=7, snapshot_bytes=0)
    tracker.add(first, stored(7, {0: ("s0a", 100), 1: ("s1b", 60)}))
    assert tracker.facts == {7: gic_records.ManifestFacts(60, 160, 50)}
    fresh = gic_records.ManifestTracker()  # what the first batch counted before
    fresh.add(first, stored(7, {0: ("s0a", 100), 1: ("s1b", 60)}))
    assert fresh.facts[7].new_snapshot_bytes == 160
    with pytest.raises(BenchmarkError, match="already took batch 7"):
        tracker.resume_from(resumed)


def test_a_batch_the_tracker_did_not_see_is_missing() -> None:
    tracker = gic_records.ManifestTracker()
    tracker.add(REPORT, stored(0, {}))
    second = dataclasses.replace(REPORT, batch_id=1)  # reported, but its manifest not taken
    with pytest.raises(BenchmarkError, match=r"micro-batches \[1\] of 0..1"):
        gic_records.records(
            2,
            [REPORT, second],
            tracker,
            {0: progress(0), 1: progress(1)},
            stages={},
            stop_reason=None,
        )


def test_a_report_without_manifest_bytes_is_refused() -> None:
    with pytest.raises(BenchmarkError, match="no manifest bytes"):
        gic_records.ManifestTracker().add(
            dataclasses.replace(REPORT, manifest_bytes=0), stored(0, {})
        )
