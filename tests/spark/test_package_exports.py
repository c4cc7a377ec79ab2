"""``gic_runtime.spark`` loads its exports on first use, so that a Python worker that
imports :mod:`gic_runtime.spark.stage` for a state task does not load the driver's side
(the job API, ``pyspark.sql``'s session machinery through it, pandas)."""

from __future__ import annotations

import importlib
import json

import pytest
from tests.support.processes import fresh_python

import gic_runtime.spark as package


def _fresh(code: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter; it prints a JSON object."""
    loaded: dict[str, bool] = json.loads(fresh_python(code))
    return loaded


DRIVER_SIDE = ("pandas", "gic_runtime.spark.job", "gic_runtime.spark.driver")


def test_a_worker_importing_the_stage_loads_none_of_the_driver_side() -> None:
    loaded = _fresh(
        "import json, sys\n"
        "import gic_runtime.spark.stage\n"
        f"print(json.dumps({{m: m in sys.modules for m in {DRIVER_SIDE!r}}}))\n"
    )
    assert loaded == dict.fromkeys(DRIVER_SIDE, False)


def test_the_first_use_of_an_export_loads_its_module() -> None:
    loaded = _fresh(
        "import json, sys\n"
        "from gic_runtime.spark import GICJob\n"
        "print(json.dumps({'job': 'gic_runtime.spark.job' in sys.modules,"
        " 'named': GICJob.__name__ == 'GICJob'}))\n"
    )
    assert loaded == {"job": True, "named": True}


@pytest.mark.parametrize("name", package.__all__)
def test_every_export_is_the_object_its_module_defines(name: str) -> None:
    home = importlib.import_module(package._HOMES[name])
    assert getattr(package, name) is getattr(home, name)


def test_the_exports_and_their_homes_name_the_same_things() -> None:
    assert sorted(package.__all__) == sorted(package._HOMES)
    assert set(package.__all__) <= set(dir(package))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        package.NoSuchThing  # noqa: B018
