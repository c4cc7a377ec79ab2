"""Output ownership: one job's state writes an output directory; nothing is lost silently.

Two jobs publishing into one directory used to lose output without a word (the second
job's batch N met the first one's commit marker N and was skipped). These tests pin the
claim rules of :mod:`gic_runtime.sinks.output_owners` on a real local directory.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.errors import OutputOwnedError
from gic_runtime.sinks import FileSink, OutputClaim, committed_batches, read_file_sink
from gic_runtime.sinks.output_owners import OWNERS_DIR, read_generations
from gic_runtime.storage.uri import StoreResolver


def stage(directory: Path, name: str, rows: list[int]) -> list[StagedFile]:
    buf = io.BytesIO()
    pq.write_table(pa.table({"n": rows}), buf)
    path = directory / "staging" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())
    return [StagedFile(path.as_uri(), len(rows), path.stat().st_size)]


def sink_for(out: Path, job: str, lineage: str, next_batch: int = 0, **kw: str) -> FileSink:
    sink = FileSink(out.as_uri(), StoreResolver())
    sink.claim(OutputClaim(job, lineage, next_batch, **kw))
    return sink


def visible(out: Path) -> list[tuple[int, int]]:
    return [(b.generation, b.batch_id) for b in committed_batches(out.as_uri(), StoreResolver())]


def records(out: Path) -> list[str]:
    owners = out / OWNERS_DIR
    return sorted(p.name for p in owners.iterdir()) if owners.exists() else []


def test_a_second_job_with_other_state_is_refused_naming_both_jobs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = sink_for(out, "payments", "l-1")
    first.publish(0, stage(tmp_path, "a.parquet", [1, 2]))
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(OutputOwnedError) as caught:
        sink_for(out, "payments2", "l-2")
    text = str(caught.value)
    assert "payments2" in text and "belongs to job payments" in text
    assert "output_takeover=payments" in text and "--take-over-output payments" in text
    assert sorted(p.name for p in out.rglob("*")) == before  # the refusal wrote nothing
    assert visible(out) == [(0, 0)]


def test_the_owner_resumes_and_replays_without_doubling(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink_for(out, "payments", "l-1").publish(0, stage(tmp_path, "a.parquet", [1]))
    again = sink_for(out, "payments", "l-1")  # a restart of the same job
    assert again.generation is not None and again.generation.generation == 0
    assert again.publish(0, stage(tmp_path, "a.parquet", [1])) == 0  # replay
    assert again.publish(1, stage(tmp_path, "b.parquet", [2])) == 1
    assert visible(out) == [(0, 0), (0, 1)]
    assert records(out) == ["g000000"]


def test_the_same_job_id_with_fresh_state_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink_for(out, "payments", "l-1").publish(0, stage(tmp_path, "a.parquet", [1]))
    with pytest.raises(OutputOwnedError, match="wrote there with other state"):
        sink_for(out, "payments", "l-fresh")


def test_an_explicit_takeover_keeps_the_old_output_and_fences_the_old_owner(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    old = sink_for(out, "payments", "l-1")
    old.publish(0, stage(tmp_path, "a.parquet", [1]))
    old.publish(1, stage(tmp_path, "b.parquet", [2]))
    new = sink_for(out, "payments2", "l-2", takeover="payments")
    assert new.generation is None and records(out) == ["g000000"]  # recorded on publish
    assert new.publish(0, stage(tmp_path, "c.parquet", [10, 11])) == 2
    assert new.generation is not None and new.generation.generation == 1
    with pytest.raises(OutputOwnedError, match="taken over by job payments2"):
        old.publish(2, stage(tmp_path, "d.parquet", [3]))
    assert visible(out) == [(0, 0), (0, 1), (1, 0)]
    table = read_file_sink(out.as_uri())
    assert table is not None and sorted(table.column("n").to_pylist()) == [1, 2, 10, 11]
    # Names of their own: generation 1's batch 0 did not meet generation 0's marker 0.
    assert (out / "part-g000001-000000000000-00000.parquet").exists()


def test_a_takeover_naming_someone_else_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    sink_for(out, "payments", "l-1").publish(0, stage(tmp_path, "a.parquet", [1]))
    with pytest.raises(OutputOwnedError):
        sink_for(out, "payments2", "l-2", takeover="orders")
    assert records(out) == ["g000000"]


def test_a_job_restored_from_the_owners_state_continues_and_supersedes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = sink_for(out, "payments", "l-1")
    for batch in range(4):
        old.publish(batch, stage(tmp_path, f"a{batch}.parquet", [batch]))
    # Restored from the owner's checkpoint 1: it continues at batch 2, same lineage.
    new = sink_for(out, "payments-v2", "l-1", next_batch=2)
    new.publish(2, stage(tmp_path, "b2.parquet", [20]))
    assert new.generation is not None and new.generation.continues_at == 2
    # The old owner's batches 2 and 3 belong to the history the restore left behind.
    assert visible(out) == [(0, 0), (0, 1), (1, 2)]
    with pytest.raises(OutputOwnedError, match="taken over by job payments-v2"):
        old.publish(4, stage(tmp_path, "a4.parquet", [4]))
    # The displaced job does not take it back by restarting.
    with pytest.raises(OutputOwnedError, match="took it over"):
        sink_for(out, "payments", "l-1", next_batch=4)


def test_output_written_before_owner_records_stays_with_its_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    legacy = sink_for(out, "payments", "job:payments")
    legacy.publish(0, stage(tmp_path, "a.parquet", [1]))
    for record in (out / OWNERS_DIR).iterdir():  # as written by an older runtime
        record.unlink()
    with pytest.raises(OutputOwnedError, match="before output owners were recorded"):
        sink_for(out, "intruder", "l-9")
    resumed = sink_for(out, "payments", "job:payments", legacy_owner="payments")
    assert resumed.publish(1, stage(tmp_path, "b.parquet", [2])) == 1
    assert resumed.generation is not None and resumed.generation.generation == 0
    assert records(out) == ["g000000"]
    assert visible(out) == [(0, 0), (0, 1)]


def test_a_job_that_failed_before_publishing_is_not_refused_by_itself(tmp_path: Path) -> None:
    """A start checks its claim but records it only with its first publish: a job that
    crashed before its first checkpoint starts again (with a new state lineage, as it
    has no checkpoint to continue) and is not refused by its own earlier attempt."""
    out = tmp_path / "out"
    sink_for(out, "payments", "l-first-attempt")  # crashed before publishing anything
    assert records(out) == []
    again = sink_for(out, "payments", "l-second-attempt")
    assert again.publish(0, stage(tmp_path, "a.parquet", [1])) == 1
    assert records(out) == ["g000000"] and visible(out) == [(0, 0)]


def test_two_jobs_that_both_passed_the_check_do_not_both_publish(tmp_path: Path) -> None:
    """Both start on an empty directory; the first to publish owns it, the other's first
    publish is refused (nothing of its is published)."""
    out = tmp_path / "out"
    first = sink_for(out, "payments", "l-1")
    second = sink_for(out, "payments2", "l-2")
    assert first.publish(0, stage(tmp_path, "a.parquet", [1])) == 1
    with pytest.raises(OutputOwnedError, match="belongs to job payments"):
        second.publish(0, stage(tmp_path, "b.parquet", [2]))
    assert visible(out) == [(0, 0)]


def test_publishing_without_a_claim_is_refused(tmp_path: Path) -> None:
    sink = FileSink((tmp_path / "out").as_uri(), StoreResolver())
    with pytest.raises(Exception, match="only after a claim"):
        sink.publish(0, stage(tmp_path, "a.parquet", [1]))


_JOBS = ("a", "b", "c")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(_JOBS),
            st.sampled_from(("l-1", "l-2")),
            st.sampled_from(("claim", "takeover", "publish")),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_no_published_batch_is_ever_lost_silently(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, str]]
) -> None:
    """Whatever jobs claim, take over and publish in whatever order: every publish
    either raises or leaves its batch committed under its own generation, and a batch
    only disappears from the reader's view when a later generation of the same state
    continued from an earlier batch (a restore)."""
    tmp = tmp_path_factory.mktemp("own")
    out = tmp / "out"
    sinks: dict[str, FileSink] = {}
    next_batch: dict[str, int] = {}
    published: set[tuple[int, int]] = set()
    for job, lineage, action in steps:
        if action in ("claim", "takeover"):
            generations = (
                read_generations(*StoreResolver().resolve(out.as_uri() + "/"))
                if out.exists()
                else []
            )
            owner = generations[-1].job_id if generations else None
            try:
                sinks[job] = sink_for(
                    out,
                    job,
                    lineage,
                    next_batch=next_batch.get(job, 0),
                    **({"takeover": owner} if action == "takeover" and owner else {}),
                )
            except OutputOwnedError:
                continue
        elif job in sinks:
            sink = sinks[job]
            batch = next_batch.get(job, 0)
            try:
                rows = sink.publish(batch, stage(tmp, f"{job}-{batch}.parquet", [batch]))
            except OutputOwnedError:
                continue
            assert sink.generation is not None
            assert rows == 1 or sink.published(batch)
            published.add((sink.generation.generation, batch))
            next_batch[job] = batch + 1
    if not published:
        return
    store, key = StoreResolver().resolve(out.as_uri())
    generations = read_generations(store, key.rstrip("/") + "/")
    shown = set(visible(out))
    for generation, batch in published:
        hidden_by = [
            g
            for g in generations[generation + 1 :]
            if g.lineage == generations[generation].lineage
            and g.continues_at is not None
            and g.continues_at <= batch
        ]
        assert ((generation, batch) in shown) != bool(hidden_by)
