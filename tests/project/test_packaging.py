"""Packaging rules that keep the layout honest."""

from __future__ import annotations

import operator
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_operator_folder_never_shadows_the_standard_operator_module() -> None:
    # Run from the repository root, where a folder named operator/ exists.
    out = subprocess.run(
        [sys.executable, "-c", "import operator, sys; print(operator.__file__)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert "gic_operator" not in out.stdout
    assert Path(out.stdout.strip()).name == "operator.py"
    assert not (REPO / "operator" / "__init__.py").exists()
    assert callable(operator.itemgetter)


def test_runtime_core_does_not_load_pyspark_or_kubernetes() -> None:
    code = (
        "import sys, gic_runtime.storage, gic_runtime.formats, gic_runtime.layout, "
        "gic_runtime.handles;"
        "bad = [m for m in ('pyspark', 'kopf', 'kubernetes') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
