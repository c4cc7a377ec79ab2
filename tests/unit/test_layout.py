"""Object naming under a storage root."""

from __future__ import annotations

import pytest

from gic_runtime import layout
from gic_runtime.errors import ConfigurationError


def test_manifest_names_sort_in_checkpoint_order_and_parse_back() -> None:
    uris = [layout.manifest_uri("s3://b/p", "job-1", n) for n in (2, 10, 1)]
    assert sorted(uris) == [layout.manifest_uri("s3://b/p", "job-1", n) for n in (1, 2, 10)]
    assert [layout.parse_checkpoint_id(u) for u in uris] == [2, 10, 1]
    assert uris[0] == "s3://b/p/jobs/job-1/checkpoints/chk-000000000002.manifest"


@pytest.mark.parametrize("name", ["chk-1.manifest", "chk-000000000001.tmp", "x", ""])
def test_other_names_are_not_checkpoints(name: str) -> None:
    assert layout.parse_checkpoint_id(name) is None


def test_fresh_names_are_never_reused() -> None:
    names = {layout.new_segment_uri("file:///r", "j", 1) for _ in range(1000)}
    names |= {layout.new_snapshot_uri("file:///r", "j", 5, epoch=3) for _ in range(1000)}
    assert len(names) == 2000
    assert all(n.startswith("file:///r/jobs/j/") for n in names)


def test_a_snapshot_name_carries_its_epoch() -> None:
    uri = layout.new_snapshot_uri("file:///r", "j", 5, epoch=12)
    assert uri.startswith("file:///r/jobs/j/snapshots/5/12-")
    assert layout.parse_snapshot_epoch(uri) == 12
    legacy = "file:///r/jobs/j/snapshots/5/" + "ab" * 16 + ".snap"
    assert layout.parse_snapshot_epoch(legacy) is None
    assert layout.parse_snapshot_epoch("file:///r/jobs/j/changelog/12/x.seg") is None


@pytest.mark.parametrize("bad", ["", "UPPER", "a/b", "../x", "-lead", "trail-", "x" * 200])
def test_invalid_ids_are_rejected_with_the_rule(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="lowercase letters, digits"):
        layout.job_dir("file:///r", bad)


def test_savepoints_live_outside_every_job_directory() -> None:
    sp = layout.savepoint_dir("file:///r", "sp-1")
    assert not sp.startswith(layout.job_dir("file:///r", "sp-1"))
    assert sp == "file:///r/savepoints/sp-1"
