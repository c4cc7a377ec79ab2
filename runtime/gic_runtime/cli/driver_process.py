"""The driver pod's entry process: ``python3 -m gic_runtime.cli.driver_process --
spark-submit ...`` (the command the operator gives driver pods).

Kubernetes sends SIGTERM to a container's first process only. Started directly,
``spark-submit`` becomes the Spark JVM, which answers SIGTERM by stopping Spark under
the Python app: the app never gets to stop its query or record the stop. So this
process runs the command as its child, in a process group of its own, and on SIGTERM
(or SIGINT):

1. forwards SIGTERM to the Python process running the query -- the pid it announced
   in ``GIC_DRIVER_PID_FILE`` (:mod:`gic_runtime.spark.termination`), which then stops
   between batches or abandons its batch within ``stop_timeout_s``, records the stop
   and exits; before a query runs (Spark still starting: nothing claimed yet) it sends
   SIGTERM to the child's whole group instead;
2. waits for the child ``stop_timeout_s`` + :data:`MARGIN_S` at most, then SIGKILLs its
   group; whatever is left of the group when the child ends is SIGKILLed too (as a
   container's processes end with it);
3. when the job's status record still shows this launch's epoch live (``starting``,
   ``running``, ``stopping``: the driver was killed before it recorded its stop), records
   ``stopped`` itself, so ``gic jobs`` and ``gic gc`` see the launch ended.

Exit code: the child's (128+N for a signal N), except that after SIGTERM a child that
ended cleanly or by the signals above gives 143, like a process SIGTERM ended: the pod
ends ``Failed``, never ``Succeeded``, so the operator recovers the job rather than
treating it as finished. The operator's termination grace period is ``stop_timeout_s``
plus :data:`GRACE_MARGIN_S` (more than :data:`MARGIN_S`), so the kubelet's SIGKILL comes
after all of the above.

Thread-safety: one thread; the signal handler only records the signal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from gic_runtime.cli.common import LIVE_STATES
from gic_runtime.config import DRIVER_PID_FILE_ENV, GICSettings
from gic_runtime.errors import GICError
from gic_runtime.status import JobState, read_status, write_status
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver

__all__ = ["GRACE_MARGIN_S", "MARGIN_S", "main", "supervise"]

MARGIN_S = 15.0
"""Time after ``stop_timeout_s`` for the driver to stop Spark, record the stop and exit
before it is killed: the driver's own steps after ``stop_timeout_s`` take up to about
10 s (5 s for Spark's stream thread, 2 s for an abandoned batch, Spark's shutdown)."""
GRACE_MARGIN_S = 20.0
"""The operator's termination grace period is ``stop_timeout_s`` plus this: room for
:data:`MARGIN_S` and for this process's own status record."""
_POLL_S = 0.1
_DEFAULT_STOP_TIMEOUT_S = float(GICSettings.model_fields["stop_timeout_s"].default)


def _say(text: str) -> None:
    print(f"gic driver: {text}", file=sys.stderr, flush=True)


class _Signals:
    """SIGTERM and SIGINT as a flag (the first one's monotonic time)."""

    def __init__(self) -> None:
        self.at: float | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.at is None:
            self.at = time.monotonic()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _announced_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid > 1 else None


def _forward(child: subprocess.Popen[bytes], pid_file: Path) -> None:
    pid = _announced_pid(pid_file)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pid = None
        else:
            _say(f"SIGTERM: asked the driver (pid {pid}) to stop")
    if pid is None:
        _say("SIGTERM before the query started: terminating the driver")
        _signal_group(child.pid, signal.SIGTERM)


def _settings() -> GICSettings | None:
    try:
        return GICSettings.load()
    except GICError:
        return None  # the driver fails on the same settings and records why


def record_stop(settings: GICSettings) -> bool:
    """Record ``stopped`` when the job's status record shows this launch (the settings'
    epoch) live; True when written. Best effort: a storage error is reported, not
    raised."""
    if settings.epoch is None:
        return False
    resolver = StoreResolver(S3Settings.from_env())
    try:
        status = read_status(resolver, settings.storage, settings.job_id)
        if status is None or status.epoch != settings.epoch or status.state not in LIVE_STATES:
            return False
        reason = "stopped by SIGTERM; the driver ended before it recorded its stop"
        stopped = status.replace(
            state=JobState.STOPPED,
            updated_at=time.time(),
            extra={**status.extra, "stop_reason": reason},
        )
        write_status(resolver, settings.storage, settings.job_id, stopped)
    except GICError as exc:
        _say(f"could not record the stop in the job's status record: {exc}")
        return False
    _say(f"recorded the stop of epoch {settings.epoch} in the job's status record")
    return True


def supervise(command: Sequence[str]) -> int:
    """Run ``command`` as described in the module docstring; returns the exit code."""
    signals = _Signals()
    settings = _settings()
    stop_timeout = settings.stop_timeout_s if settings is not None else _DEFAULT_STOP_TIMEOUT_S
    run_dir = Path(tempfile.mkdtemp(prefix="gic-driver-"))
    pid_file = run_dir / "driver.pid"
    env = {**os.environ, DRIVER_PID_FILE_ENV: str(pid_file)}
    try:
        child = subprocess.Popen(list(command), env=env, start_new_session=True)
    except OSError as exc:
        _say(f"cannot run {command[0]}: {exc}")
        shutil.rmtree(run_dir, ignore_errors=True)
        return 127
    forwarded = killed = False
    while True:
        try:
            code = child.wait(timeout=_POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        if signals.at is None:
            continue
        if not forwarded:
            forwarded = True
            _forward(child, pid_file)
        elif not killed and time.monotonic() - signals.at > stop_timeout + MARGIN_S:
            killed = True
            _say(f"the driver did not stop within {stop_timeout + MARGIN_S:.0f} s: killing it")
            _signal_group(child.pid, signal.SIGKILL)
    _signal_group(child.pid, signal.SIGKILL)  # what the child left running
    shutil.rmtree(run_dir, ignore_errors=True)
    status = 128 - code if code < 0 else code
    if signals.at is None:
        return status
    if settings is not None:
        record_stop(settings)
    if code == 0 or code < 0 or status == 128 + signal.SIGTERM:
        return 128 + signal.SIGTERM
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        _say("usage: python -m gic_runtime.cli.driver_process -- COMMAND [ARGS...]")
        return 2
    return supervise(args)


if __name__ == "__main__":
    sys.exit(main())
