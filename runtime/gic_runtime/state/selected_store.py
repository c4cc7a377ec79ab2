"""The buckets a batch runs on from keys read without restoring them (docs/architecture.md
§6.3).

A batch whose processor names, before it runs, every state key it reads (the keys of
:func:`~gic_runtime.state.selective_read.select_keys`) need not wait for its buckets'
restore. :class:`SelectedBuckets` stands in for the local store on those buckets for
that one batch: it answers the named keys with the values the checkpoint holds for
them and keeps the batch's own writes; the changelog is written as always, so the
checkpoint is the same as on a restored bucket. The backend then restores the buckets
to the lineage that checkpoint produced, and the local copy is used from there on.

Invariants:

* a read of a key the batch did not name (nor wrote) raises
  :class:`~gic_runtime.errors.StateError` instead of answering from nothing: a processor
  that reads beyond what it named fails loudly, it never sees absent state;
* operations a selection cannot answer (scans, prefix deletions, appends, snapshots,
  lineage metadata) raise StateError naming the operation; the writes it keeps are
  PUT and DELETE, which need no earlier value;
* nothing here reaches the local copy: the buckets' local data and metadata stay as
  they were (metadata that never equals the expected lineage, or the bucket would not
  have been selected), so a failure leaves them to be rebuilt as before.

Not thread-safe: the task thread that owns the backend uses it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NoReturn

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state.stores import BucketMeta, BucketView

__all__ = ["SelectedBuckets"]


class SelectedBuckets:
    """The named keys of some buckets, with their values (see the module docstring).

    ``values[bucket]`` maps each named key the bucket holds to its value; ``named[bucket]``
    is every key named for it (held or not). Every bucket to serve is a key of
    ``named``, also with no key named (then any access to it fails)."""

    def __init__(
        self,
        named: Mapping[int, Collection[bytes]],
        values: Mapping[int, Mapping[bytes, bytes]],
    ) -> None:
        self.buckets: frozenset[int] = frozenset(named)
        self._named = {b: set(keys) for b, keys in named.items()}
        self._values = {b: dict(values.get(b, {})) for b in named}

    def _known(self, bucket: int, key: bytes) -> dict[bytes, bytes]:
        if key not in self._named[bucket]:
            raise StateError(
                f"bucket {bucket}: the batch reads a state key it did not name before it "
                f"ran ({key[:40]!r}); the bucket is served from the keys read for the batch "
                "until it is restored. The processor's state_keys must name every key it "
                "reads (set restore_select_keys=false to restore before processing instead)"
            )
        return self._values[bucket]

    def get(self, bucket: int, key: bytes) -> bytes | None:
        return self._known(bucket, key).get(key)

    def get_many(self, bucket: int, keys: Sequence[bytes]) -> list[bytes | None]:
        named, values = self._named[bucket], self._values[bucket]
        if not named.issuperset(keys):
            for key in keys:
                self._known(bucket, key)
        get = values.get
        return [get(key) for key in keys]

    def put(self, bucket: int, key: bytes, value: bytes) -> None:
        self._named[bucket].add(key)
        self._values[bucket][key] = value

    def put_many(self, bucket: int, items: Sequence[tuple[bytes, bytes]]) -> None:
        values = self._values[bucket]
        values.update(items)
        self._named[bucket].update(key for key, _ in items)

    def delete(self, bucket: int, key: bytes) -> None:
        self._named[bucket].add(key)
        self._values[bucket].pop(key, None)

    def apply(self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]) -> int:
        n = 0
        for op, key, value in changes:
            if op is Op.PUT:
                self.put(bucket, key, value)
            elif op is Op.DELETE:
                self.delete(bucket, key)
            else:
                self._refuse(bucket, op.name.lower())
            n += 1
        return n

    def load_sorted(self, bucket: int, items: Iterable[tuple[bytes, bytes]]) -> int:
        self._refuse(bucket, "load_sorted")

    def append(self, bucket: int, key: bytes, value: bytes) -> None:
        self._refuse(bucket, "append")

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:
        self._refuse(bucket, "delete_prefix")

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:
        self._refuse(bucket, "scan")

    def scan_range(self, bucket: int, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        self._refuse(bucket, "scan_range")

    def snapshot_items(self, bucket: int) -> BucketView:
        self._refuse(bucket, "snapshot_items")

    def clear_bucket(self, bucket: int) -> None:
        self._refuse(bucket, "clear_bucket")

    def get_meta(self, bucket: int) -> BucketMeta | None:
        self._refuse(bucket, "get_meta")

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        self._refuse(bucket, "set_meta")

    def _refuse(self, bucket: int, op: str) -> NoReturn:
        raise StateError(
            f"bucket {bucket}: {op} needs the bucket's whole state, and the batch is served "
            "from the keys it named until the bucket is restored; a processor that scans, "
            "appends or deletes prefixes must not name its keys (state_keys), so its "
            "buckets are restored before it runs"
        )
