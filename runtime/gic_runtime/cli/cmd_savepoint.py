"""``gic savepoint``: take a savepoint of a job, through its driver or offline.

Running job (a status record saying starting, running or stopping): the request goes
through the durable :class:`~gic_runtime.control.ControlChannel`, authenticated with the
job's control key (``GIC_CONTROL_KEY``, or the file ``--control-key-file`` names; a
driver the operator launched honours nothing else, :mod:`gic_runtime.control.auth`);
the driver takes the
savepoint at the next batch boundary from the latest completed checkpoint and records
the outcome, which this command waits for (``--no-wait`` returns after the request is
stored; the request survives restarts of both sides).

Job not running (no status record, or stopped / failed): nothing would serve a request,
so the savepoint is taken here, from the latest retained checkpoint, without a driver
and without joining the job's timeline (nothing is registered or deleted). The request
and its outcome are still recorded in the control channel, so the operator and ``gic``
find it like any other. ``--stop`` needs a running job.

Thread-safety: a command runs on one thread (rich's spinner refreshes on its own).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType, StoredManifest
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    JobContext,
    JobIdOpt,
    StorageOpt,
    driver_looks_alive,
    human_bytes,
    stderr_console,
    stdout_console,
    to_uri,
)
from gic_runtime.cli.inventory import open_existing_job
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.auth import CONTROL_KEY_ENV, ControlKey
from gic_runtime.control.model import new_request_id
from gic_runtime.driver.savepoint_requests import directory_size, write_canonical_extras
from gic_runtime.errors import GICError
from gic_runtime.layout import SAVEPOINT_MANIFEST, job_dir, savepoint_dir
from gic_runtime.savepoint.canonical import INDEX_NAME, write_canonical_from_states
from gic_runtime.savepoint.native import check_objects_within, write_native_savepoint
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver, join

HELP = """Take a savepoint of the job (intermediate; with --stop, stop the job with it).

If the job's driver is running, the request goes through the job's control channel and
the driver takes the savepoint at the next batch boundary; the command waits for the
outcome and prints the savepoint path, checkpoint id and size. If the job is not running,
the savepoint is taken directly from its latest checkpoint (offline) and recorded the
same way. The default target is <storage>/savepoints/<request-id>.

A driver launched by the operator honours only requests authenticated with the job's
control key: set GIC_CONTROL_KEY or pass --control-key-file (the key is in the job's
<job>-gic-control Secret, key 'key').
"""

StopOpt = Annotated[
    bool,
    typer.Option("--stop", help="Stop the job after the savepoint (the job must be running)."),
]
FormatOpt = Annotated[
    SavepointFormat,
    typer.Option(
        "--format",
        help="native: the checkpoint's files, duplicated (fast); canonical: a portable "
        "per-bucket Parquet export.",
        case_sensitive=False,
    ),
]
TargetOpt = Annotated[
    str | None,
    typer.Option(
        "--target",
        help="Savepoint directory (URI or local path). Default: <storage>/savepoints/<id>.",
        show_default=False,
    ),
]
WaitOpt = Annotated[
    bool,
    typer.Option("--wait/--no-wait", help="Wait for the driver's outcome (a running job only)."),
]
KeyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--control-key-file",
        help=f"File holding the job's control key (default: {CONTROL_KEY_ENV}); a driver "
        "the operator launched honours only requests authenticated with it.",
        show_default=False,
        dir_okay=False,
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0.0, help="Seconds to wait for the outcome."),
]


def control_key(key_file: Path | None) -> ControlKey | None:
    """The job's control key: from ``key_file`` when given, else ``GIC_CONTROL_KEY``
    (``None`` when neither is set: the request goes unauthenticated)."""
    try:
        return ControlKey.from_file(str(key_file)) if key_file else ControlKey.from_env()
    except GICError as exc:
        raise CLIError(str(exc)) from None


def _exists(resolver: StoreResolver, uri: str) -> bool:
    store, key = resolver.resolve(uri)
    return store.exists(key)


def _print_outcome(outcome: Outcome, *, offline: bool) -> None:
    if not outcome.succeeded:
        raise CLIError(f"savepoint {outcome.request_id} failed: {outcome.error}")
    how = "offline, from the latest checkpoint" if offline else "by the job's driver"
    console = stdout_console()
    console.print(f"savepoint {outcome.request_id} completed ({how})", markup=False)
    console.print(f"  path        {outcome.path}", markup=False, soft_wrap=True)
    console.print(f"  checkpoint  {outcome.checkpoint_id}")
    console.print(f"  size        {human_bytes(outcome.size_bytes)} in {outcome.files} files")


def _online(
    ctx: JobContext,
    kind: SavepointType,
    *,
    fmt: SavepointFormat,
    target: str | None,
    wait: bool,
    timeout: float,
    key: ControlKey | None,
) -> None:
    channel = ControlChannel(ctx.resolver, ctx.root, ctx.job_id, key=key)
    request = channel.request_savepoint(kind, fmt, target=target)
    rid = request.request_id
    if not wait:
        stdout_console().print(
            f"requested savepoint {rid} of job {ctx.job_id} ({kind.value}, {fmt.value}) "
            f"into {request.target}; the driver takes it at the next batch boundary. "
            "Follow it with: gic checkpoints",
            markup=False,
            soft_wrap=True,
        )
        return
    console = stderr_console()
    label = escape(f"waiting for the driver to take savepoint {rid}")
    with console.status(label) as spinner:

        def progress(waited: float) -> None:
            spinner.update(f"{label} ({waited:.0f} s)")

        outcome = channel.wait(rid, timeout_s=timeout, progress=progress)
    _print_outcome(outcome, offline=False)


def owned_directories(ctx: JobContext, latest: StoredManifest) -> list[str]:
    """Where the objects of the job's checkpoint ``latest`` may lie: the job's own
    directory, and the directory of the restore source its lineage records."""
    within = [job_dir(ctx.root, ctx.job_id)]
    lineage = latest.manifest.restored_from
    if lineage is not None:
        within.append(manifest_base_dir(lineage.source_uri))
    return within


def _offline(
    ctx: JobContext, fmt: SavepointFormat, target: str | None, state: str, key: ControlKey | None
) -> None:
    retained = load_retained(ctx.resolver, ctx.root, ctx.job_id)
    if not retained:
        raise CLIError(
            f"job {ctx.job_id} has no completed checkpoint under {ctx.root} and is not "
            "running: there is nothing to take a savepoint of; run the job first (gic run)"
        )
    latest = retained[-1]
    started = time.time()
    rid = new_request_id("sp", started)
    directory = target or savepoint_dir(ctx.root, rid)
    for marker in (SAVEPOINT_MANIFEST, INDEX_NAME):
        if _exists(ctx.resolver, join(directory, marker)):
            raise CLIError(
                f"{directory} already holds a savepoint ({marker}); choose another --target"
            )
    console = stderr_console()
    console.print(
        f"job {ctx.job_id} is not running (it {state}): taking the savepoint offline from "
        f"its latest checkpoint, {latest.checkpoint_id}",
        markup=False,
        soft_wrap=True,
    )
    try:
        # the CLI copies and reads with its user's credentials: only what the job owns
        check_objects_within(
            latest.manifest, owned_directories(ctx, latest), what=f"checkpoint {latest.uri}"
        )
        with console.status(escape(f"writing savepoint of checkpoint {latest.checkpoint_id}")):
            if fmt is SavepointFormat.NATIVE:
                write_native_savepoint(ctx.resolver, latest, directory)
            else:
                manifest = latest.manifest
                write_canonical_extras(ctx.resolver, directory, manifest)
                write_canonical_from_states(
                    manifest.buckets, manifest.num_buckets, directory, ctx.resolver
                )
        files, size = directory_size(ctx.resolver, directory)
        outcome = Outcome.completed(
            rid,
            path=directory,
            checkpoint_id=latest.checkpoint_id,
            size_bytes=size,
            files=files,
            started_at=started,
        )
    except GICError as exc:
        outcome = Outcome.failed(rid, str(exc), started_at=started)
    channel = ControlChannel(ctx.resolver, ctx.root, ctx.job_id, key=key)
    channel.request_savepoint(
        SavepointType.INTERMEDIATE,
        fmt,
        target=directory,
        request_id=rid,
        requested_by="gic (offline)",
        requested_at=started,
    )
    channel.complete(outcome)
    _print_outcome(outcome, offline=True)


def savepoint(
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    stop: StopOpt = False,
    format: FormatOpt = SavepointFormat.NATIVE,
    target: TargetOpt = None,
    wait: WaitOpt = True,
    timeout: TimeoutOpt = 600.0,
    control_key_file: KeyFileOpt = None,
) -> None:
    key = control_key(control_key_file)
    ctx = open_existing_job(storage, job_id, config)
    fmt = SavepointFormat(format)
    target_uri = to_uri(target) if target else None
    status = read_status(ctx.resolver, ctx.root, ctx.job_id)
    if driver_looks_alive(status, time.time()):
        kind = SavepointType.TERMINAL if stop else SavepointType.INTERMEDIATE
        _online(ctx, kind, fmt=fmt, target=target_uri, wait=wait, timeout=timeout, key=key)
        return
    state = "has no status record" if status is None else f"is {status.state.value}"
    if stop:
        raise CLIError(
            f"job {ctx.job_id} is not running (it {state}), so there is nothing to stop; "
            "leave out --stop to take a savepoint of its latest checkpoint offline"
        )
    _offline(ctx, fmt, target_uri, state, key)
