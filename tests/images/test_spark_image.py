"""The Spark image (``localhost/gic-spark:<version>``, the Dockerfile's ``spark-runtime``
target on the base ``images/build_bases.sh`` builds from packages).

What a Spark pod needs of it: the entrypoint's three modes as Spark's Kubernetes backend
uses them (``driver``, ``executor``, anything else passed through), Spark where
``SPARK_HOME`` says with the pinned version, the GIC runtime importable, and
``examples/rate_count.py`` running to completion as uid 185 on a read-only root file
system, with exact output and the placement helper jar (``GIC_PLACEMENT_JAR``) in use.

Writable paths a Spark container needs with ``--read-only``: ``/tmp`` (Spark's local
directories, PySpark's and py4j's temporary files) and wherever the job's storage and
output are; nothing under ``/opt``. In ``local-cluster`` mode (a test-only master) the
standalone worker also writes its executors' directories to ``$SPARK_HOME/work``.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from tests.e2e.checks import check_output

from gic_runtime.status.record import JobState
from gic_runtime.status.record_file import read_status
from gic_runtime.storage.uri import StoreResolver

from .podman import REPO, image_ref, run

pytestmark = pytest.mark.usefixtures("images")

SPARK = image_ref("spark")
PLACEMENT_JAR = "/opt/gic/gic-placement.jar"
EXAMPLE = "/opt/gic/examples/rate_count.py"
#: What a Spark pod gets from the operator's pod security: uid and gid 185, no new
#: privileges, no capabilities, a read-only root with a scratch /tmp.
RESTRICTED = (
    "--user=185:185",
    "--read-only",
    "--tmpfs=/tmp:rw,mode=1777",
    "--security-opt=no-new-privileges",
    "--cap-drop=ALL",
)
KEYS = 13


def locked_pyspark() -> str:
    for line in (REPO / "requirements" / "run.lock").read_text().splitlines():
        if line.startswith("pyspark=="):
            return line.split("==")[1].split()[0]
    raise AssertionError("no pyspark in the locks")


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def test_other_commands_pass_through_with_their_arguments() -> None:
    result = run(SPARK, "sh", "-c", 'id -u; id -g; pwd; printf "[%s]" "$@"', "sh", "a b", "", "c")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["185", "185", "/opt/spark/work-dir", "[a b][][c]"]


def test_pass_through_keeps_the_exit_status() -> None:
    assert run(SPARK, "sh", "-c", "exit 7").returncode == 7


def test_spark_python_and_the_runtime_are_where_the_image_says() -> None:
    script = (
        "import json, os, pyspark, gic_runtime; from importlib.metadata import version; "
        "print(json.dumps({'pyspark': pyspark.__version__, 'gic': version('gic'), "
        "'home': os.environ['SPARK_HOME'], 'java_home': os.environ['JAVA_HOME'], "
        "'jar': os.environ['GIC_PLACEMENT_JAR'], "
        "'jars': sorted(os.listdir('/opt/spark/jars'))}))"
    )
    result = run(SPARK, "python3", "-c", script)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["pyspark"] == locked_pyspark()
    assert seen["gic"] == project_version()
    assert seen["home"] == "/opt/spark"
    assert seen["jar"] == PLACEMENT_JAR
    assert f"spark-core_2.13-{locked_pyspark()}.jar" in seen["jars"]
    assert f"spark-kubernetes_2.13-{locked_pyspark()}.jar" in seen["jars"]
    java = run(SPARK, f"{seen['java_home']}/bin/java", "-version")
    assert java.returncode == 0 and 'version "17.' in java.stderr, java.stderr
    # No JDK in the Spark image: the runtime cannot build the helper, it must use the jar.
    assert run(SPARK, "sh", "-c", "command -v javac").returncode != 0


def test_driver_mode_runs_spark_submit_in_client_mode() -> None:
    result = run(SPARK, "driver", "--version", env={"SPARK_DRIVER_BIND_ADDRESS": "10.1.2.3"})
    assert result.returncode == 0, result.stderr
    assert re.search(rf"version {re.escape(locked_pyspark())}\b", result.stdout + result.stderr)


def test_driver_mode_passes_the_bind_address() -> None:
    """``spark-submit --verbose`` echoes the configuration it was given."""
    result = run(
        SPARK,
        "driver",
        "--verbose",
        "--master",
        "local[1]",
        "/opt/spark/python/lib/not-there.py",
        env={"SPARK_DRIVER_BIND_ADDRESS": "10.1.2.3"},
        options=RESTRICTED,
    )
    output = result.stdout + result.stderr
    assert "(spark.driver.bindAddress,10.1.2.3)" in output, output[-3000:]
    assert "(spark.executorEnv.SPARK_DRIVER_POD_IP,10.1.2.3)" in output
    assert "deployMode              client" in output


def executor_env(**extra: str) -> dict[str, str]:
    return {
        "SPARK_DRIVER_URL": "not-a-driver-url",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_APPLICATION_ID": "spark-test",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "executor-1",
        **extra,
    }


def test_executor_mode_starts_the_executor_backend() -> None:
    """With the backend's variables, the executor JVM starts and fails on the driver URL
    (there is no driver): the error is Spark's, from the JVM, not the shell's."""
    result = run(SPARK, "executor", env=executor_env(), options=RESTRICTED)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "KubernetesExecutorBackend" in output, output[-3000:]
    assert "Invalid Spark URL" in output and "not-a-driver-url" in output, output[-3000:]
    assert "entrypoint.sh:" not in output


def test_executor_mode_orders_the_java_options_numerically() -> None:
    """``SPARK_JAVA_OPT_10`` comes after ``SPARK_JAVA_OPT_2``: the later -D wins."""
    options = {f"SPARK_JAVA_OPT_{n}": f"-Dgic.opt{n}=set" for n in range(1, 12)}
    options["SPARK_JAVA_OPT_0"] = "-XshowSettings:properties"
    options["SPARK_JAVA_OPT_2"] = "-Dgic.order=two"
    options["SPARK_JAVA_OPT_10"] = "-Dgic.order=ten"
    result = run(SPARK, "executor", env=executor_env(**options), options=RESTRICTED)
    output = result.stdout + result.stderr
    assert re.search(r"^\s*gic\.order = ten$", output, re.M), output[-3000:]
    for n in (1, 3, 9, 11):
        assert re.search(rf"^\s*gic\.opt{n} = set$", output, re.M)
    # the class path: $SPARK_HOME/conf, then every jar of $SPARK_HOME/jars (one per line)
    assert re.search(r"^\s*java\.class\.path = /opt/spark/conf$", output, re.M)
    assert re.search(r"^\s*/opt/spark/jars/spark-core_2\.13-[^/]*\.jar$", output, re.M)


def _world_writable(folder: Path) -> Path:
    """``folder``, made for the image's uid 185 to write in."""
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    return folder


def _submit_rate_count(
    master: str, data: Path, *, batches: int, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` of the rate-count example on ``master`` for ``batches`` batches,
    with a read-only root, its output and storage under ``data`` (mounted at ``/data``)."""
    return run(
        SPARK,
        "spark-submit",
        "--master",
        master,
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.ui.enabled=false",
        EXAMPLE,
        "--output",
        "/data/out",
        "--keys",
        str(KEYS),
        "--rows-per-batch",
        "100",
        "--trigger",
        "200 milliseconds",
        options=(*RESTRICTED, *options, f"--volume={data}:/data:rw"),
        env={"GIC_STORAGE": "file:///data/storage", "GIC_MAX_BATCHES": str(batches)},
        timeout=600,
    )


def test_rate_count_runs_on_a_read_only_root(tmp_path: Path) -> None:
    """The job the operator's tests run, in local mode, as uid 185 with a read-only root:
    three batches, exact counts, a clean stop, and the placement jar the one found."""
    data = _world_writable(tmp_path / "data")
    result = _submit_rate_count("local[2]", data, batches=3)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    assert re.search(r"rate-count: 3 batch\(es\), last checkpoint \d+", result.stdout), output[
        -3000:
    ]
    report = check_output(StoreResolver(), f"file://{data}/out", keys=KEYS)
    assert report.problems == ()
    assert report.batches == (0, 1, 2)
    status = read_status(StoreResolver(), f"file://{data}/storage", "rate-count")
    assert status is not None and status.state == JobState.STOPPED
    assert status.last_checkpoint is not None and status.last_checkpoint.executors == 0
    # what `make jvm` runs: the jar the runtime uses (GIC_PLACEMENT_JAR; javac is absent)
    entry = "from gic_runtime.spark.locality import main; raise SystemExit(main())"
    found = run(SPARK, "python3", "-c", entry, options=RESTRICTED)
    assert found.returncode == 0 and found.stdout.strip() == PLACEMENT_JAR, found.stderr


def test_placement_helper_pins_state_tasks_on_executors(tmp_path: Path) -> None:
    """On a master with a separate executor JVM (``local-cluster[1,1,1024]``), the driver
    loads the placement helper from ``GIC_PLACEMENT_JAR`` (no JDK here to build one) and
    ships it to the executor; the status record counts the live executor."""
    data = _world_writable(tmp_path / "data")
    work = "--tmpfs=/opt/spark/work:rw,mode=1777"
    result = _submit_rate_count("local-cluster[1,1,1024]", data, batches=2, options=(work,))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    # the driver found the helper's class only in the jar, loaded it and shipped it
    assert re.search(rf"Added JAR {re.escape(PLACEMENT_JAR)} at spark://", output), output[-5000:]
    assert "run unpinned" not in output
    report = check_output(StoreResolver(), f"file://{data}/out", keys=KEYS)
    assert report.problems == ()
    status = read_status(StoreResolver(), f"file://{data}/storage", "rate-count")
    assert status is not None and status.last_checkpoint is not None
    assert status.last_checkpoint.executors == 1, status
    assert status.state == JobState.STOPPED
