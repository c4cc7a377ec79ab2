"""Which state task owns which buckets.

Task ``i`` of ``n`` owns the contiguous buckets ``[i*B//n, (i+1)*B//n)`` of ``B``
(:func:`split_buckets`); :func:`task_of_bucket` is its inverse. The ranges of all tasks
partition ``[0, B)``. The barrier (:mod:`~gic_runtime.coordination.barrier`), the packed
expected states (:mod:`~gic_runtime.coordination.packed_states`) and the Spark routing
(:mod:`~gic_runtime.spark.placement`, which computes the same task in Spark expressions)
all use this one mapping.
"""

from __future__ import annotations

from gic_runtime.errors import ConfigurationError

__all__ = ["split_buckets", "task_of_bucket"]


def split_buckets(num_buckets: int, num_tasks: int, index: int) -> range:
    """Buckets of task ``index`` of ``num_tasks``: ``[index*B//n, (index+1)*B//n)``."""
    if not 1 <= num_tasks <= num_buckets:
        raise ConfigurationError(
            f"{num_tasks} state tasks for {num_buckets} buckets: use between 1 and "
            f"{num_buckets} tasks (each task owns at least one bucket)"
        )
    if not 0 <= index < num_tasks:
        raise ConfigurationError(f"task index {index} outside [0, {num_tasks})")
    return range(index * num_buckets // num_tasks, (index + 1) * num_buckets // num_tasks)


def task_of_bucket(num_buckets: int, num_tasks: int, bucket: int) -> int:
    """Index of the task owning ``bucket`` (inverse of :func:`split_buckets`)."""
    return ((bucket + 1) * num_tasks - 1) // num_buckets
