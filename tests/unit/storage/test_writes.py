"""create_once: a write-once name survives a retried request whose answer was lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from gic_runtime.errors import ObjectExistsError
from gic_runtime.storage import LocalObjectStore
from gic_runtime.storage.writes import create_once, holds_exactly


def test_first_write_creates(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    assert create_once(store, "a/b", b"data") is True
    assert store.get("a/b") == b"data"


def test_our_own_bytes_already_there_count_as_written(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("k", b"data")
    assert create_once(store, "k", b"data") is False


@pytest.mark.parametrize("existing", [b"other", b"dat", b"data-longer"])
def test_a_different_object_is_a_collision_and_stays(tmp_path: Path, existing: bytes) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("k", existing)
    with pytest.raises(ObjectExistsError):
        create_once(store, "k", b"data")
    assert store.get("k") == existing
    assert not holds_exactly(store, "k", b"data")
