"""Where objects live under a storage root. One place, so every component agrees.

::

    <root>/jobs/<job_id>/
        checkpoints/chk-<id:012d>.manifest     manifests, one per completed checkpoint
        checkpoints/chk-<id:012d>.e<epoch:012d>.manifest
                                               the same, when a superseded manifest holds
                                               the usual name
        changelog/<epoch>/<uuid>.seg           changelog segments (DSTL uploads)
        snapshots/<bucket>/<epoch>-<uuid>.snap materialized bucket snapshots (older
                                               runtimes wrote <uuid>.snap)
        control/...                            durable control requests and outcomes
        epochs/epoch-<epoch:012d>              fencing claim of a launch (marker)
        epochs/epoch-<epoch:012d>.start        where that launch starts (claim start record)
    <root>/savepoints/<savepoint_id>/
        _savepoint.manifest                    manifest of a self-contained savepoint
        files/...                              copies of every file it references

A job only ever deletes objects under its own ``jobs/<job_id>/`` prefix
(docs/architecture.md I9).
"""

from __future__ import annotations

import re
import uuid

from gic_runtime.errors import ConfigurationError
from gic_runtime.storage.uri import join

_ID = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
MANIFEST_SUFFIX = ".manifest"
SAVEPOINT_MANIFEST = "_savepoint.manifest"


def validate_id(kind: str, value: str) -> str:
    """Job and savepoint ids are lowercase DNS-like names (they become path segments)."""
    if not _ID.match(value):
        raise ConfigurationError(
            f"invalid {kind} {value!r}: use 1-128 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit"
        )
    return value


def job_dir(root: str, job_id: str) -> str:
    return join(root, "jobs", validate_id("job id", job_id))


def checkpoints_dir(root: str, job_id: str) -> str:
    return join(job_dir(root, job_id), "checkpoints")


def manifest_uri(root: str, job_id: str, checkpoint_id: int) -> str:
    return join(checkpoints_dir(root, job_id), f"chk-{checkpoint_id:012d}{MANIFEST_SUFFIX}")


def alternate_manifest_uri(root: str, job_id: str, checkpoint_id: int, epoch: int) -> str:
    """Where epoch ``epoch`` writes the manifest of ``checkpoint_id`` when the usual name
    is taken by a superseded manifest (:mod:`gic_runtime.checkpoint.claims`)."""
    name = f"chk-{checkpoint_id:012d}.e{epoch:012d}{MANIFEST_SUFFIX}"
    return join(checkpoints_dir(root, job_id), name)


_MANIFEST_NAME = re.compile(r"chk-(\d{12})(?:\.e(\d{12}))?" + re.escape(MANIFEST_SUFFIX))


def parse_checkpoint_id(name: str) -> int | None:
    """Checkpoint id from a manifest file name (usual or alternate), or ``None`` if it is
    not one."""
    m = _MANIFEST_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def parse_manifest_epoch(name: str) -> int | None:
    """The epoch an alternate manifest name carries, or ``None`` (usual name, or not a
    manifest name)."""
    m = _MANIFEST_NAME.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(2)) if m and m.group(2) else None


_EPOCH_MARKER = re.compile(r"epoch-(\d{12})")
_EPOCH_START = re.compile(r"epoch-(\d{12})\.start")


def epochs_dir(root: str, job_id: str) -> str:
    return join(job_dir(root, job_id), "epochs")


def epoch_marker_uri(root: str, job_id: str, epoch: int) -> str:
    return join(epochs_dir(root, job_id), f"epoch-{epoch:012d}")


def epoch_start_uri(root: str, job_id: str, epoch: int) -> str:
    return join(epochs_dir(root, job_id), f"epoch-{epoch:012d}.start")


def parse_epoch(name: str) -> int | None:
    """Epoch from a marker's file name (or key/URI), or ``None`` if it is not one."""
    m = _EPOCH_MARKER.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def parse_epoch_start(name: str) -> int | None:
    """Epoch from a claim start record's file name (or key/URI), or ``None``."""
    m = _EPOCH_START.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def new_segment_uri(root: str, job_id: str, epoch: int) -> str:
    """A fresh, never-reused name for a changelog segment upload attempt."""
    return join(job_dir(root, job_id), "changelog", str(epoch), f"{uuid.uuid4().hex}.seg")


def new_snapshot_uri(root: str, job_id: str, bucket: int, *, epoch: int) -> str:
    """A fresh, never-reused name for a bucket snapshot written by attempt ``epoch``."""
    name = f"{epoch}-{uuid.uuid4().hex}.snap"
    return join(job_dir(root, job_id), "snapshots", str(bucket), name)


_SNAPSHOT = re.compile(r"(\d+)-[0-9a-f]{32}\.snap")


def parse_snapshot_epoch(name: str) -> int | None:
    """The epoch that wrote a snapshot, from its file name (or key/URI); ``None`` for a
    name without one (written by an older runtime) or not a snapshot's."""
    m = _SNAPSHOT.fullmatch(name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def savepoint_dir(root: str, savepoint_id: str) -> str:
    return join(root, "savepoints", validate_id("savepoint id", savepoint_id))


def restore_source_location(uri: str) -> str:
    """Where a restore source's files are, as the runtime opens it: a native savepoint
    named by its ``_savepoint.manifest`` is its directory; a directory or a checkpoint's
    manifest is itself (trailing slashes dropped). Two names of one source give one
    location."""
    location = uri.rstrip("/")
    if location.endswith("/" + SAVEPOINT_MANIFEST):
        location = location[: -len(SAVEPOINT_MANIFEST) - 1]
    return location
