"""Self-contained checkpoints and imports from a canonical savepoint."""

from __future__ import annotations

from collections.abc import Callable

from executor_helpers import (
    counts_from_storage,
    expected_counts,
    run_batch,
    states_of,
)

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.layout import job_dir, savepoint_dir
from gic_runtime.savepoint.canonical import write_canonical_from_states
from gic_runtime.storage.uri import StoreResolver

MakeBarrier = Callable[..., Barrier]
KEYS = [f"user-{i}" for i in range(50)]
MORE = [f"user-{i}" for i in range(25, 75)]


def test_self_contained_checkpoint_references_only_the_jobs_own_files(
    make_barrier: MakeBarrier,
) -> None:
    source = run_batch(make_barrier(1, job_id="source"), KEYS)
    barrier = make_barrier(1, job_id="restored", expected=states_of(source), self_contained=True)
    acks = run_batch(barrier, MORE)

    own = job_dir(barrier.root, "restored") + "/"
    states = states_of(acks)
    uris = set().union(*(s.uris() for s in states.values()))
    assert uris and all(u.startswith(own) for u in uris)
    for state in states.values():
        assert state.changelog == ()
        assert state.snapshot is not None and state.snapshot.seq == state.seq
    assert sum(a.stats.snapshot_bytes for a in acks) == sum(
        s.snapshot.size for s in states.values() if s.snapshot is not None
    )
    assert counts_from_storage(states) == expected_counts(KEYS, MORE)


def test_canonical_savepoint_is_imported_into_a_fresh_lineage(make_barrier: MakeBarrier) -> None:
    source = run_batch(make_barrier(1, job_id="source"), KEYS)
    resolver = StoreResolver()
    dest = savepoint_dir(make_barrier(0).root, "sp-1")
    write_canonical_from_states(states_of(source), 8, dest, resolver, reader=None)

    barrier = make_barrier(1, job_id="imported", canonical_source=dest)
    acks = run_batch(barrier, MORE)
    states = states_of(acks)
    own = job_dir(barrier.root, "imported") + "/"
    assert all(u.startswith(own) for s in states.values() for u in s.uris())
    assert counts_from_storage(states) == expected_counts(KEYS, MORE)
    assert sum(a.stats.changes for a in acks) == len(set(KEYS)) + len(MORE)
    assert sum(a.stats.restored for a in acks) == len(states) - sum(a.stats.empty for a in acks)

    nxt = run_batch(make_barrier(2, job_id="imported", expected=states), KEYS)
    assert sum(a.stats.restored for a in nxt) == 0
    assert counts_from_storage(states_of(nxt)) == expected_counts(KEYS, MORE, KEYS)
