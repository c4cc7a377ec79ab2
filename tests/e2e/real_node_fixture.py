"""What every test module with a real node does around it (see ``real_node.py``).

:func:`require_real_node` fails the test, naming what to install, where this machine
cannot run a node, and builds the node's binaries when they are missing;
:func:`checked_node` runs a node for the block and afterwards asserts that nothing of it
is left: its bridge, its processes, the iptables chains it made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..controlplane.cluster import ControlPlane
from .real_node import (
    NODE_BINARIES,
    RealNode,
    build_node_binaries,
    missing_tools,
    node_bin_dir,
    processes_under,
)
from .real_node_net import kubernetes_chains


def require_real_node(request: pytest.FixtureRequest) -> None:
    """Fail unless this machine can run a real node; build its binaries when missing
    (the build's progress shown, not captured)."""
    missing = missing_tools()
    if missing:
        pytest.fail(
            f"a real node needs {', '.join(missing)}: run as root after `apt-get install "
            "containerd runc containernetworking-plugins` (.ci/run installs them)"
        )
    if not all((node_bin_dir() / name).exists() for name in NODE_BINARIES):
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            build_node_binaries()


@contextlib.contextmanager
def checked_node(plane: ControlPlane, workdir: Path) -> Iterator[RealNode]:
    """A started real node in ``workdir``, stopped after the block; then nothing of it
    may be left on this machine."""
    chains = kubernetes_chains()
    node = RealNode(plane, workdir)
    with node:
        yield node
    assert not Path(f"/sys/class/net/gicn{node.subnet}").exists()
    assert kubernetes_chains() == chains
    assert not processes_under(node.workdir)
