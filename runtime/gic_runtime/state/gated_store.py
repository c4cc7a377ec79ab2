"""A :class:`~gic_runtime.state.stores.KVStore` whose buckets open only once restored,
or are served for one batch from keys read without restoring them.

The keyed backend reads and writes through a :class:`GatedStore` over its local store.
While a background restore (:mod:`~gic_runtime.state.background_restore`) runs, every
operation on a bucket first calls the gate with the bucket, which returns once the
bucket is complete (or raises the bucket's restore error); so no state, timer or
materialization view ever sees a bucket half restored, whatever path it takes to the
store. Without a gate every operation is the inner store's own bound method (bound on
the instance, so an open store costs nothing per call); :meth:`flush` and :meth:`close`
are never gated.

For one batch after a start, :meth:`set_overlay` may hand some buckets to a
:class:`~gic_runtime.state.selected_store.SelectedBuckets` (the keys that batch named,
read from storage): every operation on those buckets goes to it, never to the inner
store nor the gate; the other buckets are as above.

Thread-safety: :meth:`set_gate` may be called from any thread (rebinding attributes is
atomic); the operations follow the inner store's rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from gic_runtime.changelog.records import Op
from gic_runtime.state.selected_store import SelectedBuckets
from gic_runtime.state.stores import BucketMeta, BucketView, KVStore

__all__ = ["GatedStore"]

_BUCKET_OPS: Final = (
    "get",
    "put",
    "get_many",
    "put_many",
    "delete",
    "append",
    "delete_prefix",
    "scan",
    "scan_range",
    "apply",
    "snapshot_items",
    "clear_bucket",
    "get_meta",
    "set_meta",
)


def _gated(gate: Callable[[int], None], op: Callable[..., Any]) -> Callable[..., Any]:
    def call(bucket: int, *args: Any) -> Any:
        gate(bucket)
        return op(bucket, *args)

    return call


def _routed(
    buckets: frozenset[int], aside: Callable[..., Any], op: Callable[..., Any]
) -> Callable[..., Any]:
    def call(bucket: int, *args: Any) -> Any:
        if bucket in buckets:
            return aside(bucket, *args)
        return op(bucket, *args)

    return call


class GatedStore:
    """``inner`` with an optional per-bucket gate (see the module docstring)."""

    def __init__(self, inner: KVStore) -> None:
        self.inner = inner
        self._gate: Callable[[int], None] | None = None
        self._overlay: SelectedBuckets | None = None
        self._bind()

    @property
    def gate(self) -> Callable[[int], None] | None:
        return self._gate

    def set_gate(self, gate: Callable[[int], None] | None) -> None:
        """Call ``gate(bucket)`` before every operation on a bucket (``None``: none)."""
        self._gate = gate
        self._bind()

    @property
    def overlay(self) -> SelectedBuckets | None:
        return self._overlay

    def set_overlay(self, overlay: SelectedBuckets | None) -> None:
        """Send every operation on ``overlay.buckets`` to ``overlay`` (``None``: none)."""
        self._overlay = overlay
        self._bind()

    def _bind(self) -> None:
        gate, overlay = self._gate, self._overlay
        for name in _BUCKET_OPS:
            op = getattr(self.inner, name)
            if gate is not None:
                op = _gated(gate, op)
            if overlay is not None:
                op = _routed(overlay.buckets, getattr(overlay, name), op)
            self.__dict__[name] = op

    # The methods below state the protocol for type checkers; the instance attributes
    # bound by _bind take precedence over them.

    def get(self, bucket: int, key: bytes) -> bytes | None:  # pragma: no cover
        return self.inner.get(bucket, key)

    def put(self, bucket: int, key: bytes, value: bytes) -> None:  # pragma: no cover
        self.inner.put(bucket, key, value)

    def get_many(
        self, bucket: int, keys: Sequence[bytes]
    ) -> list[bytes | None]:  # pragma: no cover
        return self.inner.get_many(bucket, keys)

    def put_many(
        self, bucket: int, items: Sequence[tuple[bytes, bytes]]
    ) -> None:  # pragma: no cover
        self.inner.put_many(bucket, items)

    def load_sorted(self, bucket: int, items: Iterable[tuple[bytes, bytes]]) -> int:
        return self.inner.load_sorted(bucket, items)  # pragma: no cover

    def delete(self, bucket: int, key: bytes) -> None:  # pragma: no cover
        self.inner.delete(bucket, key)

    def append(self, bucket: int, key: bytes, value: bytes) -> None:  # pragma: no cover
        self.inner.append(bucket, key, value)

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:  # pragma: no cover
        self.inner.delete_prefix(bucket, prefix)

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:  # pragma: no cover
        return self.inner.scan(bucket, prefix)

    def scan_range(
        self, bucket: int, start: bytes, stop: bytes
    ) -> list[tuple[bytes, bytes]]:  # pragma: no cover
        return self.inner.scan_range(bucket, start, stop)

    def apply(
        self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]
    ) -> int:  # pragma: no cover
        return self.inner.apply(bucket, changes)

    def snapshot_items(self, bucket: int) -> BucketView:  # pragma: no cover
        return self.inner.snapshot_items(bucket)

    def clear_bucket(self, bucket: int) -> None:  # pragma: no cover
        self.inner.clear_bucket(bucket)

    def get_meta(self, bucket: int) -> BucketMeta | None:  # pragma: no cover
        return self.inner.get_meta(bucket)

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:  # pragma: no cover
        self.inner.set_meta(bucket, meta)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()
