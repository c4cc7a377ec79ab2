"""Object store on the local filesystem (``file://`` URIs).

Atomicity: every write goes to a unique temporary file in the target directory, is
fsynced, and is then published with ``os.link`` (create-if-absent: fails if the target
exists) or ``os.replace`` (overwrite). Readers therefore never see partial objects.
Server-side copy is a hard link (objects are immutable), falling back to a byte copy
across devices. Temporary files start with ``.gic-tmp-`` and are never listed.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    StoragePermissionError,
)
from gic_runtime.storage.base import ObjectInfo

_TMP_PREFIX = ".gic-tmp-"


class LocalObjectStore:
    """:class:`~gic_runtime.storage.base.ObjectStore` over a directory. Thread-safe."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).absolute()
        try:
            self._root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create storage directory {self._root}: {exc.strerror}; "
                "choose a writable path"
            ) from exc

    @property
    def root_uri(self) -> str:
        return self._root.as_uri()

    @property
    def root(self) -> Path:
        """The directory this store lives in."""
        return self._root

    def uri_for(self, key: str) -> str:
        base = self.root_uri  # "file:///" for the filesystem root, else no trailing slash
        return f"{base}{key}" if base.endswith("/") else f"{base}/{key}"

    def _path(self, key: str) -> Path:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(f"invalid object key {key!r}", uri=self.uri_for(key))
        return self._root / key

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                if if_absent:
                    os.link(tmp, path)
                else:
                    os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
        except FileExistsError as exc:
            raise ObjectExistsError(f"object already exists: {key}", uri=self.uri_for(key)) from exc
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as fh:
                if start:
                    fh.seek(start)
                return fh.read() if length is None else fh.read(length)
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        # Walk only the deepest directory that contains the prefix.
        slash = prefix.rfind("/")
        start = self._root / prefix[:slash] if slash >= 0 else self._root
        if not start.is_dir():
            return
        found: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(start):
            for name in files:
                if name.startswith(_TMP_PREFIX):
                    continue
                full = Path(dirpath) / name
                key = full.relative_to(self._root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    st = full.stat()
                except FileNotFoundError:  # deleted while listing
                    continue
                found.append(ObjectInfo(key, st.st_size, st.st_mtime))
        found.sort(key=lambda info: info.key)
        yield from found

    def delete_many(self, keys: Iterable[str]) -> int:
        count = 0
        for key in keys:
            count += 1
            try:
                self._path(key).unlink(missing_ok=True)
            except OSError as exc:
                raise _translate(exc, self.uri_for(key)) from exc
        return count

    def copy(self, src_key: str, dst_key: str) -> None:
        src, dst = self._path(src_key), self._path(dst_key)
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dst)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
                tmp = dst.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
                shutil.copyfile(src, tmp)
                try:
                    os.link(tmp, dst)
                finally:
                    tmp.unlink(missing_ok=True)
        except FileExistsError as exc:
            raise ObjectExistsError(
                f"copy destination already exists: {dst_key}", uri=self.uri_for(dst_key)
            ) from exc
        except OSError as exc:
            raise _translate(exc, self.uri_for(src_key)) from exc


def _translate(exc: OSError, uri: str) -> StorageError:
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"no such object: {uri}", uri=uri)
    if isinstance(exc, PermissionError):
        return StoragePermissionError(
            f"permission denied on {uri}: check the directory's owner and mode", uri=uri
        )
    return StorageError(f"filesystem error on {uri}: {exc.strerror or exc}", uri=uri)
