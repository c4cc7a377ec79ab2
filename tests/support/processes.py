"""Start/stop scaffolding shared by the harness servers of the tests and benchmarks
(:mod:`tests.support.testing_s3server`, :mod:`tests.controlplane.cluster`): free loopback
ports, a child process with its output in a log file, polling until something is ready,
terminate-then-kill, and the ``with``-statement protocol of a startable service.

Everything here is stateless and thread-safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

T = TypeVar("T")


class Service:
    """Mixin for a harness server: ``with Server(...) as s`` calls :meth:`start`, then
    :meth:`stop` on the way out (also on an exception); ``s`` is the server itself."""

    def start(self) -> object:
        """Start the server (subclasses implement it; what it returns is not used here)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server and release what it holds (subclasses implement it)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def require_started(value: T | None, error: type[Exception], message: str) -> T:
    """``value``, or raise ``error(message)`` when it is ``None`` (the server that would
    have set it is not started)."""
    if value is None:
        raise error(message)
    return value


def start_or_stop(
    start: Callable[[], object], stop: Callable[[], None], *, since: float | None = None
) -> float:
    """Run ``start``; when it raises anything (a failure, Ctrl-C), run ``stop`` and raise it
    on. The seconds since ``since`` (a :func:`time.monotonic` reading; default: the call),
    for a harness's ``startup_seconds``."""
    began = time.monotonic() if since is None else since
    try:
        start()
    except BaseException:
        stop()
        raise
    return time.monotonic() - began


def record_phase(phases: dict[str, float], name: str, since: float) -> float:
    """Record in ``phases`` that the start-up phase ``name`` took from ``since`` (a
    :func:`time.monotonic` reading) until now; now, where the next phase begins."""
    now = time.monotonic()
    phases[name] = now - since
    return now


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_logged(
    argv: Sequence[str], log: Path, *, append: bool = False, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start ``argv`` with stdin from ``/dev/null`` and stdout and stderr both into the
    file ``log`` (truncated first, or appended to when ``append``). Further keyword
    arguments go to :class:`subprocess.Popen` (``env``, ``cwd``, ``start_new_session``...)."""
    with log.open("ab" if append else "wb") as out:
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, **popen
        )


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of the text file ``path`` ("" when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    ready: Callable[[], T],
    *,
    timeout: float,
    on_timeout: Callable[[BaseException | None], BaseException],
    interval: float = 0.05,
    check: Callable[[], None] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``ready`` every ``interval`` seconds until it returns something truthy, and
    return that.

    Before each try ``check`` (when given) runs; it raises to give up early, e.g. when
    the process being waited for exited. An exception of a type in ``retry_on`` raised by
    ``ready`` counts as "not yet". When ``timeout`` seconds have passed after a failed
    try, the exception ``on_timeout(last)`` is raised, ``last`` being the last
    ``retry_on`` exception seen (``None`` when there was none).
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            value = ready()
        except retry_on as exc:
            last = exc
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            raise on_timeout(last)
        time.sleep(interval)


def terminate(process: subprocess.Popen[bytes], *, grace_s: float, group: bool = False) -> None:
    """SIGTERM ``process``, SIGKILL it when it is still running after ``grace_s`` seconds,
    and reap it.

    With ``group`` the signals go to its whole process group (the process must have been
    started with ``start_new_session=True``), and SIGKILL is sent to the group in any
    case, since the group may outlive its leader.
    """
    if group:
        if process.poll() is None:
            signal_group(process, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=grace_s)
        signal_group(process, signal.SIGKILL)
        process.wait()
        return
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of ``process`` (a crash, no grace) and reap its leader."""
    signal_group(process, signal.SIGKILL)
    process.wait()


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the process group of ``process`` (started with
    ``start_new_session=True``); a group that is already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(process.pid, signum)


RUNTIME_SOURCES = Path(__file__).resolve().parents[2] / "runtime"


def fresh_python(code: str, *args: str, timeout_s: float = 120) -> str:
    """Run ``code`` (with ``args`` as ``sys.argv[1:]``) in a fresh interpreter that
    imports the runtime from its sources and nothing else from this process's
    environment; returns its standard output (a failure raises with its stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(RUNTIME_SOURCES), "PATH": os.defpath},
        timeout=timeout_s,
    )
    if done.returncode != 0:
        raise AssertionError(f"the child failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout
