"""create_once and create_file_once: a write-once name survives a retried request whose
answer was lost."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pytest

from gic_runtime.errors import ObjectExistsError
from gic_runtime.storage import LocalObjectStore, writes
from gic_runtime.storage.writes import (
    create_file_once,
    create_once,
    file_held_exactly,
    holds_exactly,
)


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


def _spooled(tmp_path: Path, data: bytes) -> BinaryIO:
    f = (tmp_path / "spool").open("w+b")
    f.write(data)
    return f


def test_a_file_is_created_once_and_our_own_file_already_there_counts_as_written(
    tmp_path: Path,
) -> None:
    store = LocalObjectStore(tmp_path / "store")
    with _spooled(tmp_path, b"data") as f:
        assert create_file_once(store, "a/b", f, 4) is True
        assert create_file_once(store, "a/b", f, 4) is False
    assert store.get("a/b") == b"data"


@pytest.mark.parametrize("existing", [b"other-data", b"dat", b"data-longer", b"datA" * 5])
def test_a_different_object_is_a_collision_for_a_file_too(
    tmp_path: Path, existing: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "_COMPARE_CHUNK", 3)  # compared in several ranged reads
    store = LocalObjectStore(tmp_path / "store")
    store.put("k", existing)
    data = b"data" * 5
    with _spooled(tmp_path, data) as f:
        with pytest.raises(ObjectExistsError):
            create_file_once(store, "k", f, len(data))
        assert not file_held_exactly(store, "k", f, len(data))
    assert store.get("k") == existing
