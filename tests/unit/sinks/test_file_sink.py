"""The transactional file sink: publish is idempotent, also after a partial publish."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.errors import CorruptFileError, ObjectExistsError, ObjectNotFoundError
from gic_runtime.sinks import FileSink, OutputClaim, committed_batches, read_file_sink
from gic_runtime.storage.uri import StoreResolver


def claimed(path: Path, resolver: StoreResolver) -> FileSink:
    """A file sink at ``path`` claimed by a job starting without state."""
    sink = FileSink(path.as_uri(), resolver)
    sink.claim(OutputClaim("job-a", "lineage-a", 0))
    return sink


def stage(tmp_path: Path, name: str, rows: list[int]) -> StagedFile:
    buf = io.BytesIO()
    pq.write_table(pa.table({"n": rows}), buf)
    path = tmp_path / "staging" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return StagedFile(path.as_uri(), len(rows), path.stat().st_size)


def test_publish_after_a_partial_publish_completes_the_batch_once(tmp_path: Path) -> None:
    resolver = StoreResolver()
    staged = [stage(tmp_path, "a.parquet", [1, 2]), stage(tmp_path, "b.parquet", [3])]
    sink = claimed(tmp_path / "out", resolver)
    # A publish that died after copying the first file (no commit marker yet).
    (tmp_path / "out").mkdir()
    first = Path(staged[0].uri.removeprefix("file://"))
    (tmp_path / "out" / "part-000000000007-00000.parquet").write_bytes(first.read_bytes())
    assert read_file_sink(sink.path, resolver) is None  # nothing committed: invisible

    assert sink.publish(7, staged) == 3
    assert sink.published(7)
    assert sink.publish(7, staged) == 0  # replay: nothing published twice
    table = read_file_sink(sink.path, resolver)
    assert table is not None
    assert sorted(table.column("n").to_pylist()) == [1, 2, 3]
    assert set(table.column("batch_id").to_pylist()) == {7}
    assert [(b.generation, b.batch_id) for b in committed_batches(sink.path, resolver)] == [(0, 7)]


def test_a_foreign_file_under_the_batch_name_is_refused(tmp_path: Path) -> None:
    resolver = StoreResolver()
    staged = [stage(tmp_path, "a.parquet", [1, 2, 3, 4])]
    sink = claimed(tmp_path / "out", resolver)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part-000000000001-00000.parquet").write_bytes(b"someone else's")
    with pytest.raises(ObjectExistsError, match="own output path"):
        sink.publish(1, staged)
    assert not sink.published(1)


def test_a_copy_that_fails_among_many_leaves_the_batch_unpublished(tmp_path: Path) -> None:
    """Copies run side by side; one failing (here a staged file gone) raises, writes no
    commit marker, and a publish once it is back completes the batch with every file."""
    resolver = StoreResolver()
    staged = [stage(tmp_path, f"{i:02d}.parquet", [i, i + 100]) for i in range(12)]
    sink = claimed(tmp_path / "out", resolver)
    missing = Path(staged[5].uri.removeprefix("file://"))
    kept = missing.read_bytes()
    missing.unlink()
    with pytest.raises(ObjectNotFoundError):
        sink.publish(3, staged)
    assert not sink.published(3)
    assert read_file_sink(sink.path, resolver) is None
    missing.write_bytes(kept)

    assert sink.publish(3, staged) == 24
    table = read_file_sink(sink.path, resolver)
    assert table is not None
    assert sorted(table.column("n").to_pylist()) == sorted(
        v for i in range(12) for v in (i, i + 100)
    )
    [batch] = committed_batches(sink.path, resolver)
    assert batch.files == tuple(f"part-000000000003-{i:05d}.parquet" for i in range(12))


def test_a_damaged_commit_marker_is_a_clear_error(tmp_path: Path) -> None:
    resolver = StoreResolver()
    sink = claimed(tmp_path / "out", resolver)
    sink.publish(0, [stage(tmp_path, "a.parquet", [1])])
    marker = tmp_path / "out" / "_gic_commits" / f"{0:012d}"
    data = bytearray(marker.read_bytes())
    data[-2] ^= 0xFF
    marker.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="checksum"):
        read_file_sink(sink.path, resolver)
