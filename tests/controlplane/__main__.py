"""Start the test control plane for a person: ``python -m tests.controlplane``
(``make cluster``). It prints the admin kubeconfig and how to use it, and runs in the
foreground until Ctrl-C (or SIGTERM), then stops everything.

Options: ``--workdir DIR`` (default: a new directory under the system's temp dir; kept
after exit so the logs can be read), ``--build`` (run ``controlplane/build.sh`` first
when binaries are missing; the default is to say so and exit).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from .cluster import ControlPlane, ControlPlaneError, build_binaries, missing_binaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.controlplane", description=__doc__)
    parser.add_argument("--workdir", type=Path, help="work directory (default: a new temp dir)")
    parser.add_argument("--build", action="store_true", help="build missing binaries first")
    args = parser.parse_args(argv)
    if missing_binaries():
        if not args.build:
            print("control plane binaries missing: run `make controlplane`", file=sys.stderr)
            return 1
        build_binaries()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gic-controlplane-"))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    plane = ControlPlane(workdir)
    print(f"starting Kubernetes {plane.version} in {plane.workdir} ...", flush=True)
    try:
        plane.start()
    except ControlPlaneError as exc:
        print(f"the control plane did not start: {exc}", file=sys.stderr)
        return 1
    try:
        print(
            f"{plane.startup_summary()}\n\n"
            f"  export KUBECONFIG={plane.kubeconfig}\n"
            f"  alias kubectl={plane.kubectl_path}\n"
            f"  kubectl get nodes\n\n"
            f"API server {plane.server}, node {plane.node_name} (pods run as local processes,\n"
            f"their logs under {plane.workdir / 'kubelet' / 'pods'}), component logs in\n"
            f"{plane.logs_dir}. Ctrl-C stops it.",
            flush=True,
        )
        while not stop.wait(1.0):
            pass
        print("stopping ...", flush=True)
    finally:
        plane.stop()
    print(f"stopped; logs kept in {plane.logs_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
