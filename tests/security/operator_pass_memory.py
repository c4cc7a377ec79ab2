"""The storage side of an operator pass over one job, as a process whose peak memory a
test measures: what a recovery pass does with the job's manifests, in the operator's
order and with the operator's own :class:`~gic_operator.storage.job_storage.JobStorage`
(its default manifest limits): the observer's restore-source check
(``restore_released``), the recovery's claim (``claim_epoch``, which reads the newest
manifests) and the orphan sweep (``sweep_orphans``).

Usage::

    python operator_pass_memory.py ROOT JOB OUT

``OUT`` receives a JSON report: the resident set size (KiB) before the pass and the
peak resident set size during it (``VmHWM``, reset before the pass), and what each
step returned or raised (the error's class and message, and whether it is a
``CorruptFileError``).
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any


def _step(results: dict[str, Any], name: str, call: Any) -> None:
    try:
        results[name] = {"value": repr(call())}
    except Exception as exc:  # the report says what any step raised
        from gic_runtime.errors import CorruptFileError

        results[name] = {
            "error": type(exc).__name__,
            "corrupt_file": isinstance(exc, CorruptFileError),
            "message": str(exc)[:500],
        }


def _status_kib(field: str) -> int:
    """Field ``field`` of ``/proc/self/status`` (KiB; Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Reset the process's peak resident set size (``VmHWM``) to its current size, so
    what the imports took does not hide what the pass takes (Linux ``clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def main(argv: list[str]) -> int:
    root, job, out = argv
    from gic_operator.storage.job_storage import JobStorage
    from gic_runtime.storage import StoreResolver

    storage = JobStorage(StoreResolver(), f"file://{root}", job)
    source = f"file://{root}/savepoints/job-x/sp"
    gc.collect()
    _reset_peak()
    before = _status_kib("VmRSS")
    results: dict[str, Any] = {}
    _step(results, "restore_released", lambda: storage.restore_released(source))
    _step(results, "claim_epoch", lambda: storage.claim_epoch("gic-operator recovery t/j"))
    _step(results, "sweep_orphans", lambda: storage.sweep_orphans(source))
    after = _status_kib("VmHWM")
    report = {"before_kib": before, "after_kib": after, "steps": results}
    Path(out).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
