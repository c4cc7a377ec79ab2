"""run_task against a real S3 endpoint (SeaweedFS): state, segments and output on S3."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from executor_helpers import EAGER, counts_from_storage, expected_counts, run_batch, states_of
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.executor.core import wait_local_materializations
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.uri import StoreResolver

KEYS = [f"s3-{i}" for i in range(50)]
MORE = [f"s3-{i}" for i in range(25, 90)]


def test_batches_on_s3_restore_adopt_and_stage(
    s3_server: TestingS3Server,
    s3_store: S3ObjectStore,
    make_barrier: Callable[..., Barrier],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    root = s3_store.root_uri

    def barrier(checkpoint_id: int, **kw: object) -> Barrier:
        return make_barrier(checkpoint_id, root=root, job_id="s3job", settings=EAGER, **kw)

    acks1 = run_batch(barrier(1), KEYS)
    assert wait_local_materializations(60)
    acks2 = run_batch(barrier(2, expected=states_of(acks1)), MORE)
    assert sum(a.stats.local_hits for a in acks2) == 8
    assert sum(a.stats.materializations_adopted for a in acks2) >= 1
    rerun = run_batch(barrier(2, expected=states_of(acks1)), MORE)  # from storage
    assert sum(a.stats.restored for a in rerun) >= 1
    assert wait_local_materializations(60)

    resolver = StoreResolver(s3_server.settings)
    want = expected_counts(KEYS, MORE)
    for acks in (acks2, rerun):
        assert counts_from_storage(states_of(acks), resolver) == want
        rows: dict[str, int] = {}
        for ack in acks:
            for staged in ack.outputs:
                store, key = resolver.resolve(staged.uri)
                table = pq.read_table(pa.BufferReader(store.get(key)))
                rows.update({r["key"]: r["count"] for r in table.to_pylist()})
        assert rows == {k: want[k] for k in MORE}
