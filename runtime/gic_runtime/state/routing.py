"""The routing checks of a task's keyed state: every key it touches must route, by
:func:`~gic_runtime.state.keys.bucket_for`, to a bucket of the task's range.

Two paths reach the backend (:class:`~gic_runtime.state.backend.KeyedStateBackend`):

* a key whose bucket the runtime computes (:func:`route_key`), refused when it falls
  outside the owned range;
* keys routed outside the runtime, e.g. by Spark's ``pmod(xxhash64(key), B)``, that come
  with their buckets (:func:`check_routed_buckets`): every bucket must be in range, and a
  sample of :data:`BUCKET_SPOT_CHECKS` keys must agree with ``bucket_for``. A routing side
  that hashes differently (another type, seed or bucket count) disagrees on almost every
  key, so a sample catches it.

Invariant: a key that passes either check belongs to the owned range; a failure is a
:class:`~gic_runtime.errors.StateError` naming the key and both buckets. Pure functions;
thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gic_runtime.errors import StateError
from gic_runtime.state.keys import bucket_for

__all__ = ["BUCKET_SPOT_CHECKS", "check_routed_buckets", "route_key"]

BUCKET_SPOT_CHECKS = 8
"""Keys per :func:`check_routed_buckets` call whose given bucket is verified."""


def route_key(key: Any, owned: range, num_buckets: int) -> int:
    """Bucket of ``key`` of ``num_buckets``; StateError unless it is in ``owned``."""
    bucket = bucket_for(key, num_buckets)
    if not owned.start <= bucket < owned.stop:
        raise StateError(
            f"key {key!r:.80} routes to bucket {bucket} of {num_buckets}, outside "
            f"this backend's buckets [{owned.start}, {owned.stop}); route rows with "
            "bucket_for(key, num_buckets) before handing them to a task"
        )
    return bucket


def check_routed_buckets(
    keys: Sequence[Any], buckets: Sequence[int], owned: range, num_buckets: int
) -> None:
    """Raise StateError unless ``buckets`` (each key's bucket, computed outside the
    runtime) are all in ``owned`` and agree with :func:`bucket_for` on a sample of the
    keys (the first, the last and evenly spaced ones: :data:`BUCKET_SPOT_CHECKS` in
    all)."""
    n = len(keys)
    if len(buckets) != n:
        raise StateError(f"{len(buckets)} buckets given for {n} keys")
    if n == 0:
        return
    lo, hi = min(buckets), max(buckets)
    if lo < owned.start or hi >= owned.stop:
        raise StateError(
            f"keys were routed to buckets [{lo}, {hi}], outside this backend's buckets "
            f"[{owned.start}, {owned.stop}); the routing side's placement is broken"
        )
    samples = min(n, BUCKET_SPOT_CHECKS)
    for j in range(samples):
        i = 0 if samples == 1 else j * (n - 1) // (samples - 1)
        key, given = keys[i], buckets[i]
        expected = bucket_for(key, num_buckets)
        if given != expected:
            raise StateError(
                f"key {key!r:.80} ({type(key).__name__}) came with bucket {given}, but "
                f"the runtime routes it to bucket {expected} of {num_buckets}: the "
                "routing side hashes keys differently (route with Spark's "
                "pmod(xxhash64(key), num_buckets) on a string or 64-bit integer key)"
            )
