"""Object store on the local filesystem (``file://`` URIs).

Atomicity: every write goes to a unique temporary file in the target directory, is
fsynced, and is then published with ``os.link`` (create-if-absent: fails if the target
exists) or ``os.replace`` (overwrite). Readers therefore never see partial objects.
Server-side copy is a hard link (objects are immutable), falling back to a byte copy
across devices. Temporary files start with ``.gic-tmp-`` and are never listed.

Symbolic links: the store never follows one below its root. Whoever can write under
the root (a driver running tenant code writes its job directory) could otherwise plant
a link that makes a sweep or ``gic gc`` delete, or a reader read, files outside it.
Every operation walks from the root one directory at a time, opening each with
``O_NOFOLLOW`` and working relative to the directory it opened (``dir_fd``), so a link
anywhere on the way -- or one swapped in while the operation runs -- is refused with
:class:`~gic_runtime.errors.UnsafePathError` naming the path, never followed. Listing
skips links (and anything that is neither a regular file nor a directory) with a
warning, so what a sweep deletes comes only from real files inside the root; deleting,
reading or writing a path that is or crosses a link raises. Files are opened with
``O_NONBLOCK`` and must be regular files, so a planted FIFO or device never blocks or
feeds a reader. The root itself (and the directories above it) may be links: they are
the operator's choice, resolved once per operation when the root is opened. A store
rooted at ``/`` (what :class:`~gic_runtime.storage.uri.StoreResolver` opens for
``file://`` URIs under no registered store) therefore refuses a link anywhere in an
absolute path: give such paths without links (their resolved form).

Listing: :meth:`LocalObjectStore.list` sorts, so it collects every object first;
:meth:`LocalObjectStore.list_unordered` walks lazily, which is what lets
:func:`~gic_runtime.storage.listing.list_bounded` refuse an oversized prefix after
looking at no more objects than its limit.

Thread-safety: stateless apart from the root; every call opens its own descriptors.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import stat
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    StoragePermissionError,
    UnsafePathError,
)
from gic_runtime.storage.object_store import ObjectInfo

_log = logging.getLogger(__name__)

_TMP_PREFIX = ".gic-tmp-"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_COPY_CHUNK = 1 << 20
_Parts = builtins.list[str]


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it was given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class LocalObjectStore:
    """:class:`~gic_runtime.storage.object_store.ObjectStore` over a directory. Thread-safe.

    Invariant: no operation follows a symbolic link below the root (see the module
    docstring).
    """

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

    # --- paths -------------------------------------------------------------------------

    def _parts(self, key: str) -> _Parts:
        parts = [p for p in key.split("/") if p not in ("", ".")]
        if not key or key.startswith("/") or ".." in parts or not parts:
            raise StorageError(f"invalid object key {key!r}", uri=self.uri_for(key))
        return parts

    def _open_dir(self, parts: _Parts, key: str, *, create: bool = False) -> int:
        """A descriptor of the directory ``root/parts...``, reached without following a
        link (created on the way when ``create``). The caller closes it."""
        fd = os.open(self._root, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        try:
            for i, part in enumerate(parts):
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    self._refuse_link(exc, fd, part, parts[: i + 1], key)
                    raise
                os.close(fd)
                fd = nfd
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _refuse_link(self, exc: OSError, dir_fd: int, name: str, parts: _Parts, key: str) -> None:
        """Raise :class:`UnsafePathError` when ``exc`` came from a link at ``name``."""
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            return
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise self._unsafe(parts, key, "is a symbolic link") from exc

    def _unsafe(self, parts: _Parts, key: str, what: str) -> UnsafePathError:
        path = str(self._root.joinpath(*parts))
        return UnsafePathError(
            f"refusing {self.uri_for(key)}: {path} {what}; the local store never follows "
            f"links (nor reads special files) below its root {self._root}. Remove it, or "
            "name the object by its real path",
            uri=self.uri_for(key),
            path=path,
        )

    def _lstat(self, dir_fd: int, parts: _Parts, key: str) -> os.stat_result:
        """``lstat`` of the last part; a link raises :class:`UnsafePathError`."""
        st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise self._unsafe(parts, key, "is a symbolic link")
        return st

    def _open_file(self, dir_fd: int, parts: _Parts, key: str) -> int:
        """A read descriptor of the regular file ``parts[-1]`` in ``dir_fd``."""
        try:
            fd = os.open(parts[-1], _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self._refuse_link(exc, dir_fd, parts[-1], parts, key)
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "is a directory")
            raise self._unsafe(parts, key, "is not a regular file")
        return fd

    # --- operations --------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self._put(key, lambda fd: _write_all(fd, data), if_absent=if_absent)

    def put_file(self, key: str, file: BinaryIO, size: int, *, if_absent: bool = False) -> None:
        def write(fd: int) -> None:
            file.seek(0)
            left = size
            while left > 0:
                chunk = file.read(min(left, _COPY_CHUNK))
                if not chunk:
                    raise OSError(errno.EIO, f"file ended {left} bytes before its size {size}")
                _write_all(fd, chunk)
                left -= len(chunk)

        self._put(key, write, if_absent=if_absent)

    def _put(self, key: str, write: Callable[[int], None], *, if_absent: bool) -> None:
        parts = self._parts(key)
        uri = self.uri_for(key)
        try:
            dfd = self._open_dir(parts[:-1], key, create=True)
            try:
                self._publish(dfd, parts[-1], write, if_absent=if_absent)
            finally:
                os.close(dfd)
        except FileExistsError as exc:
            raise ObjectExistsError(f"object already exists: {key}", uri=uri) from exc
        except OSError as exc:
            raise _translate(exc, uri) from exc

    def _publish(
        self, dfd: int, name: str, write: Callable[[int], None], *, if_absent: bool
    ) -> None:
        tmp = f"{_TMP_PREFIX}{uuid.uuid4().hex}"
        fd = os.open(tmp, _CREATE_FLAGS, 0o666, dir_fd=dfd)
        try:
            try:
                write(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            if if_absent:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], key)
            try:
                fd = self._open_file(dfd, parts, key)
            finally:
                os.close(dfd)
            with os.fdopen(fd, "rb") as fh:
                if start:
                    fh.seek(start)
                return fh.read() if length is None else fh.read(length)
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def size(self, key: str) -> int:
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], key)
            try:
                return self._lstat(dfd, parts, key).st_size
            finally:
                os.close(dfd)
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def exists(self, key: str) -> bool:
        parts = self._parts(key)
        try:
            dfd = self._open_dir(parts[:-1], key)
            try:
                return stat.S_ISREG(self._lstat(dfd, parts, key).st_mode)
            finally:
                os.close(dfd)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise _translate(exc, self.uri_for(key)) from exc

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order (collected, then sorted, on the first
        ``next``); see :meth:`list_unordered` for a lazy listing."""
        found = sorted(self._walk(prefix), key=lambda info: info.key)
        yield from found

    def list_unordered(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects :meth:`list` yields, in directory order, each found only when
        the previous one was consumed: a consumer that stops early stops the walk
        (:class:`~gic_runtime.storage.listing.UnorderedListing`)."""
        yield from self._walk(prefix)

    def _walk(self, prefix: str) -> Iterator[ObjectInfo]:
        # Walk only the deepest directory that contains the prefix.
        slash = prefix.rfind("/")
        start = [p for p in prefix[:slash].split("/") if p not in ("", ".")] if slash > 0 else []
        if ".." in start:
            raise StorageError(f"invalid prefix {prefix!r}", uri=self.uri_for(prefix))
        try:
            fd = self._open_dir(start, prefix)
        except (FileNotFoundError, NotADirectoryError):
            return
        except UnsafePathError as exc:
            _log.warning("not listing %s: %s", self.uri_for(prefix), exc)
            return
        except OSError as exc:
            raise _translate(exc, self.uri_for(prefix)) from exc
        try:
            yield from self._scan(fd, start, prefix)
        except OSError as exc:
            raise _translate(exc, self.uri_for(prefix)) from exc
        finally:
            os.close(fd)

    def _scan(self, fd: int, parts: _Parts, prefix: str) -> Iterator[ObjectInfo]:
        """The regular files under directory ``fd`` (``root/parts``) whose keys start
        with ``prefix``, found lazily; links and special files are skipped with a
        warning. Holds two descriptors per directory level while suspended."""
        with os.scandir(fd) as entries:
            for entry in entries:
                key = "/".join([*parts, entry.name])
                if entry.is_symlink():
                    _log.warning(
                        "skipping %s: symbolic links below the storage root are never "
                        "followed or listed (remove it)",
                        self._root.joinpath(key),
                    )
                elif entry.is_dir(follow_symlinks=False):
                    if not (key + "/").startswith(prefix) and not prefix.startswith(key + "/"):
                        continue
                    try:
                        sub = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                    except FileNotFoundError:  # deleted while listing
                        continue
                    except OSError as exc:
                        if exc.errno == errno.ELOOP:  # replaced by a link meanwhile
                            continue
                        raise
                    try:
                        yield from self._scan(sub, [*parts, entry.name], prefix)
                    finally:
                        os.close(sub)
                elif entry.is_file(follow_symlinks=False):
                    if entry.name.startswith(_TMP_PREFIX) or not key.startswith(prefix):
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:  # deleted while listing
                        continue
                    yield ObjectInfo(key, st.st_size, st.st_mtime)
                else:
                    _log.warning(
                        "skipping %s: not a regular file or directory", self._root.joinpath(key)
                    )

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete the given objects (see the protocol). A key whose path is or crosses a
        symbolic link raises :class:`UnsafePathError` (keys before it are deleted)."""
        count = 0
        for key in keys:
            count += 1
            parts = self._parts(key)
            try:
                dfd = self._open_dir(parts[:-1], key)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                raise _translate(exc, self.uri_for(key)) from exc
            try:
                self._lstat(dfd, parts, key)
                os.unlink(parts[-1], dir_fd=dfd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _translate(exc, self.uri_for(key)) from exc
            finally:
                os.close(dfd)
        return count

    def copy(self, src_key: str, dst_key: str) -> None:
        src, dst = self._parts(src_key), self._parts(dst_key)
        try:
            sdfd = self._open_dir(src[:-1], src_key)
            try:
                sfd = self._open_file(sdfd, src, src_key)
                try:
                    ddfd = self._open_dir(dst[:-1], dst_key, create=True)
                    try:
                        self._link_or_copy(sdfd, src[-1], sfd, ddfd, dst[-1])
                    finally:
                        os.close(ddfd)
                finally:
                    os.close(sfd)
            finally:
                os.close(sdfd)
        except FileExistsError as exc:
            raise ObjectExistsError(
                f"copy destination already exists: {dst_key}", uri=self.uri_for(dst_key)
            ) from exc
        except OSError as exc:
            raise _translate(exc, self.uri_for(src_key)) from exc

    def _link_or_copy(self, sdfd: int, src: str, sfd: int, ddfd: int, dst: str) -> None:
        try:
            os.link(src, dst, src_dir_fd=sdfd, dst_dir_fd=ddfd, follow_symlinks=False)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                raise

        def write(fd: int) -> None:
            while chunk := os.read(sfd, _COPY_CHUNK):
                _write_all(fd, chunk)

        self._publish(ddfd, dst, write, if_absent=True)


def _translate(exc: OSError, uri: str) -> StorageError:
    if isinstance(exc, FileNotFoundError):
        return ObjectNotFoundError(f"no such object: {uri}", uri=uri)
    if isinstance(exc, PermissionError):
        return StoragePermissionError(
            f"permission denied on {uri}: check the directory's owner and mode", uri=uri
        )
    return StorageError(f"filesystem error on {uri}: {exc.strerror or exc}", uri=uri)
