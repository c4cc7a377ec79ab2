"""``gic describe ID|PATH``: what a checkpoint or savepoint holds and who owns its files.

The argument may be a checkpoint id of the job (digits, or ``latest``; the job and
storage come from ``--job-id`` / ``--storage`` / the settings, as ``gic checkpoints``
lists them), a checkpoint manifest (``.../checkpoints/chk-N.manifest``), a native
savepoint (its directory or ``_savepoint.manifest``) or a canonical savepoint (its
directory or ``_canonical.json``); plain local paths become ``file://`` URIs. An id that
the job does not have (or a job that does not exist) is one error naming what exists.
Every file read is verified (header, version, checksum): a damaged or foreign file ends
the command with one line naming it.

The storage root used to classify ownership is taken from the path itself when it lies
in the standard layout (``<root>/jobs/<job>/checkpoints/`` or ``<root>/savepoints/<id>/``),
else from ``--storage`` / the settings.

Read-only. Thread-safety: a command runs on one thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gic_runtime.checkpoint.catalog import list_checkpoints, read_manifest
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.checkpoint.ownership import Owner
from gic_runtime.checkpoint.sweep import policy_for
from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    JobContext,
    JobIdOpt,
    JsonOpt,
    StorageOpt,
    human_bytes,
    iso,
    load_settings,
    stdout_console,
    to_uri,
)
from gic_runtime.cli.inventory import open_existing_job, require_job
from gic_runtime.cli.summary import (
    OwnerGroup,
    bucket_totals,
    group_by_owner,
    lineage_json,
    referenced_bytes,
)
from gic_runtime.layout import MANIFEST_SUFFIX, SAVEPOINT_MANIFEST
from gic_runtime.savepoint.canonical import INDEX_NAME, read_canonical_index
from gic_runtime.storage.uri import StoreResolver, join

HELP = """Describe a checkpoint (by id of the job, or its manifest), a native savepoint or a
canonical savepoint.

  gic describe 7 --job-id word-count       checkpoint 7 of job word-count
  gic describe latest --job-id word-count  its latest checkpoint
  gic describe gic-data/savepoints/sp-...  a savepoint directory

Shows kind, job, checkpoint id, epoch, creation time, buckets, per-bucket totals
(snapshots, changelog handles, sequence numbers), the restore lineage, and which owner
holds the referenced files (job timeline, savepoint, restore source, other) with counts
and bytes referenced.

With --json, prints one JSON document with these keys (stable; times UTC ISO-8601,
sizes bytes; null where the kind has no such property):

  kind            checkpoint | native-savepoint | canonical-savepoint
  uri             the manifest or canonical index read
  directory       the savepoint directory (null for checkpoints)
  job_id, checkpoint_id, epoch, created_at, num_buckets
  savepoint       null or: type (intermediate | terminal), format
  buckets         null or: with_state, snapshots, changelog_handles, seq_total, max_seq,
                  snapshot_bytes, changelog_bytes
  canonical       null or: files, rows, bytes
  restored_from   null or: source, mode, source_checkpoint_id, released
  owners          list of: owner, label, objects, bytes
  warnings        list of text
"""

PathArg = Annotated[
    str,
    typer.Argument(
        metavar="ID|PATH",
        help="Checkpoint id of the job (or 'latest'), checkpoint manifest, native savepoint "
        "or canonical savepoint (URI or local path).",
        show_default=False,
    ),
]


def _exists(resolver: StoreResolver, uri: str) -> bool:
    store, key = resolver.resolve(uri)
    return store.exists(key)


def _locate(resolver: StoreResolver, uri: str) -> tuple[str, str]:
    """``("manifest", manifest_uri)`` or ``("canonical", directory)``."""
    if uri.endswith("/" + INDEX_NAME):
        if _exists(resolver, uri):
            return "canonical", uri[: -len(INDEX_NAME) - 1]
    elif uri.endswith(MANIFEST_SUFFIX):
        if _exists(resolver, uri):
            return "manifest", uri
    elif _exists(resolver, join(uri, SAVEPOINT_MANIFEST)):
        return "manifest", join(uri, SAVEPOINT_MANIFEST)
    elif _exists(resolver, join(uri, INDEX_NAME)):
        return "canonical", uri
    elif _exists(resolver, uri):
        return "manifest", uri  # reading it says what is wrong with it
    raise CLIError(
        f"nothing to describe at {uri}: expected a checkpoint manifest (chk-N.manifest), "
        f"a native savepoint directory (with {SAVEPOINT_MANIFEST}) or a canonical "
        f"savepoint directory (with {INDEX_NAME}); check the path"
    )


def _checkpoint_uri(ctx: JobContext, wanted: str) -> str:
    """The manifest URI of checkpoint ``wanted`` (digits or ``latest``) of the job."""
    require_job(ctx)
    refs = list_checkpoints(ctx.resolver, ctx.root, ctx.job_id)
    ids = [ref.checkpoint_id for ref in refs]
    match = refs[-1:] if wanted == "latest" else [r for r in refs if r.checkpoint_id == int(wanted)]
    if match:
        return match[0].uri
    have = f"its checkpoints: {', '.join(map(str, ids))}" if ids else "it has no checkpoints"
    raise CLIError(
        f"job {ctx.job_id} has no checkpoint {wanted} under {ctx.root} ({have}); older "
        "checkpoints are deleted once newer ones are retained"
    )


def _layout_root(uri: str) -> str | None:
    """The storage root, when ``uri`` sits in the standard layout."""
    parts = uri.rsplit("/", 4)
    if len(parts) == 5 and parts[1] == "jobs" and parts[3] == "checkpoints":
        return parts[0]
    parts = uri.rsplit("/", 3)
    if len(parts) == 4 and parts[1] == "savepoints":
        return parts[0]
    return None


def _describe_manifest(
    resolver: StoreResolver, uri: str, root_of: Callable[[], str]
) -> tuple[dict[str, Any], list[OwnerGroup]]:
    manifest: Manifest = read_manifest(resolver, uri)
    directory = manifest_base_dir(uri) if manifest.is_savepoint else None
    root = _layout_root(uri) or root_of()
    policy, warning = policy_for(
        resolver, root, manifest, savepoint_dirs=[directory] if directory else []
    )
    groups = group_by_owner(policy, referenced_bytes(manifest))
    info = manifest.savepoint
    doc: dict[str, Any] = {
        "kind": "native-savepoint" if manifest.is_savepoint else "checkpoint",
        "uri": uri,
        "directory": directory,
        "job_id": manifest.job_id,
        "checkpoint_id": manifest.checkpoint_id,
        "epoch": manifest.epoch,
        "created_at": iso(manifest.created_at, millis=True),
        "num_buckets": manifest.num_buckets,
        "savepoint": None if info is None else info.to_json(),
        "buckets": bucket_totals(manifest).to_json(),
        "canonical": None,
        "restored_from": lineage_json(manifest.restored_from),
        "owners": [g.to_json() for g in groups],
        "warnings": [warning] if warning else [],
    }
    return doc, groups


def _describe_canonical(
    resolver: StoreResolver, directory: str
) -> tuple[dict[str, Any], list[OwnerGroup]]:
    index = read_canonical_index(resolver, directory)
    size = sum(f.size for f in index.files)
    groups = [OwnerGroup(Owner.SAVEPOINT, len(index.files), size)] if index.files else []
    doc: dict[str, Any] = {
        "kind": "canonical-savepoint",
        "uri": join(directory, INDEX_NAME),
        "directory": directory,
        "job_id": None,
        "checkpoint_id": None,
        "epoch": None,
        "created_at": None,
        "num_buckets": index.num_buckets,
        "savepoint": {"type": None, "format": "canonical"},
        "buckets": None,
        "canonical": {
            "files": len(index.files),
            "rows": sum(f.rows for f in index.files),
            "bytes": size,
        },
        "restored_from": None,
        "owners": [g.to_json() for g in groups],
        "warnings": [],
    }
    return doc, groups


def _print(doc: dict[str, Any], groups: list[OwnerGroup]) -> None:
    console = stdout_console()
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")

    def row(name: str, value: object) -> None:
        grid.add_row(name, escape(str(value)))

    kind = doc["kind"].replace("-", " ")
    if doc["savepoint"] and doc["savepoint"]["type"]:
        kind += f" ({doc['savepoint']['type']})"
    row("kind", kind)
    row("path", doc["uri"])
    if doc["job_id"] is not None:
        row("job", doc["job_id"])
        row("checkpoint", doc["checkpoint_id"])
        row("epoch", doc["epoch"])
        row("created", doc["created_at"])
    buckets = doc["buckets"]
    if buckets is not None:
        row("buckets", f"{doc['num_buckets']} ({buckets['with_state']} with state)")
        row(
            "snapshots",
            f"{buckets['snapshots']} ({human_bytes(buckets['snapshot_bytes'])})",
        )
        row(
            "changelog",
            f"{buckets['changelog_handles']} handles ({human_bytes(buckets['changelog_bytes'])})",
        )
        row("seq", f"total {buckets['seq_total']}, max {buckets['max_seq']}")
    canonical = doc["canonical"]
    if canonical is not None:
        row("buckets", f"{doc['num_buckets']} ({canonical['files']} with state)")
        row("rows", canonical["rows"])
        row("bytes", human_bytes(canonical["bytes"]))
    if doc["kind"] != "canonical-savepoint":
        lineage = doc["restored_from"]
        text = "-"
        if lineage is not None:
            from_id = lineage["source_checkpoint_id"]
            text = f"{lineage['source']} ({lineage['mode']}"
            text += f", checkpoint {from_id}" if from_id is not None else ""
            text += ", released)" if lineage["released"] else ", still referenced)"
        row("restored from", text)
    console.print(grid)
    owners = Table(title="who owns the referenced files", title_justify="left")
    owners.add_column("owner")
    owners.add_column("objects", justify="right")
    owners.add_column("bytes", justify="right")
    for group in groups:
        owners.add_row(group.label, str(group.objects), human_bytes(group.bytes))
    if not groups:
        owners.add_row("(no files: empty state)", "0", "0 B")
    console.print(owners)
    for warning in doc["warnings"]:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}", soft_wrap=True)


def describe(
    path: PathArg,
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    wanted = path.strip()
    if wanted.isdigit() or wanted == "latest":
        ctx = open_existing_job(storage, job_id, config)
        uri = _checkpoint_uri(ctx, wanted)
    else:
        uri = to_uri(path)
    resolver = StoreResolver()

    def root_of() -> str:
        return load_settings(config, storage=storage, job_id=job_id).storage

    kind, located = _locate(resolver, uri)
    if kind == "canonical":
        doc, groups = _describe_canonical(resolver, located)
    else:
        doc, groups = _describe_manifest(resolver, located, root_of)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc, groups)
