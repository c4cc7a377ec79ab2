"""``gic gc``: the orphan sweep of one job's directory, from the command line.

Deletes (or with ``--dry-run`` lists) the objects under ``jobs/<job>/changelog``,
``snapshots`` and ``checkpoints`` that no retained checkpoint references, through
:func:`~gic_runtime.checkpoint.sweep.sweep_orphans` and the job's ownership policy
(savepoints, other jobs and a restore source are never touched).

Safety (docs/architecture.md I10: sweep only when no attempt of the job can still write):

* refused (exit 2) while the status record says a driver may be running
  (:func:`~gic_runtime.cli.common.driver_looks_alive`), unless ``--force``; a dry run
  only reads, so it runs anyway (files of a batch in flight may show as orphans);
* a real sweep first claims a new fencing epoch, *then* reads the retained manifests: a
  driver that is somehow still alive sees the higher epoch and stops before writing
  another manifest, and every manifest written before the claim is read;
* an unreadable manifest, or an unreadable restore source while the lineage still
  references it, aborts before anything is deleted.

Thread-safety: a command runs on one thread.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Annotated, Any

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import SweepResult, policy_for, sweep_orphans
from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    JobContext,
    JobIdOpt,
    JsonOpt,
    StorageOpt,
    ago,
    driver_looks_alive,
    human_bytes,
    stderr_console,
    stdout_console,
)
from gic_runtime.cli.inventory import open_existing_job
from gic_runtime.fencing import claim_epoch
from gic_runtime.status import read_status

HELP = """Delete objects of the job's directory that no retained checkpoint references.

Safe only when no driver of the job can still write: refused (exit 2) while the status
record says starting/running/stopping and is younger than 120 s, unless --force. A real
sweep claims a new fencing epoch first, so a driver still alive stops itself before it
writes another manifest; relaunching the job afterwards is normal (it claims the next
epoch). --dry-run lists the orphans and changes nothing (allowed while the job runs).

With --json, prints one JSON document: job_id, storage, dry_run, epoch (claimed, or
null), listed, listed_bytes, referenced, referenced_bytes, orphaned, orphaned_bytes,
deleted, deleted_bytes, protected, orphans (URIs, dry run only).
"""

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="List what would be deleted; delete nothing.")
]
ForceOpt = Annotated[
    bool,
    typer.Option("--force", help="Sweep even though the status record says the job is running."),
]


def _check_not_running(ctx: JobContext, now: float) -> None:
    status = read_status(ctx.resolver, ctx.root, ctx.job_id)
    if status is None or not driver_looks_alive(status, now):
        return
    raise CLIError(
        f"job {ctx.job_id} looks alive: its status record says {status.state.value} "
        f"(epoch {status.epoch}), updated {ago(status.updated_at, now)}; a sweep now could "
        "delete files a running driver is about to reference. Stop the job first (gic "
        "savepoint --stop, or stop its driver), or pass --force if the driver is gone",
        exit_code=2,
    )


def _policy(ctx: JobContext, retained: tuple[StoredManifest, ...]) -> OwnershipPolicy:
    if not retained:
        return OwnershipPolicy.for_job(ctx.root, ctx.job_id)
    policy, warning = policy_for(ctx.resolver, ctx.root, retained[-1].manifest)
    if warning is not None:
        raise CLIError(
            f"cannot tell which files belong to job {ctx.job_id}'s restore source "
            f"({warning}); nothing was deleted. Make the source readable again, or wait "
            "until a checkpoint releases it"
        )
    return policy


def _sweep(ctx: JobContext, dry_run: bool) -> tuple[SweepResult, int | None]:
    epoch = None
    if not dry_run:
        owner = f"gic gc {socket.gethostname()}:{os.getpid()}"
        epoch = claim_epoch(ctx.resolver, ctx.root, ctx.job_id, claimed_by=owner)
    retained = load_retained(ctx.resolver, ctx.root, ctx.job_id)
    policy = _policy(ctx, retained)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=stderr_console(), transient=True) as progress:
        task = progress.add_task("listing the job's objects")

        def report(listed: int, deleted: int) -> None:
            text = f"listed {listed} objects"
            progress.update(task, description=text + (f", deleted {deleted}" if deleted else ""))

        result = sweep_orphans(
            ctx.resolver,
            ctx.root,
            ctx.job_id,
            retained,
            policy=policy,
            dry_run=dry_run,
            progress=report,
        )
    return result, epoch


def _json(ctx: JobContext, result: SweepResult, epoch: int | None) -> dict[str, Any]:
    return {
        "job_id": ctx.job_id,
        "storage": ctx.root,
        "dry_run": result.dry_run,
        "epoch": epoch,
        "listed": result.listed,
        "listed_bytes": result.listed_bytes,
        "referenced": result.referenced,
        "referenced_bytes": result.referenced_bytes,
        "orphaned": result.orphaned,
        "orphaned_bytes": result.orphaned_bytes,
        "deleted": result.deleted,
        "deleted_bytes": result.deleted_bytes,
        "protected": result.protected,
        "orphans": list(result.orphans),
    }


def gc(
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    dry_run: DryRunOpt = False,
    force: ForceOpt = False,
    as_json: JsonOpt = False,
) -> None:
    ctx = open_existing_job(storage, job_id, config)
    if not force and not dry_run:
        _check_not_running(ctx, time.time())
    result, epoch = _sweep(ctx, dry_run)
    if as_json:
        print(json.dumps(_json(ctx, result, epoch), indent=2))
        return
    console = stdout_console()
    head = f"orphan sweep of job {ctx.job_id} ({ctx.root})"
    head += ": dry run, nothing deleted" if dry_run else f", fencing epoch {epoch} claimed"
    console.print(head, markup=False)
    lines = [
        ("listed", result.listed, result.listed_bytes),
        ("referenced", result.referenced, result.referenced_bytes),
        ("orphaned", result.orphaned, result.orphaned_bytes),
        ("deleted", result.deleted, result.deleted_bytes),
    ]
    for name, count, size in lines:
        console.print(f"  {name:<11} {count:>8} objects  {human_bytes(size):>10}")
    if result.protected:
        console.print(
            f"  {'protected':<11} {result.protected:>8} objects  (unreferenced but owned by a "
            "savepoint or restore source: kept)"
        )
    if dry_run and result.orphans:
        console.print(f"orphans ({len(result.orphans)}):")
        for uri in result.orphans:
            console.print(f"  {uri}", markup=False, soft_wrap=True)
