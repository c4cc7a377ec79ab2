"""Comparisons repeated in interleaved rounds: medians, spreads, ratios per round, outputs.

A :class:`Comparison` names its systems (each a :data:`~bench.streaming.runner.SystemFn`,
every run in its own process and JVM), which of them are the baselines and which the
contenders, and the goal: each contender's throughput at least ``goal`` times the best
baseline's **of the same round**. :func:`run_comparison` runs, per cluster mode, ``rounds``
rounds; round ``r`` runs every system once, in the registry order rotated by ``r`` (so no
system always runs first or last). Per run the measured batches are summarized as the
streaming harness does (:func:`bench.streaming.harness.summarize`) plus the commit time
with Spark's logs (:func:`commit_with_logs`); per system the medians and spreads (min,
max) over rounds are reported (:func:`aggregate`); ratios are taken within a round and
then summarized the same way (:func:`round_ratios`). Every run's output fingerprint
(:mod:`bench.streaming.outputs`) is compared across systems and rounds.

:func:`run_sections` runs the same per :class:`Section` instead of per mode: a mode plus
what surrounds its rounds (W1 on S3: a proxy adding latency), recorded under the
section's ``conditions``. Every section records the contention of its mode on the
machine's cores (:func:`bench.streaming.modes.contention`); systems a comparison names
``local_only`` run in local modes only.

A comparison may name a ``floor``: the same query without state, run in the rounds like
the others. Its rows/s over the best baseline's of the same round (:func:`ceiling`) is
the throughput ratio a system whose state cost nothing would reach there, so the goals
say whether the goal is ``reachable`` on this machine at all.

Environment: ``GIC_BENCH_QUICK=1`` (small sizes, one round, ``local2`` only: a smoke
run), ``GIC_BENCH_ROUNDS``, ``GIC_BENCH_MODES`` (default ``local2,cluster2``),
``GIC_BENCH_SYSTEMS`` (a subset), ``GIC_BENCH_WARMUP`` / ``GIC_BENCH_MEASURED``. A run of
some modes keeps the other modes of the existing result file when they were measured
the same way (:func:`kept_modes`), each with its own ``recorded_at``.

Not thread-safe: one benchmark run per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from bench.streaming import harness, modes, outputs
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.runner import SystemFn
from bench.streaming.workloads import WorkloadSpec

ROUNDS = 3
DEFAULT_MODES = ("local2", "cluster2")
QUICK_MODES = ("local2",)
STATS = ("rows_per_s", "commit_with_logs_ms_p50", "commit_with_logs_ms_p99", "batch_ms_p50")
DEFINITIONS = {
    **{k: v for k, v in harness.DEFINITIONS.items() if k != "ratios"},
    "commit_with_logs_ms": (
        "from the end of processing to the batch being durable, logs included: for Spark "
        "the state operators' commitTimeMs + durationMs.commitOffsets + durationMs.walCommit "
        "(commit_ms); for GIC BatchReport.commit_ms (changelog flush + manifest) + the same "
        "two Spark log writes of its query (parts.commit_offsets_ms, parts.wal_commit_ms)"
    ),
    "median / min / max": "over the rounds, one value per run",
    "ratio per round": (
        "contender rows_per_s / the highest baseline rows_per_s of the SAME round and mode; "
        "the goal is checked on the median of these ratios"
    ),
}


@dataclass(frozen=True)
class Comparison:
    """One repeated comparison: systems, roles and the throughput goal."""

    name: str
    workload: Callable[[bool], WorkloadSpec]
    systems: Mapping[str, SystemFn]
    baselines: tuple[str, ...]
    contenders: tuple[str, ...]
    goal: float
    aim: float | None = None
    quick_measured: int | None = None
    """Measured batches in quick mode when the default (3) is too few to emit output."""
    local_only: tuple[str, ...] = ()
    """Systems run in local modes only (shown beside the comparison, not part of it)."""
    floor: str | None = None
    """The system running the query without state (shown beside, see :func:`ceiling`)."""
    batches: tuple[int, int] | None = None
    """Warm-up and measured batches of a full run when the defaults (5 + 25) would take
    too long; ``GIC_BENCH_WARMUP`` / ``GIC_BENCH_MEASURED`` still win."""


@dataclass(frozen=True)
class Section:
    """One part of a comparison's result (a key of its ``modes``): a cluster mode, and
    what surrounds its rounds (for example a proxy adding latency to storage)."""

    name: str
    mode: modes.Mode
    around: Callable[[], AbstractContextManager[dict[str, Any]]] | None = None
    """Entered around the section's rounds; the dict it yields (filled in until it
    exits) is recorded in the section under ``conditions``."""
    describe: Mapping[str, Any] = field(default_factory=dict)
    """Added to the mode's description in ``setup.modes``."""

    def systems(self, comparison: Comparison, names: Sequence[str]) -> list[str]:
        """The systems of ``names`` that run in this section."""
        if self.mode.kind == modes.LOCAL:
            return list(names)
        return [n for n in names if n not in comparison.local_only]


def rounds_from_env(environ: Mapping[str, str] = os.environ, quick: bool = False) -> int:
    raw = environ.get("GIC_BENCH_ROUNDS", "")
    rounds = int(raw) if raw.strip() else (1 if quick else ROUNDS)
    if rounds < 1:
        raise BenchmarkError(f"GIC_BENCH_ROUNDS={raw!r}: need at least one round")
    return rounds


def order(names: Sequence[str], round_index: int) -> list[str]:
    """The systems of round ``round_index`` (0-based): ``names`` rotated by it."""
    if not names:
        return []
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def commit_with_logs(record: BatchRecord, kind: str) -> float:
    """Commit time of a batch with the log writes (see :data:`DEFINITIONS`)."""
    if kind == "gic":
        return (
            record.commit_ms
            + record.parts.get("commit_offsets_ms", 0.0)
            + record.parts.get("wal_commit_ms", 0.0)
        )
    return record.commit_ms


def summarize_run(result: RunResult) -> dict[str, Any]:
    """:func:`harness.summarize` (batch records included) plus the commit time with logs
    and the output's fingerprint."""
    out = harness.summarize(result)
    kind = str(result.notes.get("kind", ""))
    commits = [commit_with_logs(r, kind) for r in result.measured]
    out["commit_with_logs_ms_p50"] = round(common.percentile(commits, 50), 3)
    out["commit_with_logs_ms_p99"] = round(common.percentile(commits, 99), 3)
    out["output"] = result.notes.get("output")
    return out


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Median, min and max of ``values`` (None when empty)."""
    if not values:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "n": len(values),
    }


def aggregate(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Per system, the spread of each headline figure over its runs."""
    return {
        name: {stat: spread([float(r[stat]) for r in done]) for stat in STATS}
        for name, done in runs.items()
    }


def round_ratios(
    rounds: Sequence[Mapping[str, Mapping[str, Any]]],
    baselines: Sequence[str],
    contenders: Sequence[str],
) -> dict[str, Any]:
    """Per contender, its rows/s over the best baseline's of each round, and their spread."""
    per: dict[str, list[float]] = {c: [] for c in contenders}
    best_names: list[str | None] = []
    for runs in rounds:
        present = [b for b in baselines if b in runs]
        best = max(present, key=lambda b: float(runs[b]["rows_per_s"]), default=None)
        best_names.append(best)
        for c in contenders:
            if best is not None and c in runs:
                ratio = common.ratio(float(runs[c]["rows_per_s"]), float(runs[best]["rows_per_s"]))
                if ratio is not None:
                    per[c].append(ratio)
    return {
        "best_baseline_per_round": best_names,
        "ratios": {c: {"per_round": v, **spread(v)} for c, v in per.items()},
    }


def ceiling(
    rounds: Sequence[Mapping[str, Mapping[str, Any]]],
    baselines: Sequence[str],
    floor: str,
    contenders: Sequence[str],
) -> dict[str, Any] | None:
    """The ``floor`` system's rows/s over the best baseline's of each round (the
    throughput ratio a system whose state cost nothing would reach in that round) and
    each contender's rows/s over the floor's, with their spreads; ``None`` when no round
    ran the floor."""
    if not any(floor in r for r in rounds):
        return None
    up = round_ratios(rounds, baselines, [floor])["ratios"][floor]
    over = round_ratios(rounds, [floor], contenders)["ratios"]
    return {
        "floor": floor,
        "floor_over_best_baseline": up,
        "contenders_over_floor": over,
        "how": (
            f"per round, rows/s of {floor} (the query without state) over the best of "
            f"{list(baselines)} (floor_over_best_baseline: the throughput ratio to the best "
            "baseline a system whose state cost nothing would reach), and each contender's "
            f"rows/s over {floor}'s (contenders_over_floor)"
        ),
    }


def goals(
    ratios: Mapping[str, Any], comparison: Comparison, bound: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The throughput goal per contender (median ratio), whether the best one meets it
    and, given the :func:`ceiling` ``bound``, whether a system whose state cost nothing
    would (``reachable``)."""
    per = {}
    for name, r in ratios["ratios"].items():
        per[name] = {
            **common.goal(
                "throughput_vs_best_baseline", r["median"], at_least=comparison.goal, met="met"
            ),
            **(
                {
                    "aim": comparison.aim,
                    "aim_met": None if r["median"] is None else r["median"] >= comparison.aim,
                }
                if comparison.aim
                else {}
            ),
        }
    medians = [r["median"] for r in ratios["ratios"].values() if r["median"] is not None]
    best = max(medians, default=None)
    top = None if bound is None else bound["floor_over_best_baseline"]["median"]
    return {
        "per_contender": per,
        "best_contender_ratio": best,
        "met": None if best is None else best >= comparison.goal,
        "ceiling_ratio": top,
        "reachable": None if top is None else top >= comparison.goal,
        "how": (
            "median over rounds of contender rows_per_s / the best of "
            f"{list(comparison.baselines)} in the same round; goal >= {comparison.goal}x"
            + (f", aim {comparison.aim}x" if comparison.aim else "")
        ),
    }


def run_mode(
    comparison: Comparison,
    workload: WorkloadSpec,
    params: BenchParams,
    names: Sequence[str],
    rounds: int,
) -> dict[str, Any]:
    """Every round of one mode; the per-mode section of the result."""
    per_round: list[dict[str, dict[str, Any]]] = []
    failed: dict[str, str] = {}
    for i in range(rounds):
        done: dict[str, dict[str, Any]] = {}
        for name in order(names, i):
            print(f"-- {comparison.name} {params.mode} round {i + 1}/{rounds}: {name}", flush=True)
            begun = time.monotonic()
            try:
                result = comparison.systems[name](workload, params)
                result.check(params)
            except BenchmarkError as exc:
                failed[f"{name}#{i + 1}"] = str(exc)
                print(f"-- {name} FAILED: {exc}", flush=True)
                continue
            done[name] = {**summarize_run(result), "run_s": round(time.monotonic() - begun, 1)}
            print(
                f"-- {name}: {done[name]['rows_per_s']:.0f} rows/s, commit with logs p50 "
                f"{done[name]['commit_with_logs_ms_p50']:.0f} ms, output "
                f"{(done[name]['output'] or {}).get('rows')} rows",
                flush=True,
            )
        per_round.append(done)
    by_system = {n: [r[n] for r in per_round if n in r] for n in names}
    contenders = [c for c in comparison.contenders if c in names]
    ratios = round_ratios(per_round, comparison.baselines, contenders)
    bound = (
        None
        if comparison.floor is None
        else ceiling(per_round, comparison.baselines, comparison.floor, contenders)
    )
    prints = {f"{n}#{i + 1}": r[n]["output"] for i, r in enumerate(per_round) for n in r}
    return {
        "master": params.master,
        "executors": params.executors,
        "systems": aggregate(by_system),
        "rounds": per_round,
        "ratios": ratios,
        **({"ceiling": bound} if bound is not None else {}),
        "goals": goals(ratios, comparison, bound),
        "outputs": outputs.agreement(prints),
        "failed": failed,
    }


def run_comparison(
    comparison: Comparison, setup: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every mode of ``GIC_BENCH_MODES``; writes ``<name>.json`` and ``.png``."""
    return run_sections(comparison, None, setup)


def mode_sections(quick: bool) -> list[Section]:
    """One section per mode of ``GIC_BENCH_MODES`` (default :data:`DEFAULT_MODES`, quick
    :data:`QUICK_MODES`), named after the mode."""
    return [
        Section(m.name, m)
        for m in modes.modes_from_env(default=QUICK_MODES if quick else DEFAULT_MODES)
    ]


def run_sections(
    comparison: Comparison,
    sections: Callable[[BenchParams], Sequence[Section]] | None,
    setup: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every section ``sections(params)`` gives (None: :func:`mode_sections`), each in its
    mode with what surrounds it; writes ``<name>.json`` and ``.png``."""
    base = harness.params_from_env()
    if base.quick and comparison.quick_measured and not os.environ.get("GIC_BENCH_MEASURED"):
        base = dataclasses.replace(base, measured=comparison.quick_measured)
    if not base.quick and comparison.batches:
        warmup, measured = comparison.batches
        base = dataclasses.replace(
            base,
            warmup=base.warmup if os.environ.get("GIC_BENCH_WARMUP") else warmup,
            measured=base.measured if os.environ.get("GIC_BENCH_MEASURED") else measured,
        )
    workload = comparison.workload(base.quick)
    names = harness.chosen_systems(comparison.systems)
    rounds = rounds_from_env(quick=base.quick)
    started = time.monotonic()
    per_mode: dict[str, Any] = {}
    chosen = mode_sections(base.quick) if sections is None else list(sections(base))
    described: dict[str, Any] = {}
    for section in chosen:
        mode = section.mode
        described[section.name] = {**mode.describe(), **section.describe}
        with contextlib.ExitStack() as stack:
            params = stack.enter_context(modes.params_for(mode, base))
            conditions = stack.enter_context(section.around()) if section.around else None
            data = run_mode(
                comparison, workload, params, section.systems(comparison, names), rounds
            )
        if conditions is not None:
            data["conditions"] = dict(conditions)
        data["contention"] = modes.contention(mode)
        data["recorded_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        per_mode[section.name] = data
    out_dir = harness.QUICK_RESULTS if base.quick else None
    kept = kept_modes(
        (out_dir or common.RESULTS) / f"{comparison.name}.json",
        per_mode,
        {
            "workload": workload.describe(),
            "rounds": rounds,
            "batches": [base.warmup, base.measured],
        },
    )
    per_mode = {**kept, **per_mode}
    data = {
        "workload": workload.describe(),
        "setup": {
            "rounds": rounds,
            "order": "round r runs the systems in registry order rotated by r",
            "warmup_batches": base.warmup,
            "measured_batches": base.measured,
            "quick": base.quick,
            "isolation": "each run in its own process and JVM, one after another",
            "baselines": list(comparison.baselines),
            "contenders": list(comparison.contenders),
            "modes": {
                m: described.get(m) or (modes.MODES[m].describe() if m in modes.MODES else None)
                for m in per_mode
            },
            "kept_modes": sorted(kept),
            **(setup or {}),
        },
        "definitions": DEFINITIONS,
        "modes": per_mode,
        "goals": {m: d["goals"] for m, d in per_mode.items()},
        "outputs_identical": {m: d["outputs"]["identical"] for m, d in per_mode.items()},
        "run_s": round(time.monotonic() - started, 1),
    }
    path = harness.write(comparison.name, data, out_dir)
    print(f"wrote {path}", flush=True)
    from bench.streaming.plots_timed import plot_comparison

    print(f"wrote {plot_comparison(path.with_suffix('.png'), comparison, per_mode)}", flush=True)
    print(f"goals: {json.dumps(data['goals'])}", flush=True)
    print(f"outputs identical: {json.dumps(data['outputs_identical'])}", flush=True)
    failed = [f"{m}/{n}" for m, d in per_mode.items() for n in d["failed"]]
    if failed:
        raise BenchmarkError(
            f"{len(failed)} run(s) failed: {', '.join(failed)}; see bench/scratch/logs"
        )
    return data


def kept_modes(path: Path, ran: Mapping[str, Any], same: Mapping[str, Any]) -> dict[str, Any]:
    """The modes of the results at ``path`` that this run did not measure again, kept
    when they were measured with the same workload, rounds and batch counts (``same``):
    a run of one mode then completes the file instead of dropping the others. Each kept
    mode carries its own ``recorded_at``. Nothing is kept from a file that does not
    match, or that cannot be read."""
    try:
        old = json.loads(path.read_text())
        setup = old["setup"]
        recorded = {
            "workload": old["workload"],
            "rounds": setup["rounds"],
            "batches": [setup["warmup_batches"], setup["measured_batches"]],
        }
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if recorded != dict(same):
        return {}
    return {
        m: {"recorded_at": old.get("recorded_at"), **d}
        for m, d in old.get("modes", {}).items()
        if m not in ran and isinstance(d, dict)
    }
