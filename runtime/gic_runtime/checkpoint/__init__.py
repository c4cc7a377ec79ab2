"""Checkpoints: manifests, ownership, the shared-file registry and the orphan sweep."""

from gic_runtime.checkpoint.catalog import (
    CheckpointRef,
    LatestCheckpoint,
    SkippedManifest,
    find_latest_checkpoint,
    list_checkpoints,
    load_retained,
    read_checkpoint,
    read_manifest,
    write_manifest,
)
from gic_runtime.checkpoint.manifest import (
    FORMAT_VERSION,
    Manifest,
    ManifestKind,
    RestoreLineage,
    RestoreMode,
    SavepointFormat,
    SavepointInfo,
    SavepointType,
    StoredManifest,
    map_uris,
)
from gic_runtime.checkpoint.manifest_codec import (
    decode_manifest,
    encode_manifest,
    manifest_base_dir,
)
from gic_runtime.checkpoint.ownership import (
    Owner,
    OwnershipPolicy,
    delete_keys,
    delete_uris,
)
from gic_runtime.checkpoint.registry import (
    DeletionReport,
    RegistrySnapshot,
    RegistryStats,
    SharedFileRegistry,
)
from gic_runtime.checkpoint.sweep import SweepResult, sweep_orphans
from gic_runtime.errors import OwnershipError

__all__ = [
    "FORMAT_VERSION",
    "CheckpointRef",
    "DeletionReport",
    "LatestCheckpoint",
    "Manifest",
    "ManifestKind",
    "Owner",
    "OwnershipError",
    "OwnershipPolicy",
    "RegistrySnapshot",
    "RegistryStats",
    "RestoreLineage",
    "RestoreMode",
    "SavepointFormat",
    "SavepointInfo",
    "SavepointType",
    "SharedFileRegistry",
    "SkippedManifest",
    "StoredManifest",
    "SweepResult",
    "decode_manifest",
    "delete_keys",
    "delete_uris",
    "encode_manifest",
    "find_latest_checkpoint",
    "list_checkpoints",
    "load_retained",
    "manifest_base_dir",
    "map_uris",
    "read_checkpoint",
    "read_manifest",
    "sweep_orphans",
    "write_manifest",
]
