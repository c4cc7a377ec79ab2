"""Running the GIC images with podman, as ``images/podman.sh`` configures it (runc,
the calling shell's limits), for the image tests.

:func:`image_ref` names an image ``make images`` builds (``localhost/gic-<name>:<version>``);
:func:`missing_images` says which of them are not in podman's storage; :func:`run` runs a
container to completion (always removed, ``--rm``); :class:`Container` runs one in the
background and removes it (``podman rm -f``) on exit.

Thread-safety: plain subprocess calls; a :class:`Container` is used from one thread.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
import uuid
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PODMAN = REPO / "images" / "podman.sh"


def version() -> str:
    """The project's version, the images' tag."""
    with open(REPO / "pyproject.toml", "rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def image_ref(name: str) -> str:
    """``localhost/gic-<name>:<version>`` (``spark`` or ``operator``)."""
    return f"localhost/gic-{name}:{version()}"


def podman(
    *args: str, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``podman ARGS`` through ``images/podman.sh``."""
    result = subprocess.run(
        [str(PODMAN), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}"
        )
    return result


def missing_images() -> list[str]:
    """The images ``make images`` builds that podman does not have (all when podman is
    not installed)."""
    refs = [image_ref("spark"), image_ref("operator")]
    if shutil.which("podman") is None:
        return refs
    return [ref for ref in refs if podman("image", "exists", ref, check=False).returncode != 0]


def run(
    image: str,
    *command: str,
    options: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (the image's entrypoint gets it as arguments) in a new container,
    removed afterwards; the result whatever the exit status."""
    env_args = [arg for name, value in (env or {}).items() for arg in ("--env", f"{name}={value}")]
    return podman("run", "--rm", *options, *env_args, image, *command, timeout=timeout, check=False)


class Container:
    """A container running in the background (``podman run -d``), removed on exit."""

    def __init__(self, image: str, *command: str, options: Sequence[str] = ()) -> None:
        self.name = f"gic-test-{uuid.uuid4().hex[:10]}"
        self.image = image
        self.command = command
        self.options = list(options)

    def __enter__(self) -> Container:
        podman("run", "-d", "--name", self.name, *self.options, self.image, *self.command)
        return self

    def __exit__(self, *exc: object) -> None:
        podman("rm", "-f", "-t", "0", self.name, check=False)

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name, check=False)
        return state.stdout.strip() == "true"

    def logs(self) -> str:
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr
