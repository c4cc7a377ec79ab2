"""Where a job keeps machine-local files when its settings name no ``local_dir``.

Machine-local files are the executors' state copies, bucket locks and materialization
records, and the driver's own (Spark's checkpoint directory, ``gic run``'s Spark log).
They are caches: losing them costs a restore from storage, never correctness.

Reads the filesystem (whether a directory exists or may be created) and the user name;
imports neither pyspark nor the Spark integration. Thread-safe.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from pathlib import Path

from gic_runtime.storage.uri import StorageURI


def default_local_dir(storage: str | None = None) -> str:
    """The local directory of a local-mode job (and of the driver's own files) when
    ``local_dir`` is not set.

    For a ``file://`` storage root ``/a/b/root``: ``/a/b/root-local``, next to the storage
    and never inside it (where the orphan sweep would count its files as the job's), so
    jobs on different roots keep apart and a root's local state is found beside it; when
    this user can create it (or it exists). Otherwise (S3, the filesystem root itself, a
    root under a directory this user cannot write): ``<tmp>/gic-local-<user>``, one per
    user so users of a shared temporary directory never share (or lock each other out
    of) one.
    """
    if storage is not None:
        loc = StorageURI.parse(storage)
        root = Path(loc.path)
        if loc.scheme == "file" and root.name:
            beside = root.with_name(f"{root.name}-local")
            if _creatable(beside):
                return str(beside)
    return os.path.join(tempfile.gettempdir(), f"gic-local-{_user()}")


def _creatable(directory: Path) -> bool:
    """Whether ``directory`` exists or this user may create it: its nearest existing
    ancestor is a writable directory."""
    if directory.is_dir():
        return True
    existing = next((d for d in directory.parents if d.exists()), None)
    return existing is not None and existing.is_dir() and os.access(existing, os.W_OK)


def _user() -> str:
    """The current user's name for file names (the uid when it has none)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # a uid without a passwd entry (containers)
        name = str(os.getuid())
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name) or str(os.getuid())
