"""Bucket ranges of state tasks (docs/architecture.md I18): the ranges of all tasks
partition the buckets, and ``task_of_bucket`` is the inverse of ``split_buckets``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.coordination.ranges import split_buckets, task_of_bucket
from gic_runtime.errors import ConfigurationError


@given(st.integers(1, 512).flatmap(lambda b: st.tuples(st.just(b), st.integers(1, b))))
def test_ranges_partition_the_buckets_and_invert(counts: tuple[int, int]) -> None:
    num_buckets, num_tasks = counts
    ranges = [split_buckets(num_buckets, num_tasks, i) for i in range(num_tasks)]
    assert [b for r in ranges for b in r] == list(range(num_buckets))
    assert all(len(r) >= 1 for r in ranges)
    for index, owned in enumerate(ranges):
        assert {task_of_bucket(num_buckets, num_tasks, b) for b in owned} == {index}


@pytest.mark.parametrize(("buckets", "tasks", "index"), [(4, 5, 0), (4, 0, 0), (4, 2, 2)])
def test_impossible_ranges_are_refused(buckets: int, tasks: int, index: int) -> None:
    with pytest.raises(ConfigurationError):
        split_buckets(buckets, tasks, index)
