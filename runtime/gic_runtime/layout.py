"""Where objects live under a storage root. One place, so every component agrees.

::

    <root>/jobs/<job_id>/
        checkpoints/chk-<id:012d>.manifest     manifests, one per completed checkpoint
        changelog/<epoch>/<uuid>.seg           changelog segments (DSTL uploads)
        snapshots/<bucket>/<uuid>.snap         materialized bucket snapshots
        control/...                            durable control requests (later issues)
    <root>/savepoints/<savepoint_id>/
        _savepoint.manifest                    manifest of a self-contained savepoint
        files/...                              copies of every file it references

A job only ever deletes objects under its own ``jobs/<job_id>/`` prefix (DESIGN §3.9).
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


def parse_checkpoint_id(name: str) -> int | None:
    """Checkpoint id from a manifest file name, or ``None`` if it is not one."""
    m = re.fullmatch(r"chk-(\d{12})" + re.escape(MANIFEST_SUFFIX), name.rsplit("/", 1)[-1])
    return int(m.group(1)) if m else None


def new_segment_uri(root: str, job_id: str, epoch: int) -> str:
    """A fresh, never-reused name for a changelog segment upload attempt."""
    return join(job_dir(root, job_id), "changelog", str(epoch), f"{uuid.uuid4().hex}.seg")


def new_snapshot_uri(root: str, job_id: str, bucket: int) -> str:
    """A fresh, never-reused name for a bucket snapshot."""
    return join(job_dir(root, job_id), "snapshots", str(bucket), f"{uuid.uuid4().hex}.snap")


def savepoint_dir(root: str, savepoint_id: str) -> str:
    return join(root, "savepoints", validate_id("savepoint id", savepoint_id))
