"""Every job setting, declared once (:class:`SettingsFields`): its type, bounds, default
and a description of what it tunes and why that default.

Invariants: each field's range matches what the component it tunes accepts (so
:meth:`GICSettings.task_settings <gic_runtime.config.settings.GICSettings.task_settings>`
never fails), and the declaration order is the settings' order everywhere they are
listed. A new setting is a field here plus its line in
:data:`~gic_runtime.config.settings.ACCEPTED` (the same bounds in words, for error
messages) and, when needed, a validator or an entry of ``task_settings`` in
:mod:`gic_runtime.config.settings`, which builds
:class:`~gic_runtime.config.settings.GICSettings` on these fields (the validation
boundary, the sources and the views).

Thread-safety: declarations only; immutable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import Field
from pydantic_settings import BaseSettings

from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.checkpoint.registry import DEFAULT_RETAINED_CHECKPOINTS
from gic_runtime.coordination.task_settings import DEFAULT_MAPPED_LIMIT
from gic_runtime.materialization.scheduler import MaterializationSettings

__all__ = ["SettingsFields"]

_MiB = 1024 * 1024
_MATERIALIZATION: Final = MaterializationSettings()
"""The materialization defaults are the scheduler's (one place)."""


def _default_storage() -> str:
    return Path("gic-data").absolute().as_uri()


class SettingsFields(BaseSettings):
    """The settings of one GIC job, as declared fields (no behaviour: see
    :class:`~gic_runtime.config.settings.GICSettings`, the class to use)."""

    job_id: str = Field(
        "gic-job",
        description="Job id: names the job's directory <storage>/jobs/<job_id>/. Lowercase "
        "letters, digits, '.', '_', '-' (it becomes a path segment and a Kubernetes name).",
    )
    storage: str = Field(
        default_factory=_default_storage,
        description="Root URI of checkpoint storage: s3://bucket/prefix or file:///path (a "
        "plain path is made absolute). Default ./gic-data, so a local run needs no setup.",
    )
    num_buckets: int = Field(
        128,
        ge=1,
        le=32768,
        description="Key buckets (units of rescaling), fixed for the life of the state. 128 "
        "lets a job rescale up to 128 tasks while keeping per-bucket overhead small.",
    )
    num_tasks: int | None = Field(
        None,
        ge=1,
        description="State tasks (each owns a contiguous bucket range), at most num_buckets. "
        "None: the driver uses spark.sql.shuffle.partitions.",
    )
    retained_checkpoints: int = Field(
        DEFAULT_RETAINED_CHECKPOINTS,
        ge=1,
        le=1000,  # the CRD's bound; far below the checkpoint listing limit
        description="Completed checkpoints kept. 2 leaves one fallback if the newest is "
        "damaged; each one more keeps the previous snapshot of every bucket materialized "
        "since it and the changelog since (docs/architecture.md §7).",
    )
    materialization_interval_s: float = Field(
        _MATERIALIZATION.interval_s,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between materializations of one bucket: bounds restore-time "
        "replay to about two minutes of changes at 30 full uploads per bucket per hour.",
    )
    materialization_jitter: float = Field(
        _MATERIALIZATION.jitter,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Relative jitter (0 <= j < 1) of the materialization interval so buckets "
        "drift apart and never materialize all at once.",
    )
    materialization_max_in_flight: int = Field(
        _MATERIALIZATION.max_in_flight,
        ge=1,
        description="Materializations running at once per task. 1 leaves upload bandwidth "
        "for changelog segments, which are on the checkpoint's critical path.",
    )
    materialization_max_sections: int = Field(
        _MATERIALIZATION.max_sections,
        ge=1,
        description="Changelog sections since its last snapshot that make a bucket due "
        "whatever the interval. Bounds restore requests (about one object read per section "
        "of the busiest bucket) and manifest size (every section is a row of every "
        "manifest); a bucket gaining one section per checkpoint is snapshotted at least "
        "about once per 128 checkpoints (a batch whose changelog spans several preemptive "
        "uploads adds a section per upload).",
    )
    materialization_changelog_ratio: float = Field(
        _MATERIALIZATION.changelog_ratio,
        gt=0,
        allow_inf_nan=False,
        description="Changelog bytes since its last snapshot, as a multiple of that "
        "snapshot's size (at least 4 KiB), that make a bucket due whatever the interval. "
        "1.0: a restore replays at most a snapshot's worth of changes, and with 2 retained "
        "checkpoints the job keeps under 3x its state (docs/architecture.md §7).",
    )
    materialization_time_min_change: float = Field(
        _MATERIALIZATION.time_min_change,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Changelog bytes since its last snapshot, as a fraction of that "
        "snapshot's size, a bucket needs before the interval alone snapshots it again: "
        "below that, replaying the changelog at restore costs less than that fraction of "
        "downloading the snapshot, so re-uploading the whole bucket buys little. 0: any "
        "change (docs/architecture.md §7).",
    )
    materialization_growth_turns: bool = Field(
        _MATERIALIZATION.growth_turns,
        description="Task ranges take turns by checkpoint to start their snapshots up to "
        "(ranges - 1) checkpoints before the changelog ratio or section limit, so ranges "
        "whose state grows alike do not all snapshot in one checkpoint, where storage "
        "briefly holds their previous and new snapshots and the changelog at once "
        "(docs/architecture.md §7). Off: each range snapshots at its limit, with fewer "
        "background uploads and higher storage peaks.",
    )
    changelog_preemptive_upload_bytes: int = Field(
        4 * _MiB,
        ge=1,
        description="Bytes of buffered changelog that trigger an upload before the "
        "checkpoint. 4 MiB uploads in well under a second yet keeps objects few.",
    )
    changelog_codec: Literal["zstd", "none"] = Field(
        "zstd",
        description="Changelog section compression: zstd (default; used only where it saves "
        "space) or none.",
    )
    max_hedges: int = Field(
        1,
        ge=0,
        description="Extra upload attempts started when an attempt is slow (0 disables "
        "hedging). One removes nearly all of a rare-straggler tail.",
    )
    hedge_after_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Fixed hedge delay in seconds; None: adaptive (a high quantile of recent "
        "upload latencies).",
    )
    hedge_budget_ratio: float = Field(
        0.05,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Most hedges as a fraction of uploads: a hard bound (5%) on the extra "
        "load hedging adds.",
    )
    full_snapshots: bool = Field(
        False,
        description="Make every checkpoint self-contained (each bucket materialized afresh). "
        "Off: checkpoints are incremental, which is the point of GIC; on for comparisons.",
    )
    checkpoint_timeout_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a checkpoint's uploads may take before the checkpoint fails; "
        "retries and hedges run well inside it.",
    )
    restore_background: bool = Field(
        True,
        description="Rebuild buckets missing from an executor's local copy in the "
        "background: a task starts at once and waits only for the buckets it touches "
        "(restoring one nobody started itself). Off: every bucket of a task's range is "
        "rebuilt before its processing starts.",
    )
    restore_at_start: bool = Field(
        True,
        description="When a job starts from a checkpoint, restore the executors' local "
        "copies in a Spark job of its own, submitted before the query starts, so the "
        "restore runs beside the query's start and first stage instead of inside the "
        "first batch's stateful stage. Off: each task restores its buckets itself.",
    )
    restore_select_keys: bool = Field(
        False,
        description="With the background restore: a batch whose processor names every "
        "state key it reads (aggregate) and finds buckets to rebuild reads just those keys "
        "from storage and runs at once; the buckets are restored in the background once "
        "its checkpoint is durable. Such a job then skips the restore at start. Off (the "
        "default): the batch waits for the buckets it touches.",
    )
    restore_eager_when_all_touched: bool = Field(
        True,
        description="With the background restore: a task whose input touches every bucket "
        "it has to rebuild waits for all of them anyway, so they are rebuilt before its "
        "processing starts (the eager plan, without a restore beside the processing). "
        "Off: such a task restores in the background too.",
    )
    restore_parallel: int = Field(
        2,
        ge=1,
        le=64,
        description="Runs restoring a task range in the background at once: a run is one "
        "fetch plan over every pending bucket no other run covers, the buckets the task's "
        "input touches first, so one run usually restores the whole range.",
    )
    restore_fetch_threads: int = Field(
        4,
        ge=1,
        le=64,
        description="Reads at once of a group of buckets a task restores itself (a run "
        "reads on 16).",
    )
    restore_window_bytes: int = Field(
        16 * 1024 * 1024,
        ge=64 * 1024,
        description="Fetched bytes per window of a restore's fetch plan (a snapshot larger "
        "than a window: that snapshot); a task range holds at most restore_parallel runs "
        "of about three windows and a group the task restores itself of about two, so "
        "about (3 x restore_parallel + 2) x this.",
    )
    local_state_mapped_limit: int = Field(
        DEFAULT_MAPPED_LIMIT,
        ge=0,
        description="Bytes of the executor-local state a worker may keep mapped: after a "
        "task, a worker whose resident file-backed memory grew by more than this since it "
        "last unmapped unmaps its pages of the local state (they stay in the page cache "
        "and are mapped again on the next access), so its resident size is bounded by "
        "this, not by the state's size. 256 MiB is a few batches' pages at gigabytes of "
        "state (docs/architecture.md §13.3). 0: never unmap (pages stay mapped until the "
        "kernel reclaims them).",
    )
    restore_source: str | None = Field(
        None,
        description="Checkpoint or savepoint to restore from (URI or path); None: resume "
        "from the job's latest checkpoint, or start empty.",
    )
    restore_mode: RestoreMode = Field(
        RestoreMode.NO_CLAIM,
        description="claim: the job owns the source's files from now on; no-claim "
        "(default, safe): never deletes them and stops referencing them after the first "
        "checkpoint.",
    )
    allow_query_change: bool = Field(
        False,
        description="Resume checkpoints written by a different query (another source, "
        "processing or output schema). Off: such a resume is refused before anything is "
        "written, so a job never reads another query's state by accident; on for a "
        "deliberate upgrade of the job's query.",
    )
    output_takeover: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Job id whose transactional output this job takes over on purpose. "
        "An output path belongs to one job's state: another job writing there is refused "
        "before its first batch; naming the current owner here lets this job write there "
        "from now on (the owner's committed batches stay readable, the owner can no "
        "longer write). None: never take another job's output.",
    )
    epoch: int | None = Field(
        None,
        ge=1,
        description="Fencing epoch of this launch (the operator assigns one); None: the "
        "driver claims the next.",
    )
    local_dir: str | None = Field(
        None,
        min_length=1,
        description="Directory for executor-local state copies (fast restarts of buckets on "
        "the same executor). None: in local mode <root>-local next to a file:// storage "
        "root, else <tmp>/gic-local-<user>, kept across restarts; on a "
        "cluster each executor's own scratch directory (the first of SPARK_LOCAL_DIRS, e.g. "
        "an executor pod's spark-local-dir volume). A relative path resolves against each "
        "executor's working directory.",
    )
    orphan_sweep_interval_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between live orphan sweeps: while the job runs, the driver "
        "deletes (between batches) what failed task attempts left in storage. Five minutes "
        "keeps the LIST requests rare while a lost executor's files live minutes, not weeks.",
    )
    max_batches: int | None = Field(
        None,
        ge=1,
        description="Stop after this many micro-batches (local runs and tests); None: run "
        "until stopped.",
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of the driver's Prometheus endpoint (0: any free port); None: off.",
    )
    metrics_host: str | None = Field(
        None,
        description="IP address the driver's Prometheus endpoint binds (the pod's IP, and "
        "the loopback address too when that is not one); None: every interface. The "
        "operator sets it to the driver pod's status.podIP.",
    )
    control_poll_s: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between the driver's looks at control requests (savepoint, "
        "stop); 1 s answers promptly at two LISTs per second.",
    )
    stop_timeout_s: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a driver told to stop by SIGTERM waits for its running batch "
        "before it abandons the batch (replayed by the next launch) and stops; the "
        "operator gives driver pods this plus 20 s as their termination grace period.",
    )
