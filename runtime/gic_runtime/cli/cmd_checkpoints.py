"""``gic checkpoints``: the job's retained checkpoints, its status record and pending
control requests.

Read-only: lists ``checkpoints/``, reads each manifest, the status record, the highest
fencing epoch and the control channel. A manifest that cannot be read is shown as such
and makes the command exit 1 after printing everything else (a damaged manifest blocks
recovery and sweeps, so it must not go unnoticed). A manifest deleted between listing
and reading (subsumed by a running driver) is left out.

Thread-safety: a command runs on one thread.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from rich.markup import escape
from rich.table import Table

from gic_runtime import codec
from gic_runtime.checkpoint.catalog import list_checkpoints, read_checkpoint
from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    JobContext,
    JobIdOpt,
    JsonOpt,
    StorageOpt,
    ago,
    human_bytes,
    iso,
    stdout_console,
)
from gic_runtime.cli.inventory import open_existing_job
from gic_runtime.cli.summary import bucket_totals, lineage_json
from gic_runtime.control import ControlChannel, SavepointRequest
from gic_runtime.control.model import ControlRequest
from gic_runtime.errors import GICError, ObjectNotFoundError
from gic_runtime.fencing import highest_epoch
from gic_runtime.status import JobStatus, read_status

HELP = """List the job's retained checkpoints, its status record and pending control requests.

With --json, prints one JSON document with these keys (stable; times are UTC ISO-8601,
sizes bytes):

  job_id, storage                 the job and its storage root
  checkpoints                     oldest first, each: id, uri, created_at, epoch,
                                  num_buckets, buckets_with_state, objects (objects
                                  referenced), bytes (snapshot sizes + changelog section
                                  lengths), restored_from (null or: source, mode,
                                  source_checkpoint_id, released), watermark (UTC
                                  ISO-8601, null without event time), watermark_us
  unreadable                      manifests that cannot be read: id, uri, error
  status                          null (no status record) or: state, epoch,
                                  last_checkpoint, restore_pending (buckets
                                  still restoring in the background after the
                                  last checkpoint), updated_at, error, failure
                                  (null, or reason, message, error_type)
  highest_epoch                   highest fencing epoch claimed (0: none)
  pending_requests                control requests without an outcome: request_id, type,
                                  kind, format, target, requested_at, requested_by
  errors                          other parts that could not be read (text)

Exits 1 when a manifest cannot be read.
"""


@dataclass
class _Listing:
    checkpoints: list[StoredManifest] = field(default_factory=list)
    unreadable: list[dict[str, Any]] = field(default_factory=list)
    status: JobStatus | None = None
    highest_epoch: int = 0
    pending: list[ControlRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _collect(ctx: JobContext) -> _Listing:
    out = _Listing()
    for ref in list_checkpoints(ctx.resolver, ctx.root, ctx.job_id):
        try:
            out.checkpoints.append(read_checkpoint(ctx.resolver, ref.uri))
        except ObjectNotFoundError:
            continue
        except GICError as exc:
            out.unreadable.append(
                {"id": ref.checkpoint_id, "uri": ref.uri, "error": " ".join(str(exc).split())}
            )
    try:
        out.status = read_status(ctx.resolver, ctx.root, ctx.job_id)
    except GICError as exc:
        out.errors.append(f"status record: {exc}")
    out.highest_epoch = highest_epoch(ctx.resolver, ctx.root, ctx.job_id)
    try:
        entries = ControlChannel(ctx.resolver, ctx.root, ctx.job_id).entries()
        out.pending = [e.request for e in entries if e.outcome is None]
    except GICError as exc:
        out.errors.append(f"control requests: {exc}")
    return out


def checkpoint_json(stored: StoredManifest) -> dict[str, Any]:
    m = stored.manifest
    totals = bucket_totals(m)
    return {
        "id": m.checkpoint_id,
        "uri": stored.uri,
        "created_at": iso(m.created_at, millis=True),
        "epoch": m.epoch,
        "num_buckets": m.num_buckets,
        "buckets_with_state": totals.with_state,
        "objects": len(m.uris()),
        "bytes": totals.bytes,
        "restored_from": lineage_json(m.restored_from),
        "watermark": _watermark_iso(m.event_time.watermark_us),
        "watermark_us": m.event_time.watermark_us,
    }


def _watermark_iso(micros: int | None) -> str | None:
    return None if micros is None else iso(micros / 1_000_000, millis=True)


def status_json(status: JobStatus | None) -> dict[str, Any] | None:
    if status is None:
        return None
    return {
        "state": status.state.value,
        "epoch": status.epoch,
        "last_checkpoint": status.last_checkpoint.id if status.last_checkpoint else None,
        "restore_pending": status.last_checkpoint.restore_pending if status.last_checkpoint else 0,
        "updated_at": iso(status.updated_at, millis=True),
        "error": status.error,
        "failure": None if status.failure is None else codec.to_json(status.failure),
    }


def request_json(request: ControlRequest) -> dict[str, Any]:
    is_savepoint = isinstance(request, SavepointRequest)
    return {
        "request_id": request.request_id,
        "type": "savepoint" if is_savepoint else "stop",
        "kind": request.kind.value if isinstance(request, SavepointRequest) else None,
        "format": request.format.value if isinstance(request, SavepointRequest) else None,
        "target": request.target if isinstance(request, SavepointRequest) else None,
        "requested_at": iso(request.requested_at, millis=True),
        "requested_by": request.requested_by,
    }


def _lineage_cell(stored: StoredManifest) -> str:
    lineage = stored.manifest.restored_from
    if lineage is None:
        return "-"
    return f"{lineage.mode.value}, {'released' if lineage.released else 'referenced'}"


def _table(listing: _Listing) -> Table:
    table = Table()
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    for name in ("epoch", "buckets", "objects", "bytes"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("restored", overflow="fold")
    timed = any(not s.manifest.event_time.empty for s in listing.checkpoints)
    if timed:
        table.add_column("watermark (UTC)", no_wrap=True)
    rows: list[tuple[int, list[str]]] = []
    for stored in listing.checkpoints:
        doc = checkpoint_json(stored)
        cells = [
            str(doc["id"]),
            iso(stored.manifest.created_at) or "",
            str(doc["epoch"]),
            str(doc["num_buckets"]),
            str(doc["objects"]),
            human_bytes(doc["bytes"]),
            _lineage_cell(stored),
        ]
        if timed:
            cells.append(doc["watermark"] or "-")
        rows.append((stored.checkpoint_id, cells))
    for item in listing.unreadable:
        blank = [""] * (6 if timed else 5)
        rows.append((item["id"], [str(item["id"]), "[red]unreadable[/red]", *blank]))
    for _, cells in sorted(rows, key=lambda row: row[0]):
        table.add_row(*cells)
    return table


def _print_tables(ctx: JobContext, listing: _Listing) -> None:
    console = stdout_console()
    if listing.checkpoints or listing.unreadable:
        console.print(f"checkpoints of job {ctx.job_id} ({ctx.root}):", markup=False)
        console.print(_table(listing))
        console.print(
            f"describe one with: gic describe ID --storage {ctx.root} --job-id {ctx.job_id}",
            markup=False,
        )
        sources: dict[str, list[int]] = {}
        for stored in listing.checkpoints:
            lineage = stored.manifest.restored_from
            if lineage is not None:
                sources.setdefault(lineage.source_uri, []).append(stored.checkpoint_id)
        for source, ids in sources.items():
            console.print(
                f"restore source of checkpoint(s) {', '.join(map(str, ids))}: {source}",
                markup=False,
                soft_wrap=True,
            )
    else:
        console.print(f"no checkpoints for job {ctx.job_id} under {ctx.root}", markup=False)
    for item in listing.unreadable:
        console.print(
            f"[red]unreadable[/red] checkpoint {item['id']}: {escape(item['error'])}",
            soft_wrap=True,
        )
    status = listing.status
    if status is None:
        console.print("status: no status record (no driver of this job has reported)")
    else:
        last = status.last_checkpoint.id if status.last_checkpoint else "none"
        line = (
            f"status: {status.state.value}, epoch {status.epoch}, last checkpoint {last}, "
            f"updated {iso(status.updated_at)} ({ago(status.updated_at, time.time())})"
        )
        if status.last_checkpoint is not None and status.last_checkpoint.restore_pending:
            line += (
                f"; {status.last_checkpoint.restore_pending} bucket(s) still restoring in the "
                "background"
            )
        if listing.highest_epoch > status.epoch:
            line += f"; superseded: epoch {listing.highest_epoch} was claimed since"
        if status.failure is not None:
            line += f"; failed ({status.failure.reason}): {status.failure.message}"
        elif status.error:
            line += f"; error: {status.error}"
        console.print(line, markup=False, soft_wrap=True)
    if listing.pending:
        console.print(f"pending control requests ({len(listing.pending)}):")
        for request in listing.pending:
            doc = request_json(request)
            what = doc["type"]
            if doc["kind"]:
                what += f" ({doc['kind']}, {doc['format']}) -> {doc['target']}"
            console.print(
                f"  {doc['request_id']}: {what}, requested {doc['requested_at']} by "
                f"{doc['requested_by']}",
                markup=False,
                soft_wrap=True,
            )
    else:
        console.print("pending control requests: none")
    for error in listing.errors:
        console.print(f"[red]unreadable[/red] {escape(error)}", soft_wrap=True)


def checkpoints(
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    ctx = open_existing_job(storage, job_id, config)
    listing = _collect(ctx)
    if as_json:
        doc = {
            "job_id": ctx.job_id,
            "storage": ctx.root,
            "checkpoints": [checkpoint_json(s) for s in listing.checkpoints],
            "unreadable": listing.unreadable,
            "status": status_json(listing.status),
            "highest_epoch": listing.highest_epoch,
            "pending_requests": [request_json(r) for r in listing.pending],
            "errors": listing.errors,
        }
        print(json.dumps(doc, indent=2))
    else:
        _print_tables(ctx, listing)
    if listing.unreadable:
        ids = ", ".join(str(u["id"]) for u in listing.unreadable)
        raise CLIError(
            f"checkpoint manifest(s) {ids} of job {ctx.job_id} cannot be read (details "
            "above); recovery and orphan sweeps fail until they are repaired or moved away"
        )
