"""What ``kubectl logs`` of a driver pod shows: GIC's line per batch (the lines ``gic run``
prints), Spark at WARN, no progress JSON.

The driver runs here exactly as in its pod: the command and ``GIC_*`` variables the operator
builds for a GICJob (:func:`gic_operator.launch.launch_config.driver_command`, ``settings_env``),
``spark-submit`` of ``examples/word_count.py`` under the entry process, with stdout and
stderr in one stream as the kubelet keeps them. Only the master (``local[1]`` from the
GICJob's ``sparkConf`` instead of executor pods), the local directory and the metrics port
(any free one: processes here share one network) differ.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gic_operator.launch import launch_config
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec

from .words import write_text_batches

REPO = Path(__file__).resolve().parents[2]
FILES = 3


def driver_log(tmp_path: Path, spark_conf: dict[str, str]) -> str:
    """The log of one driver run of word_count over :data:`FILES` files."""
    write_text_batches(tmp_path / "in", FILES)
    spec = GICJobSpec.model_validate(
        {
            "application": {
                "image": "gic:1",
                "mainFile": str(REPO / "examples" / "word_count.py"),
                "arguments": ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")],
                "sparkConf": {
                    "spark.master": "local[1]",
                    "spark.sql.shuffle.partitions": "2",
                    "spark.ui.enabled": "false",
                    **spark_conf,
                },
            },
            "checkpointing": {"storage": (tmp_path / "storage").as_uri()},
        }
    )
    plan = LaunchPlan("team", "wc", "uid-1", spec, job_id="team.wc", epoch=1)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIC_")},
        **launch_config.settings_env(plan),
        "GIC_LOCAL_DIR": str(tmp_path / "local"),
        "GIC_METRICS_PORT": "0",  # a pod has its own network; here any free port
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    done = subprocess.run(
        launch_config.driver_command(plan),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    return done.stdout


@pytest.mark.slow
def test_a_driver_log_shows_one_line_per_batch_and_spark_at_warn(tmp_path: Path) -> None:
    log = driver_log(tmp_path, {})
    lines = log.splitlines()

    assert any(re.fullmatch(r"job team\.wc started \(epoch 1\): .*", line) for line in lines)
    batches = [line for line in lines if re.match(r"batch \d+: \d+ rows in, checkpoint", line)]
    assert [line.split(":")[0] for line in batches] == [f"batch {i}" for i in range(FILES)]
    assert any(re.match(rf"job team\.wc stopped after {FILES} batch\(es\)", line) for line in lines)
    # Spark's INFO lines stop once its context applies the level (its version banner is
    # logged before that); no micro-batch progress dumped as JSON.
    chatter = [line for line in lines if " INFO " in line and " SparkContext: " not in line]
    assert chatter == []
    assert "made progress" not in log and '"batchId"' not in log


@pytest.mark.slow
def test_spark_s_log_level_is_the_job_s_choice(tmp_path: Path) -> None:
    log = driver_log(tmp_path, {"spark.log.level": "INFO"})
    assert re.search(r" INFO \w+: ", log.split("Setting Spark log level")[-1])
    assert re.search(r"^batch 0: ", log, re.MULTILINE)
