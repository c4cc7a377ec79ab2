"""Small OCI image archives made on this machine, for a container runtime's image store
without a registry (``ctr images import``, ``podman load``).

:func:`oci_archive` writes an OCI image layout as one tar (``oci-layout``, ``index.json``,
``blobs/sha256/...``) holding one image: a single uncompressed layer made from the given
files, and a config with the entrypoint, arguments, environment and user. The index
names the image twice, as containerd's importer and as the OCI layout read it
(``io.containerd.image.name`` with the full reference, ``org.opencontainers.image.ref.name``
with the tag). Every timestamp is 0, so the same inputs give the same digests.

:func:`host_programs` gives the files of an image that runs some of this machine's own
programs (``/bin/sh``, ``echo`` ...): each program with every shared library ``ldd``
lists for it, at the same paths, so they run in the container as they do here.

Thread-safety: pure functions over files.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import re
import shutil
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Source of one file in an image: the bytes, or a file of this machine to copy.
Content = bytes | Path

_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class ImageFile:
    """A file of a layer: its content and mode."""

    content: Content
    mode: int = 0o755


def architecture() -> str:
    """This machine's architecture as OCI names it (``amd64``, ``arm64``)."""
    machine = platform.machine()
    return _ARCH.get(machine, machine)


def _layer(files: Mapping[str, ImageFile]) -> bytes:
    """An uncompressed layer tar with ``files`` (absolute paths) and their parent dirs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.strip("/").split("/")
            for depth in range(1, len(parts)):
                directory = "/".join(parts[:depth])
                if directory not in dirs:
                    dirs.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            entry = files[path]
            data = entry.content if isinstance(entry.content, bytes) else entry.content.read_bytes()
            info = tarfile.TarInfo("/".join(parts))
            info.size, info.mode, info.mtime = len(data), entry.mode, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def oci_archive(
    path: Path,
    reference: str,
    files: Mapping[str, ImageFile],
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Sequence[str] = ("PATH=/usr/local/bin:/usr/bin:/bin",),
    user: str = "",
) -> Path:
    """Write image ``reference`` (``localhost/name:tag``) as an OCI archive at ``path``."""
    blobs: dict[str, bytes] = {}
    layer = _layer(files)
    layer_digest = _blob(blobs, layer)
    config: dict[str, object] = {
        "architecture": architecture(),
        "os": "linux",
        "config": {
            "Env": list(env),
            **({"Entrypoint": list(entrypoint)} if entrypoint else {}),
            **({"Cmd": list(cmd)} if cmd else {}),
            **({"User": user} if user else {}),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _blob(blobs, config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": _blob(blobs, manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": architecture(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": reference,
                    "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
        **{f"blobs/sha256/{d.split(':', 1)[1]}": data for d, data in sorted(blobs.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return path


_LDD_PATH = re.compile(r"(/\S+)")


def host_programs(programs: Sequence[str]) -> dict[str, ImageFile]:
    """The files of an image running ``programs`` of this machine (names on ``PATH`` or
    paths): each at ``/bin/<name>``, with every library ``ldd`` lists at its path."""
    files: dict[str, ImageFile] = {}
    for program in programs:
        found = shutil.which(program)
        if found is None:
            raise FileNotFoundError(f"{program} is not on PATH")
        real = Path(found).resolve()
        files[f"/bin/{Path(program).name}"] = ImageFile(real)
        listed = subprocess.run(
            ["ldd", str(real)], capture_output=True, text=True, check=False, timeout=30
        ).stdout
        for line in listed.splitlines():
            match = _LDD_PATH.search(line.split("=>")[-1])
            if match:
                library = Path(match.group(1))
                files[str(library)] = ImageFile(library.resolve())
    return files
