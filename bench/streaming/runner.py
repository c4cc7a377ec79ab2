"""Run ONE system of a streaming benchmark in a fresh subprocess (a fresh JVM).

The harness calls a :data:`SystemFn` ``(workload, params) -> RunResult``;
:func:`in_subprocess` makes one from a *target*: ``"package.module:function"`` naming a
:data:`ChildFn` ``(variant, workload, params, scratch, **options) -> RunResult`` that runs
in the child process (``options``: JSON values given to :func:`run_in_subprocess`, e.g. to
restart a run from the storage of a previous one). The child is ``python -m
bench.streaming.runner REQUEST``: it imports the target, calls it and writes the result as
JSON. Every system thus starts from a cold JVM with its own heap, and no state store,
cache or thread of one system can disturb the next.

The child's environment sets ``SPARK_LOCAL_IP=127.0.0.1`` and ``PYSPARK_PYTHON`` to this
interpreter (``PYTHONPATH`` gets the repository, so executors can import ``bench``); its
output goes to ``bench/scratch/logs/<workload>-<variant>[-<mode>][-<tag>].log``. Its
working files (checkpoints) live in a fresh directory under ``bench/scratch`` that is
deleted afterwards unless ``GIC_BENCH_KEEP_SCRATCH=1``; a caller that passes its own
``scratch`` directory keeps it (and deletes it when done). A child that outlives
``params.timeout_s`` (plus a grace period) is killed with its process group.

Adding a system: write a ``ChildFn`` and register ``in_subprocess("mod:fn", "name")`` in
:data:`bench.streaming.harness.SYSTEMS`.

Thread-safety: each call owns its subprocess and directory; concurrent calls are
independent (the harness runs systems one after another so they do not compete).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bench import common
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import WorkloadSpec

SystemFn = Callable[[WorkloadSpec, BenchParams], RunResult]
ChildFn = Callable[..., RunResult]
"""``(variant, workload, params, scratch, **options) -> RunResult``."""

REPO = Path(__file__).resolve().parents[2]
GRACE_S = 120.0
"""Time on top of ``params.timeout_s`` for JVM start and shutdown."""
LOG_TAIL = 40


def in_subprocess(target: str, variant: str) -> SystemFn:
    """A system that runs ``target`` (``"module:function"``) as ``variant`` in a child."""
    _split(target)

    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        return run_in_subprocess(target, variant, workload, params)

    run.__name__ = f"run_{variant}"
    return run


def _split(target: str) -> tuple[str, str]:
    module, sep, function = target.partition(":")
    if not sep or not module or not function:
        raise BenchmarkError(f"system target {target!r} must look like 'package.module:function'")
    return module, function


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-LOG_TAIL:])


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def log_path(workload: WorkloadSpec, variant: str, params: BenchParams, tag: str = "") -> Path:
    """Where the child's output goes."""
    mode = "" if params.mode == "local2" else f"-{params.mode}"
    return (
        common.SCRATCH / "logs" / f"{workload.name}-{variant}{mode}{f'-{tag}' if tag else ''}.log"
    )


def run_in_subprocess(
    target: str,
    variant: str,
    workload: WorkloadSpec,
    params: BenchParams,
    *,
    scratch: Path | None = None,
    options: Mapping[str, Any] | None = None,
    tag: str = "",
) -> RunResult:
    """Run ``target`` as ``variant`` in a fresh child process; return its checked result.

    ``scratch``: the child's working directory, kept afterwards (default: a fresh one,
    deleted afterwards). ``options``: keyword arguments of the target. ``tag``: added to
    the log file's name."""
    _split(target)
    owned = scratch is None
    if scratch is None:
        scratch = common.SCRATCH / f"{workload.name}-{variant}-{uuid.uuid4().hex[:10]}"
    scratch.mkdir(parents=True, exist_ok=not owned)
    log = log_path(workload, variant, params, tag)
    log.parent.mkdir(parents=True, exist_ok=True)
    request = scratch / "request.json"
    result_path = scratch / "result.json"
    result_path.unlink(missing_ok=True)
    request.write_text(
        json.dumps(
            {
                "target": target,
                "variant": variant,
                "workload": workload.to_json(),
                "params": params.to_json(),
                "scratch": str(scratch),
                "result": str(result_path),
                "options": dict(options or {}),
            }
        )
    )
    path = os.environ.get("PYTHONPATH")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO),
    }
    try:
        with log.open("wb") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "bench.streaming.runner", str(request)],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code = child.wait(timeout=params.timeout_s + GRACE_S)
            except subprocess.TimeoutExpired as exc:
                _kill_group(child.pid)
                child.wait()
                raise BenchmarkError(
                    f"system {variant!r} did not finish within {params.timeout_s + GRACE_S:.0f}"
                    f" s and was killed; see {log}"
                ) from exc
            finally:
                _kill_group(child.pid)  # a JVM left behind by the child, if any
        if code != 0 or not result_path.is_file():
            raise BenchmarkError(
                f"system {variant!r} failed (exit code {code}); last lines of {log}:\n{_tail(log)}"
            )
        try:
            result = RunResult.from_json(json.loads(result_path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchmarkError(f"system {variant!r} wrote an unreadable result: {exc}") from exc
        result.check(params)
        return result
    finally:
        if owned and os.environ.get("GIC_BENCH_KEEP_SCRATCH") != "1":
            shutil.rmtree(scratch, ignore_errors=True)


def _child(request_path: Path) -> None:
    request: dict[str, Any] = json.loads(request_path.read_text())
    module, function = _split(str(request["target"]))
    fn: ChildFn = getattr(importlib.import_module(module), function)
    scratch = Path(request["scratch"])
    result = fn(
        str(request["variant"]),
        WorkloadSpec.from_json(request["workload"]),
        BenchParams.from_json(request["params"]),
        scratch,
        **request.get("options", {}),
    )
    out = Path(request["result"])
    partial = out.with_suffix(".partial")
    partial.write_text(json.dumps(result.to_json()))
    os.replace(partial, out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.streaming.runner REQUEST.json", file=sys.stderr)
        return 2
    _child(Path(argv[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
