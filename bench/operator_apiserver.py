"""The Kubernetes API emulator in a process of its own, for the operator benchmark.

:class:`~gic_operator.testing.kube_emulator.KubeEmulator` serves from a thread; in the
benchmark process it would compete with the reconcilers for the interpreter lock, which
a real API server never does. :class:`ApiServerProcess` runs it in a child interpreter
(``python -m bench.operator_apiserver``) that prints the kubeconfig path once it serves,
and stops when its stdin closes, printing how many requests the emulator failed on.

Invariant: once :meth:`ApiServerProcess.stop` returns, the child has exited (it is
killed if it does not end within a few seconds).

Thread-safety: start and stop from one thread.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[1]
READY = "kubeconfig "
ERRORS = "server_errors "


class ApiServerProcess:
    """A child process serving the Kubernetes API emulator on loopback."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self._proc: subprocess.Popen[str] | None = None
        self.server_errors: list[str] = []

    def __enter__(self) -> ApiServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ApiServerProcess:
        """Launch the child and wait until it serves."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.operator_apiserver", str(self.kubeconfig)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith(READY):
            self.stop()
            raise RuntimeError(f"the API emulator process did not start (said {line!r})")
        return self

    def stop(self) -> None:
        """Close the child's stdin, collect its report, and wait for it to exit."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            out, _ = proc.communicate(timeout=30)  # closes stdin: the child stops
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        for line in out.splitlines():
            if line.startswith(ERRORS):
                self.server_errors = [e for e in line[len(ERRORS) :].split(" | ") if e]


def _serve(kubeconfig: Path) -> None:
    from gic_operator.testing.kube_emulator import KubeEmulator

    with KubeEmulator() as kube:
        kube.write_kubeconfig(kubeconfig)
        print(f"{READY}{kubeconfig}", flush=True)
        sys.stdin.read()  # until the parent closes our stdin
        errors = [repr(e) for e in kube.server_errors]
    print(f"{ERRORS}{' | '.join(errors)}", flush=True)


if __name__ == "__main__":
    _serve(Path(sys.argv[1]))
