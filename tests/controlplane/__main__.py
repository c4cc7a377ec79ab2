"""Start the test control plane for a person: ``python -m tests.controlplane``
(``make cluster``). It prints how to use it (the admin kubeconfig to export, a ``PATH``
with the built ``kubectl`` and ``helm``, the commands that install the operator with the
chart and run the example GICJob) and runs in the foreground until Ctrl-C (or SIGTERM),
then stops everything.

Its pods run as processes of this machine with this interpreter's directory first on
their ``PATH`` (``make cluster`` runs it with ``.venv/bin/python``, so ``gic-operator``
and ``spark-submit`` are the virtualenv's), each with a loopback address of its own as
its pod IP (:mod:`.kubelet`).

Options: ``--workdir DIR`` (default: a new directory under the system's temp dir; kept
after exit so the logs can be read), ``--build`` (run ``controlplane/build.sh`` and
``controlplane/helm/build.sh`` first when binaries are missing; the default is to say so
and exit, or, for ``helm`` alone, to say so and start).
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
from .helm import build_helm, helm_bin_dir, helm_missing

#: The commands of the local path (README.md, "A local cluster"), from the repository root.
INSTALL = (
    "helm install gic-operator charts/gic-operator -n gic-system --create-namespace "
    "--set 'watchNamespaces={default}' --set warnUnwatchedJobs=true "
    '--set "storageAllowlist.storage={file://$PWD/.cluster/storage}"'
)
APPLY = 'sed "s|/path/to/gic|$PWD|g" examples/k8s/gicjob-local.yaml | kubectl apply -f -'
WATCH = "kubectl get gicjob rate-count -w"

USAGE = """\
In another shell, from the repository's directory:

  export KUBECONFIG={kubeconfig}
  export PATH={path}:$PATH
  kubectl get nodes
  {install}
  {apply}
  {watch}

API server {server}, node {node}: pods run as local processes (commands from
{venv_bin} first, each pod with a loopback address of its own as its IP,
images ignored), their logs under {pods}; component logs in {logs}.
Ctrl-C stops it."""


def usage(plane: ControlPlane) -> str:
    """What to do with a started control plane."""
    dirs = dict.fromkeys([str(plane.kubectl_path.parent), str(helm_bin_dir())])
    return USAGE.format(
        kubeconfig=plane.kubeconfig,
        path=":".join(dirs),
        install=INSTALL,
        apply=APPLY,
        watch=WATCH,
        server=plane.server,
        node=plane.node_name,
        venv_bin=Path(sys.executable).parent,
        pods=plane.workdir / "kubelet" / "pods",
        logs=plane.logs_dir,
    )


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
    if helm_missing():
        if args.build:
            build_helm()
        else:
            print("helm is not built: run `make helm` (the cluster starts anyway)", file=sys.stderr)
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
        print(f"{plane.startup_summary()}\n\n{usage(plane)}", flush=True)
        while not stop.wait(1.0):
            pass
        print("stopping ...", flush=True)
    finally:
        plane.stop()
    print(f"stopped; logs kept in {plane.logs_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
