"""Install a pinned Go toolchain from the Go module proxy, for machines without Go.

The module proxy serves every Go release as the module ``golang.org/toolchain`` (this is
how ``GOTOOLCHAIN=auto`` fetches one). This script downloads
``golang.org/toolchain@v0.0.1-<version>.<os>-<arch>.zip``, checks its SHA-256 against the
digest pinned below, and unpacks it (keeping the executable bits) to
``<dest>/<version>``, whose ``bin/go`` it prints. An existing install is reused.

Standard library only: it runs with the system Python before any virtualenv exists.

Usage: ``python3 install_go.py <dest>`` (``GOPROXY``'s first URL is used when it is set).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

VERSION = "go1.26.8"
SHA256 = {
    "linux-amd64": "30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7",
    "linux-arm64": "02b36b6787b3ac767668f630e2998df45a3b1f9ffee08d1bf3ef6487cd658d99",
}
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def _platform() -> str:
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    return f"{system}-{arch}"


def _proxy() -> str:
    for entry in os.environ.get("GOPROXY", "").replace("|", ",").split(","):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    return "https://proxy.golang.org"


def install(dest: Path) -> Path:
    """Install (or reuse) the toolchain under ``dest``; return the path of its ``go``."""
    target = dest / VERSION
    go = target / "bin" / "go"
    if go.is_file() and os.access(go, os.X_OK):
        return go
    plat = _platform()
    if plat not in SHA256:
        raise SystemExit(f"install_go: no pinned {VERSION} toolchain for {plat}; install Go")
    module_version = f"v0.0.1-{VERSION}.{plat}"
    url = f"{_proxy()}/golang.org/toolchain/@v/{module_version}.zip"
    dest.mkdir(parents=True, exist_ok=True)
    print(f"install_go: downloading {url}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=dest) as scratch:
        archive = Path(scratch) / "toolchain.zip"
        digest = hashlib.sha256()
        with urllib.request.urlopen(url, timeout=60) as response, archive.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != SHA256[plat]:
            raise SystemExit(
                f"install_go: {url} has SHA-256 {digest.hexdigest()}, expected {SHA256[plat]}"
            )
        prefix = f"golang.org/toolchain@{module_version}/"
        unpacked = Path(scratch) / "go"
        with zipfile.ZipFile(archive) as zipped:
            for info in zipped.infolist():
                if not info.filename.startswith(prefix) or info.is_dir():
                    continue
                relative = info.filename[len(prefix) :]
                if relative.startswith("/") or ".." in Path(relative).parts:
                    raise SystemExit(f"install_go: unsafe path in archive: {info.filename}")
                path = unpacked / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(info) as src, path.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                mode = (info.external_attr >> 16) & 0o777
                path.chmod(mode if mode else 0o644)
        if target.exists():
            shutil.rmtree(target)
        unpacked.rename(target)
    return go


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(install(Path(argv[1]).resolve()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
