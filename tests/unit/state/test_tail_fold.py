"""Folding a changelog tail per key and merging it into a snapshot's sorted entries
equals replaying the tail on the snapshot (gic_runtime.state.tail_fold)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.changelog.records import Op
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.tail_fold import TailFold

# Keys share prefixes (b"a", b"ab", b"abc", ...) so prefix deletions hit several at once.
_KEYS = st.sampled_from([b"", b"a", b"ab", b"abc", b"abd", b"b", b"ba", b"c\x00", b"c\xff"])
_VALUES = st.binary(max_size=4)
_CHANGES = st.lists(
    st.one_of(
        st.tuples(st.just(Op.PUT), _KEYS, _VALUES),
        st.tuples(st.just(Op.DELETE), _KEYS, st.just(b"")),
        st.tuples(st.just(Op.APPEND), _KEYS, _VALUES),
        st.tuples(st.just(Op.DELETE_PREFIX), _KEYS, st.just(b"")),
    ),
    max_size=40,
)
_BASES = st.dictionaries(_KEYS, _VALUES, max_size=9)


def _replayed(base: dict[bytes, bytes], changes: list[tuple[Op, bytes, bytes]]) -> list:
    """The reference: the base in a store, then every change applied in order."""
    store = InMemoryStore()
    store.put_many(0, sorted(base.items()))
    store.apply(0, changes)
    return store.scan(0, b"")


@given(_BASES, _CHANGES)
def test_merging_the_fold_into_the_base_equals_replaying_the_changes(
    base: dict[bytes, bytes], changes: list[tuple[Op, bytes, bytes]]
) -> None:
    fold = TailFold()
    fold.add_all(changes)
    merged = list(fold.merge(iter(sorted(base.items()))))
    assert merged == _replayed(base, changes)
    keys = [k for k, _ in merged]
    assert keys == sorted(set(keys))  # ascending, each key once: ready to append
    assert fold.changes == len(changes)
    assert fold.raw_bytes == sum(len(k) + len(v) for _, k, v in changes)
    assert fold.prefix_deletes == sum(op is Op.DELETE_PREFIX for op, _, _ in changes)
    assert fold.base_entries == len(base)


@given(_BASES, _CHANGES, _CHANGES)
def test_a_fold_applied_as_changes_then_the_rest_replayed_equals_replaying_all(
    base: dict[bytes, bytes],
    first: list[tuple[Op, bytes, bytes]],
    rest: list[tuple[Op, bytes, bytes]],
) -> None:
    """The fallback of a restore whose tail outgrows its bound: the base loaded, the
    fold so far applied as changes, the remaining changes replayed in order."""
    fold = TailFold()
    fold.add_all(first)
    store = InMemoryStore()
    store.put_many(0, sorted(base.items()))
    store.apply(0, list(fold.changes_to_apply()))
    store.apply(0, rest)
    assert store.scan(0, b"") == _replayed(base, first + rest)


def test_appends_build_on_the_snapshot_value_and_start_over_after_a_delete() -> None:
    fold = TailFold()
    fold.add_all(
        [
            (Op.APPEND, b"list", b"3"),
            (Op.APPEND, b"list", b"4"),
            (Op.APPEND, b"gone", b"x"),
            (Op.DELETE, b"gone", b""),
            (Op.APPEND, b"gone", b"y"),
            (Op.DELETE_PREFIX, b"map/", b""),
            (Op.APPEND, b"map/b", b"z"),
        ]
    )
    base = [(b"gone", b"old"), (b"list", b"12"), (b"map/a", b"1"), (b"map/b", b"2")]
    assert list(fold.merge(iter(base))) == [(b"gone", b"y"), (b"list", b"1234"), (b"map/b", b"z")]
    assert len(fold) == 3
