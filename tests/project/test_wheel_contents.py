"""The wheel, and with it every image, holds the two packages and no test harness.

The wheel is built the way the Dockerfile's ``wheel`` stage builds it: from a copy of
``pyproject.toml``, ``README.md``, ``runtime/`` and ``operator/`` with ``pip wheel --no-deps
--no-build-isolation``, offline. The harness (the SeaweedFS launcher and the fault proxy)
lives in ``tests/support/``; only the small fakes at the seams ship.

An interpreter whose setuptools cannot build wheels (older than 70.1 without the ``wheel``
package) runs setuptools' ``build_py`` on the same copy instead: the step of the wheel
build that selects the modules and package data, so the file set is the wheel's without
its ``.dist-info``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("gic_runtime", "gic_operator")
SOURCES = {"runtime": "gic_runtime", "operator": "gic_operator"}
"""Source folder of each package (``[tool.setuptools.packages.find]``)."""

SEAM_FAKES = frozenset(
    {
        "gic_runtime/testing/__init__.py",
        "gic_runtime/testing/time_and_threads.py",
        "gic_runtime/testing/changelog_fakes.py",
        "gic_runtime/testing/faulty_store.py",
        "gic_operator/testing/__init__.py",
        "gic_operator/testing/fake_kube.py",
    }
)
"""The only test support that ships: small fakes at the product's seams."""

HARNESS_MODULES = ("testing_s3server", "testing_proxy")
"""The harness modules of ``tests/support``."""

HARNESS_NAME = re.compile(
    r"^(test_.*|.*_test|conftest|.*s3server.*|.*seaweed.*|.*fault_proxy.*|testing_proxy)$"
)
HARNESS_FOLDERS = frozenset({"tests", "support", "controlplane", "e2e", "bench"})


def _can_build_wheels() -> bool:
    if importlib.util.find_spec("wheel") is not None:
        return True
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (70, 1)  # setuptools' own bdist_wheel


def _copy_sources(dest: Path) -> Path:
    """What the Dockerfile's wheel stage copies, without caches and build leftovers."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for folder in SOURCES:
        shutil.copytree(REPO / folder, dest / folder, ignore=ignore)
    return dest


def _run(argv: list[str], cwd: Path) -> None:
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_NO_INPUT": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_sources(tmp_path_factory.mktemp("wheel-src"))


def _packaged_files(src: Path, out: Path) -> frozenset[str]:
    """Paths (``gic_runtime/x.py``, ``gic-0.1.0.dist-info/RECORD``...) of every file that
    building ``src`` into ``out`` packages."""
    if _can_build_wheels():
        pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        _run([*pip, "--quiet", "--wheel-dir", str(out), "."], cwd=src)
        (wheel,) = out.glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            return frozenset(n for n in archive.namelist() if not n.endswith("/"))
    setup = "from setuptools import setup; setup()"
    _run([sys.executable, "-c", setup, "build_py", "--build-lib", str(out)], cwd=src)
    return frozenset(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def packaged(source_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    return _packaged_files(source_copy, tmp_path_factory.mktemp("wheel-out"))


def _modules(packaged: frozenset[str]) -> set[str]:
    return {name for name in packaged if name.endswith((".py", ".pyi", ".so", ".pyd"))}


def test_the_harness_lives_outside_the_packages() -> None:
    for module in HARNESS_MODULES:
        assert (REPO / "tests" / "support" / f"{module}.py").is_file()
        for package in PACKAGES:
            assert importlib.util.find_spec(f"{package}.{module}") is None


def test_every_file_is_in_one_of_the_two_packages(packaged: frozenset[str]) -> None:
    tops = {PurePosixPath(name).parts[0] for name in packaged}
    assert {top for top in tops if not top.endswith(".dist-info")} == set(PACKAGES)
    assert len([top for top in tops if top.endswith(".dist-info")]) <= 1


def test_no_harness_module_ships(packaged: frozenset[str]) -> None:
    harness = sorted(
        name
        for name in _modules(packaged)
        if HARNESS_NAME.match(PurePosixPath(name).name.split(".")[0])
        or HARNESS_FOLDERS & set(PurePosixPath(name).parts[1:-1])
    )
    assert harness == []


def test_only_the_seam_fakes_ship_as_test_support(packaged: frozenset[str]) -> None:
    support = {
        name
        for name in _modules(packaged)
        if any(part.startswith(("testing", "fake")) for part in PurePosixPath(name).parts)
    }
    assert support == SEAM_FAKES


def test_every_module_of_the_packages_ships(source_copy: Path, packaged: frozenset[str]) -> None:
    # The checks above are not vacuous: the packaged modules are exactly the sources'.
    sources = {
        path.relative_to(source_copy / folder).as_posix()
        for folder, package in SOURCES.items()
        for path in (source_copy / folder / package).rglob("*.py")
    }
    assert _modules(packaged) == sources
    for package in PACKAGES:
        assert f"{package}/py.typed" in packaged
    # the operator's list of Spark settings (it never imports pyspark to check sparkConf)
    assert "gic_operator/spark_settings.txt" in packaged
