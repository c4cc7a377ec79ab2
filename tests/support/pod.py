"""A driver launched the way a pod holds it: every process it starts belongs to it.

PySpark's worker daemon puts itself and its workers in a process group of their own, so
signalling the driver's process group does not reach them; a pod's end does. Every
process of a :class:`PodLaunch` carries a marker in its environment (inherited by the
JVM, the daemon and the forked workers alike), and :meth:`PodLaunch.kill` ends all of
them and waits until none remains, as a kubelet does when a container dies.

When a launch does not end in time, :meth:`PodLaunch.wait` raises with the thread
stacks of all its processes (``jcmd Thread.print`` for JVMs, :mod:`faulthandler` for
Python processes, which then end) and the tail of its log, so a hang is diagnosable
from the test report alone.

Linux only (``/proc``). Not thread-safe: one launch is driven by one thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from .processes import log_tail

MARK = "GIC_TEST_POD"


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] != b"Z"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class PodLaunch:
    """One launch of ``argv``; its output (stdout and stderr) is appended to ``log``."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str], log: Path, *, cwd: Path | None = None
    ) -> None:
        self.log = log
        self.argv = list(argv)
        self._mark = f"{MARK}={uuid.uuid4().hex}".encode()
        name, value = self._mark.decode().split("=", 1)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                list(argv),
                env={**env, name: value, "PYTHONFAULTHANDLER": "1"},
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def members(self) -> list[int]:
        """Pids of the launch's live processes (in any process group)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _environ_has(int(entry), self._mark) and _alive(int(entry)):
                found.append(int(entry))
        return sorted(found)

    def kill(self, settle_s: float = 30.0) -> None:
        """SIGKILL every process of the launch, reap its first one, and wait (up to
        ``settle_s``) until no process of it remains."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + settle_s
        while True:
            left = [pid for pid in self.members() if pid != self.proc.pid]
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=0.1)
            if (not left and self.proc.returncode is not None) or time.monotonic() > deadline:
                return

    def stacks(self) -> str:
        """Thread stacks of every process of the launch; the Python ones end with it
        (their :mod:`faulthandler` output goes to the log)."""
        parts = []
        pids = self.members()
        javas = [pid for pid in pids if "java" in _cmdline(pid).split(" ", 1)[0]]
        pythons = [pid for pid in pids if pid not in javas]
        # workers first: their stderr reaches the log through the JVM
        for pid in sorted(pythons, key=lambda p: p == self.proc.pid):
            parts.append(f"--- python {pid}: {_cmdline(pid)[:200]}")
        for pid in javas:
            done = subprocess.run(
                ["jcmd", str(pid), "Thread.print"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            parts.append(f"--- jvm {pid}:\n{done.stdout}{done.stderr}")
        for pid in sorted(pythons, key=lambda p: p == self.proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGABRT)
            time.sleep(1.0)
        return "\n".join(parts)

    def wait(self, timeout: float) -> int:
        """The exit code of the launch's first process; afterwards nothing of the launch
        lingers. A launch still running after ``timeout`` seconds fails the test with
        its stacks and log (see the module docstring)."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = self.stacks()
            raise AssertionError(
                f"{self.argv} did not end within {timeout:.0f} s.\n{stacks}\n"
                f"--- log tail:\n{log_tail(self.log, 400)}"
            ) from None
        finally:
            self.kill()
