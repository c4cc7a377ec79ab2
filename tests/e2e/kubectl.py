"""The ``kubectl`` binary, pointed at one API server, for end-to-end tests.

:class:`Kubectl` runs kubectl with a given kubeconfig and its own discovery cache
directory (so tests never share or pollute ``~/.kube/cache``), raising with kubectl's
stderr when a command that must succeed fails. :func:`find_kubectl` prefers the kubectl
built with the test control plane (``make controlplane``), then the one on ``PATH``.
:func:`wait_until` polls a condition against a deadline, for tests that wait on
asynchronous outcomes.

Thread-safety: instances hold no mutable state; each call is its own process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..controlplane.cluster import kubectl_path

T = TypeVar("T")


def find_kubectl() -> str:
    """The control plane's kubectl when built, else the one on ``PATH``
    (``/usr/bin/kubectl`` if there is none)."""
    built = kubectl_path()
    if os.access(built, os.X_OK):
        return str(built)
    return shutil.which("kubectl") or "/usr/bin/kubectl"


def wait_until(
    condition: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    interval: float = 0.02,
) -> T:
    """Poll ``condition`` every ``interval`` seconds until it returns something truthy;
    AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Kubectl:
    """kubectl with a fixed kubeconfig and cache directory."""

    def __init__(self, kubeconfig: Path, cache_dir: Path, binary: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.base = [
            binary or find_kubectl(),
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(cache_dir),
        ]

    def __call__(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl ARGS``; with ``check``, fail unless it exits 0."""
        result = subprocess.run(
            [*self.base, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            command = " ".join(args)
            raise AssertionError(f"kubectl {command} exited {result.returncode}: {result.stderr}")
        return result

    def apply(self, manifest: str, *flags: str) -> str:
        """``kubectl apply [FLAGS] -f -`` with ``manifest`` on stdin; its stdout."""
        return self("apply", *flags, "-f", "-", stdin=manifest).stdout
