"""A Spark standalone cluster from pyspark's own jars, on 127.0.0.1 (benchmarks and tests).

Usage::

    with standalone_cluster(workers=2, cores=1, memory_mib=2048) as master_url:
        spark = SparkSession.builder.master(master_url).getOrCreate()

One master and ``workers`` workers run as separate processes started through
``<pyspark>/bin/spark-class org.apache.spark.deploy.master.Master`` (and ``...worker.Worker``),
each in its own process group, bound to 127.0.0.1 on free ports. Everything they write
(each worker's work and local directories, the daemons' logs) lives under one temporary
directory. The context manager returns once the master's JSON endpoint
(``http://127.0.0.1:<webui>/json/``) lists ``workers`` alive workers; on exit it stops every
process group it started (SIGTERM, then SIGKILL after a grace period; executors are
children of their worker and go with its group) and removes the directory unless
``keep_dir`` is set.

Executors inherit the workers' environment: ``SPARK_LOCAL_IP=127.0.0.1`` and
``PYSPARK_PYTHON`` (this interpreter) are set, plus anything in ``env``; per-application
variables belong in ``spark.executorEnv.*``.

Not thread-safe: start and stop a cluster from one thread. Distinct clusters are
independent (distinct ports and directories).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gic_runtime.errors import GICError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STOP_GRACE_S = 10.0
GROUP_GONE_S = 10.0
POLL_S = 0.5
LOG_TAIL = 30


class ClusterError(GICError):
    """The standalone cluster could not be started."""


@dataclass(frozen=True)
class StandaloneCluster:
    """A running cluster: where to reach it and what it consists of."""

    master_url: str
    """``spark://127.0.0.1:<port>``, the master URL applications connect to."""
    webui_url: str
    """``http://127.0.0.1:<port>``; ``<webui_url>/json/`` describes the cluster."""
    directory: Path
    """Holds the logs (``master.log``, ``worker-<i>.log``) and every worker's directories."""
    pids: tuple[int, ...]
    """Process (and process group) ids: the master first, then the workers."""


def pyspark_home() -> Path:
    """The installed pyspark package directory (it holds ``bin/`` and ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def alive_workers(webui_url: str, timeout_s: float = 2.0) -> int:
    """Number of workers the master reports ALIVE; 0 if the master does not answer yet."""
    try:
        with urllib.request.urlopen(f"{webui_url}/json/", timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError):
        return 0
    return sum(1 for worker in data.get("workers", []) if worker.get("state") == "ALIVE")


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL:])
    except OSError:
        return "(no log)"


def _start(argv: list[str], log: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process group (workers before the master), then SIGKILL laggards."""
    for proc in reversed(processes):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in reversed(processes):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the group may outlive its leader
        proc.wait()
    for proc in processes:
        _wait_group_gone(proc.pid, GROUP_GONE_S)


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    """Wait until no process of group ``pgid`` is left (executors die after their worker)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def _wait_for_workers(
    webui_url: str,
    workers: int,
    processes: list[subprocess.Popen[bytes]],
    logs: list[Path],
    timeout_s: float,
) -> None:
    deadline = time.monotonic() + timeout_s
    while alive_workers(webui_url) < workers:
        for proc, log in zip(processes, logs, strict=True):
            if proc.poll() is not None:
                raise ClusterError(
                    f"{log.stem} exited with code {proc.returncode} during start-up; last "
                    f"lines of {log}:\n{_tail(log)}"
                )
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the master at {webui_url} reported {alive_workers(webui_url)} of {workers} "
                f"workers alive after {timeout_s:.0f} s; last lines of {logs[-1]}:\n"
                f"{_tail(logs[-1])}"
            )
        time.sleep(POLL_S)


@contextlib.contextmanager
def running_cluster(
    workers: int = 2,
    cores: int = 1,
    memory_mib: int = 2048,
    *,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    startup_timeout_s: float = 120.0,
    keep_dir: bool = False,
) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers (``cores`` cores and ``memory_mib`` MiB each),
    yield the running :class:`StandaloneCluster`, stop it all on exit."""
    if workers < 1 or cores < 1 or memory_mib < 512:
        raise ClusterError(
            f"need at least 1 worker, 1 core and 512 MiB per worker, got workers={workers} "
            f"cores={cores} memory_mib={memory_mib}"
        )
    spark_class = pyspark_home() / "bin" / "spark-class"
    if not spark_class.is_file():
        raise ClusterError(f"{spark_class} not found; is pyspark installed in this interpreter?")
    if base_dir is not None:
        base_dir.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="gic-spark-standalone-", dir=base_dir))
    common_env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        **(env or {}),
    }
    port, webui = free_port(), free_port()
    master_url, webui_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{webui}"
    processes: list[subprocess.Popen[bytes]] = []
    logs = [directory / "master.log"]
    try:
        master_argv = [str(spark_class), MASTER_CLASS, "--host", "127.0.0.1"]
        master_argv += ["--port", str(port), "--webui-port", str(webui)]
        processes.append(_start(master_argv, logs[0], common_env))
        for index in range(workers):
            home = directory / f"worker-{index}"
            (home / "work").mkdir(parents=True)
            (home / "local").mkdir()
            worker_env = {
                **common_env,
                "SPARK_WORKER_DIR": str(home / "work"),
                "SPARK_LOCAL_DIRS": str(home / "local"),
            }
            argv = [str(spark_class), WORKER_CLASS, "--host", "127.0.0.1"]
            argv += ["--port", str(free_port()), "--webui-port", str(free_port())]
            argv += ["--cores", str(cores), "--memory", f"{memory_mib}M"]
            argv += ["--work-dir", str(home / "work"), master_url]
            logs.append(directory / f"worker-{index}.log")
            processes.append(_start(argv, logs[-1], worker_env))
        _wait_for_workers(webui_url, workers, processes, logs, startup_timeout_s)
        yield StandaloneCluster(
            master_url, webui_url, directory, tuple(proc.pid for proc in processes)
        )
    finally:
        _stop(processes)
        if not keep_dir:
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def standalone_cluster(workers: int = 2, cores: int = 1, memory_mib: int = 2048) -> Iterator[str]:
    """A running standalone cluster of ``workers`` workers; yields its master URL."""
    with running_cluster(workers, cores, memory_mib) as cluster:
        yield cluster.master_url
