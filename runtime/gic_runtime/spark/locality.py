"""Sticky placement of the stateful stage on a Spark cluster (docs/architecture.md §13.2).

Spark runs a ``mapInArrow`` task wherever a slot is free, so on a cluster a bucket
range would wander between executors and restore from storage each time it lands on a
new one. Spark's own state stores stay put because their RDD reports preferred
locations. PySpark cannot define an RDD, so a small JVM helper does it (sources in
``gic_runtime/spark/jvm/``, about 100 lines of Java):

* ``io.gic.spark.PinnedRDD`` passes its parent's partitions through unchanged and
  reports one preferred location per partition (``executor_<host>_<id>``, the form the
  scheduler honours within ``spark.locality.wait``);
* ``io.gic.spark.Placement`` lists the live executors and wraps a DataFrame's rows
  (``queryExecution().toRdd()``) in a ``PinnedRDD``, returning a DataFrame again.

:class:`StickyPlacement` (one per driver attempt) asks for the live executors before
each batch, keeps every task where it was (:func:`~gic_runtime.spark.assignment.
assign`: moves only when an executor is lost, the job is rescaled or executors join)
and pins the routed DataFrame. "Where it was" is where the task last ran (each ack names
its executor), so a task the scheduler ran elsewhere -- it stops waiting for a busy
executor after ``spark.locality.wait`` -- stays where its local copy now is. The ranges
whose task ran on another executor than in the batch before are reported.

The helper jar: ``GIC_PLACEMENT_JAR`` when set, else a jar built once with ``javac``
against PySpark's own jars into a cache keyed by the sources and the Spark version
(``make jvm`` and the Spark image build it ahead; :func:`main` prints its path).
Without a jar or a JDK the stage runs unpinned (correct, slower on several executors)
and a warning says so once. In ``local[n]`` nothing is pinned: there
is one executor.

Invariant: pinning changes scheduling only; partition ``i`` holds exactly the rows it
held before (the tasks verify it, :func:`gic_runtime.processing.bucket_column_ok`).

Thread-safety: a :class:`StickyPlacement` is used by the driver's batch thread only;
:func:`placement_jar` serializes builds with a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from gic_runtime.coordination.barrier import TaskAck
from gic_runtime.errors import ConfigurationError
from gic_runtime.spark.assignment import assign

_log = logging.getLogger(__name__)

PLACEMENT_CLASS = "io.gic.spark.Placement"
JAR_ENV = "GIC_PLACEMENT_JAR"
CACHE_ENV = "GIC_JVM_CACHE"
_SOURCES = Path(__file__).parent / "jvm"


def _sources() -> list[Path]:
    return sorted(_SOURCES.rglob("*.java"))


def _spark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def jar_name() -> str:
    """The jar's file name: a digest of the helper's sources and the Spark version, so
    a changed source or another Spark never reuses a stale build."""
    import pyspark

    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in _sources():
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return f"gic-placement-{digest.hexdigest()[:16]}.jar"


def _cache_dir() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gic" / "jvm"


def build_jar(target: Path) -> Path:
    """Compile the helper against PySpark's jars into ``target`` (atomically)."""
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if javac is None or jar is None:
        raise ConfigurationError(
            "building the placement helper needs a JDK (javac and jar on PATH); install one "
            f"or point {JAR_ENV} at a prebuilt jar"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        classes = Path(tmp) / "classes"
        compiled = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp"]
            + [str(_spark_jars() / "*")]
            + [str(s) for s in _sources()],
            capture_output=True,
            text=True,
            check=False,
        )
        if compiled.returncode != 0:
            raise ConfigurationError(
                f"could not compile the placement helper: {compiled.stderr.strip()[-2000:]}"
            )
        staged = Path(tmp) / target.name
        subprocess.run([jar, "cf", str(staged), "-C", str(classes), "."], check=True)
        os.replace(staged, target)
    return target


def placement_jar(*, build: bool = True) -> Path | None:
    """The helper jar (see the module docstring); ``None`` when there is none and it
    cannot be built here."""
    configured = os.environ.get(JAR_ENV)
    if configured:
        path = Path(configured)
        if not path.is_file():
            raise ConfigurationError(f"{JAR_ENV}={configured} is not a file; unset it or fix it")
        return path
    target = _cache_dir() / jar_name()
    if target.is_file() or not build:
        return target if target.is_file() else None
    if shutil.which("javac") is None:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            build_jar(target)
    return target


def is_local_master(master: str) -> bool:
    """``local`` / ``local[n]`` / ``local[n,f]``: one executor, the driver itself."""
    return master == "local" or master.startswith("local[")


def location_executor(location: str) -> str:
    """The executor id of a location ``executor_<host>_<id>``."""
    return location.rsplit("_", 1)[-1] if location else ""


@dataclass(frozen=True, slots=True)
class PlacementReport:
    """Where one batch's tasks were meant to run and where they did."""

    pinned: bool
    """Whether the stage carried preferred locations."""
    executors: int
    """Live executors seen before the batch (0 in local mode)."""
    planned_moves: tuple[int, ...] = ()
    """Tasks given a new executor (executor lost, rescale, executors joined)."""
    moved: tuple[int, ...] = ()
    """Tasks that ran on another executor than in the batch before."""


_HELPERS: dict[str, Any] = {}
"""The placement helper of each Spark application in this process: one instance, from
one class loader, for every query of the application (py4j caches a class's methods by
name, so a second copy of the class loaded by another loader breaks calls on it)."""
_HELPERS_LOCK = threading.Lock()


def _shared_helper(spark: SparkSession) -> Any:
    """The application's placement helper, loaded once (``None``: unavailable)."""
    sc = spark.sparkContext
    app = str(sc.applicationId)
    with _HELPERS_LOCK:
        if app not in _HELPERS:
            _HELPERS[app] = _load_helper(sc)
        return _HELPERS[app]


def _load_helper(sc: Any) -> Any:
    jvm: Any = sc._jvm
    try:
        return jvm.io.gic.spark.Placement()
    except Exception:  # py4j: the class is not on the driver's class path
        pass
    try:
        jar = placement_jar()
    except ConfigurationError as exc:
        _log.warning("state tasks run unpinned: %s", exc)
        jar = None
    if jar is None:
        _log.warning(
            "state tasks run unpinned (no placement helper jar and no JDK to build it; "
            "set %s): on several executors bucket ranges restore when they move",
            JAR_ENV,
        )
        return None
    sc._jsc.sc().addJar(str(jar))  # executors fetch it before their next task
    gateway: Any = sc._gateway
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(jar)).toURI().toURL()
    loader = jvm.java.net.URLClassLoader(
        urls, jvm.java.lang.Thread.currentThread().getContextClassLoader()
    )
    cls = loader.loadClass(PLACEMENT_CLASS)
    ctor = cls.getDeclaredConstructor(gateway.new_array(jvm.java.lang.Class, 0))
    return ctor.newInstance(gateway.new_array(jvm.java.lang.Object, 0))


class StickyPlacement:
    """Pins each batch's stateful stage to the tasks' executors (see the module
    docstring). One per driver attempt; batch thread only."""

    def __init__(self, spark: SparkSession, num_tasks: int) -> None:
        self.spark = spark
        self.num_tasks = num_tasks
        self.local = is_local_master(spark.sparkContext.master or "local")
        self._helper: Any = None
        self._unavailable = False
        self._planned: tuple[str, ...] | None = None
        self._ran: dict[int, str] = {}

    def _jvm_helper(self) -> Any:
        if self._helper is None and not self._unavailable:
            self._helper = _shared_helper(self.spark)
            self._unavailable = self._helper is None
        return self._helper

    def live_executors(self) -> list[str]:
        """The live executors' locations (empty in local mode or without the helper)."""
        if self.local:
            return []
        helper = self._jvm_helper()
        if helper is None:
            return []
        return [str(x) for x in helper.executors(self.spark.sparkContext._jsc.sc())]

    def _previous(self, live: Sequence[str]) -> list[str]:
        """Where each task's local copy is: the executor it last ran on when that one is
        alive (the scheduler may have run it elsewhere than planned), else its plan."""
        by_id = {location_executor(x): x for x in live}
        planned = self._planned or ()
        out: list[str] = []
        for task in range(self.num_tasks):
            ran = by_id.get(self._ran.get(task, ""))
            out.append(ran or (planned[task] if task < len(planned) else ""))
        return out

    def pin(self, df: DataFrame) -> tuple[DataFrame, PlacementReport]:
        """``df`` (the routed batch, partition ``i`` = task ``i``) with each partition
        preferring its task's executor (unchanged in local mode or without the helper)."""
        live = self.live_executors()
        if not live:
            return df, PlacementReport(pinned=False, executors=0)
        placement = assign(self._previous(live), live, self.num_tasks)
        self._planned = placement.executors
        sc = self.spark.sparkContext
        gateway: Any = sc._gateway
        jvm: Any = sc._jvm
        locations = gateway.new_array(jvm.java.lang.String, self.num_tasks)
        for index, where in enumerate(placement.executors):
            locations[index] = where
        pinned = DataFrame(self._helper.pin(df._jdf, locations), self.spark)
        return pinned, PlacementReport(
            pinned=True, executors=len(live), planned_moves=placement.moved
        )

    def observe(self, report: PlacementReport, acks: Sequence[TaskAck]) -> PlacementReport:
        """``report`` with the tasks that ran elsewhere than in the batch before."""
        moved: list[int] = []
        for ack in acks:
            where = ack.stats.executor
            before = self._ran.get(ack.task_index)
            if before and where and before != where:
                moved.append(ack.task_index)
            if where:
                self._ran[ack.task_index] = where
        return PlacementReport(
            pinned=report.pinned,
            executors=report.executors,
            planned_moves=report.planned_moves,
            moved=tuple(sorted(moved)),
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Build the helper jar if needed and print its path (``make jvm``)."""
    del argv
    jar = placement_jar()
    if jar is None:
        print(
            "no placement helper: no JDK (javac) here and GIC_PLACEMENT_JAR unset", file=sys.stderr
        )
        return 1
    print(jar)
    return 0
