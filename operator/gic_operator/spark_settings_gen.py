"""Generates :data:`~gic_operator.spark_settings.DATA_FILE`, the Spark settings the pinned
PySpark defines, from PySpark's own jars.

The operator never imports pyspark, so the list it checks ``sparkConf`` keys against is
generated here, at build time, and committed as package data. ``jvm/ListSparkSettings.java``
runs on the JVM (``java`` 11+ runs a single source file directly) with PySpark's jars on the
class path: it initializes every Scala object of the ``spark-*.jar`` files, so each declared
``ConfigEntry`` registers itself, and prints the registry's keys and alternative names, plus
the network settings that ``TransportConf`` reads by name. This module only locates the jars
(without importing pyspark), runs that program and writes its sorted output under a header
naming the PySpark version.

``python -m gic_operator.spark_settings_gen`` (``make spark-settings``) rewrites the file;
``--check`` writes nothing and exits 1 when the committed file differs. Output is
deterministic for a given PySpark.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from gic_operator.spark_settings import DATA_FILE, header

REGENERATE = "make spark-settings (python -m gic_operator.spark_settings_gen)"
PROGRAM = Path(__file__).with_name("jvm") / "ListSparkSettings.java"
#: Seconds the JVM may take (it initializes a few thousand classes).
TIMEOUT_S = 600


def pyspark_jars() -> Path:
    """The ``jars`` folder of the installed PySpark, found without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed (make setup)")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def generate() -> str:
    """The data file's text for the installed PySpark."""
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java (17) is needed to list Spark's settings")
    jars = pyspark_jars()
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    done = subprocess.run(
        [java, "-cp", f"{jars}{os.sep}*", str(PROGRAM), str(jars)],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT_S,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{PROGRAM.name} failed ({done.returncode}): {done.stderr[-2000:]}")
    keys = sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})
    if not keys:
        raise RuntimeError(f"{PROGRAM.name} listed no settings")
    return header(importlib.metadata.version("pyspark")) + "".join(f"{key}\n" for key in keys)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gic_operator.spark_settings_gen [--check] [--out FILE]``; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m gic_operator.spark_settings_gen",
        description="List the Spark settings the installed PySpark defines.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the file is out of date"
    )
    parser.add_argument("--out", type=Path, default=DATA_FILE, help="the file to write or check")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date; regenerate with: {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
