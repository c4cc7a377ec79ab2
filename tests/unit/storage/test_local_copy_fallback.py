"""The local store's copy where a hard link is refused (another filesystem, or one
without links): the bytes are copied to a temporary name and published create-once."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.errors import ObjectExistsError
from gic_runtime.storage import LocalObjectStore


@pytest.fixture
def no_links_to_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.link`` of a copy's source refuses (EXDEV); publishing a temporary file still
    links, as on a filesystem the store's root sits on."""
    real = os.link

    def link(src: Any, dst: Any, **kwargs: Any) -> None:
        if kwargs.get("follow_symlinks") is False:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", link)


@pytest.mark.usefixtures("no_links_to_sources")
def test_a_refused_link_copies_the_bytes(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    data = os.urandom(3 * (1 << 20) + 17)  # several copy chunks
    store.put("src/a", data)
    store.copy("src/a", "dst/b")
    assert store.get("dst/b") == data
    assert store.get("src/a") == data
    assert (tmp_path / "src" / "a").stat().st_nlink == 1  # a copy, not a link
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["b"]  # no temporary left


@pytest.mark.usefixtures("no_links_to_sources")
def test_a_copied_fallback_onto_an_existing_object_fails_and_keeps_it(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("src/a", b"new")
    store.put("dst/b", b"old")
    with pytest.raises(ObjectExistsError):
        store.copy("src/a", "dst/b")
    assert store.get("dst/b") == b"old"
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["b"]
