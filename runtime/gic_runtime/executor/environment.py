"""What a state task learns about the executor it runs on, from its environment.

Python workers inherit their executor's environment. Two facts matter:

* **Which executor.** Kubernetes executor pods carry ``SPARK_EXECUTOR_ID``; standalone
  and ``local-cluster`` executors name their id in ``SPARK_LOG_URL_STDERR``
  (``...&executorId=N&...``); in ``local[n]`` there is neither and the one executor is
  the driver. Only reported (placement diagnostics: which ranges moved); correctness
  never depends on it.
* **Where the executor-local state lives** (:func:`resolve_local_dir`). An explicit
  directory is used as given (a relative one resolves against the executor's working
  directory, which is private to the executor in standalone and Kubernetes). The empty
  string means *the executor's own scratch directory*: the first of
  ``SPARK_LOCAL_DIRS`` (Spark gives each executor its own; on Kubernetes it is the pod's
  ``spark-local-dir-*`` volume), so several executors on one machine never share a copy
  by accident.

Pure functions of the environment; thread-safe.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["LOCAL_DIR_NAME", "executor_id", "resolve_local_dir"]

LOCAL_DIR_NAME = "gic-local"
"""Subdirectory of the executor's scratch directory that holds GIC's local state."""

_LOG_URL_ID = re.compile(r"[?&]executorId=([^&]+)")


def executor_id(env: Mapping[str, str] | None = None) -> str:
    """The id of the executor this process belongs to ("driver" in local mode)."""
    env = os.environ if env is None else env
    explicit = env.get("SPARK_EXECUTOR_ID", "").strip()
    if explicit:
        return explicit
    for name in ("SPARK_LOG_URL_STDERR", "SPARK_LOG_URL_STDOUT"):
        found = _LOG_URL_ID.search(env.get(name, ""))
        if found:
            return found.group(1)
    return "driver"


def resolve_local_dir(configured: str, env: Mapping[str, str] | None = None) -> Path:
    """The absolute executor-local directory for ``configured`` (see the module
    docstring; "" is the executor's scratch directory)."""
    if configured:
        return Path(configured).absolute()
    env = os.environ if env is None else env
    for entry in env.get("SPARK_LOCAL_DIRS", "").split(","):
        if entry.strip():
            return Path(entry.strip()).absolute() / LOCAL_DIR_NAME
    return Path(tempfile.gettempdir()).absolute() / LOCAL_DIR_NAME
