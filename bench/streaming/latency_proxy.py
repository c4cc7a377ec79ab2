"""Request latency in front of an S3 server on loopback, as a remote object store has it.

SeaweedFS on loopback answers a request in well under a millisecond; S3 takes tens of
milliseconds per request (time to first byte). :class:`LatencyProxy` is an HTTP reverse
proxy on 127.0.0.1 that holds every request ``latency_s`` once its headers and body have
arrived, then forwards it to the upstream byte for byte (the client's ``Host`` header is
kept, so SigV4 signatures stay valid) and relays the answer. Every request pays the
latency once: a client that sends ``Expect: 100-continue`` gets its ``100 Continue`` at
once, as from a nearby endpoint, and the latency after its body.

:func:`measure_added_latency` times HEAD and GET requests of one small object directly
and through the proxy; the difference of the medians is the latency the benchmark
actually added (recorded beside the configured one).

Thread-safety: one thread per client connection; :meth:`LatencyProxy.stop` may be called
from any thread and cuts delays short.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import socket
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from bench.streaming.records import BenchmarkError

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "content-length",
    }
)
UPSTREAM_TIMEOUT_S = 300.0


class LatencyProxy:
    """Reverse proxy to ``upstream_url`` (``http://host:port``) adding ``latency_s`` to
    every request. Use as a context manager, or :meth:`start` / :meth:`stop`."""

    def __init__(self, upstream_url: str, latency_s: float) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            raise BenchmarkError(f"upstream must be an http://host:port URL, got {upstream_url!r}")
        if latency_s < 0:
            raise BenchmarkError(f"latency must be >= 0 s, got {latency_s}")
        self.upstream = (parts.hostname, parts.port or 80)
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``, to give clients instead of the upstream's URL."""
        if self._server is None:
            raise BenchmarkError("the latency proxy is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> LatencyProxy:
        if self._server is None:
            self._stopping.clear()
            self._server = _Server(("127.0.0.1", 0), _Handler, self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="latency-proxy",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut open connections and delays, join every thread."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_all_connections()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def requests_by_method(self) -> dict[str, int]:
        """Requests forwarded so far, per HTTP method."""
        with self._lock:
            return dict(self._requests)

    def _count(self, method: str) -> None:
        with self._lock:
            self._requests[method] = self._requests.get(method, 0) + 1


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], proxy: LatencyProxy
    ) -> None:
        self.proxy = proxy
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client or stop() cut the connection
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            if add:
                self._conns.add(conn)
                if self.proxy._stopping.is_set():
                    _shutdown(conn)
            else:
                self._conns.discard(conn)

    def close_all_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            _shutdown(conn)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    timeout = 300
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)
        self._upstream: http.client.HTTPConnection | None = None

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)
            if self._upstream is not None:
                self._upstream.close()

    def log_message(self, format: str, *args: object) -> None:
        """No per-request log lines."""

    def do_GET(self) -> None:
        self._relay()

    def do_HEAD(self) -> None:
        self._relay()

    def do_PUT(self) -> None:
        self._relay()

    def do_POST(self) -> None:
        self._relay()

    def do_DELETE(self) -> None:
        self._relay()

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _relay(self) -> None:
        proxy = self.server.proxy
        body = self._body()
        proxy._count(self.command)
        if proxy.latency_s > 0 and proxy._stopping.wait(proxy.latency_s):
            self._drop()
            return
        try:
            status, reason, headers, payload = self._forward(body)
        except (OSError, http.client.HTTPException):
            self._drop()
            return
        try:
            self.send_response_only(status, reason)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP:
                    self.send_header(name, value)
            if self.command == "HEAD":
                length = next((v for n, v in headers if n.lower() == "content-length"), "0")
                self.send_header("Content-Length", length)
            else:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:
            self.close_connection = True

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        for attempt in range(2):  # a kept-alive upstream connection may have gone stale
            if self._upstream is None:
                host, port = self.server.proxy.upstream
                self._upstream = http.client.HTTPConnection(host, port, timeout=UPSTREAM_TIMEOUT_S)
            conn = self._upstream
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in _HOP_BY_HOP:
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                return resp.status, resp.reason, resp.getheaders(), resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._upstream = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _drop(self) -> None:
        self.close_connection = True
        _shutdown(self.connection)


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)


# --- measuring what it adds ------------------------------------------------------------


def _timed_ms(fn: Any, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        began = time.perf_counter()
        fn()
        out.append((time.perf_counter() - began) * 1000)
    return out


def measure_added_latency(
    direct_url: str, proxied_url: str, bucket: str, *, samples: int = 20
) -> dict[str, Any]:
    """Median HEAD and GET times of one small object, directly and through the proxy,
    and the differences (ms): the latency a request actually gained. Uses the S3
    credentials of the environment; writes and deletes one object in ``bucket``."""
    from gic_runtime.storage.s3 import create_s3_client
    from gic_runtime.storage.s3_settings import S3Settings

    key = "latency-probe/object"
    base = S3Settings.from_env()
    direct = create_s3_client(dataclasses.replace(base, endpoint_url=direct_url))
    proxied = create_s3_client(dataclasses.replace(base, endpoint_url=proxied_url))
    try:
        direct.put_object(Bucket=bucket, Key=key, Body=b"x" * 1024)
        out: dict[str, Any] = {"samples": samples, "object_bytes": 1024}
        added, added_min = [], []
        for op in ("head", "get"):
            times, fastest = {}, {}
            for name, client in (("direct", direct), ("proxied", proxied)):
                if op == "head":

                    def call(c: Any = client) -> None:
                        c.head_object(Bucket=bucket, Key=key)
                else:

                    def call(c: Any = client) -> None:
                        c.get_object(Bucket=bucket, Key=key)["Body"].read()

                call()  # a connection in the pool first
                measured = _timed_ms(call, samples)
                times[name], fastest[name] = statistics.median(measured), min(measured)
            out[f"{op}_ms_direct_p50"] = round(times["direct"], 3)
            out[f"{op}_ms_proxied_p50"] = round(times["proxied"], 3)
            added.append(times["proxied"] - times["direct"])
            added_min.append(fastest["proxied"] - fastest["direct"])
        out["added_ms_p50"] = round(statistics.fmean(added), 3)
        out["added_ms_min"] = round(statistics.fmean(added_min), 3)
        out["how"] = (
            "added_ms_p50: mean over HEAD and GET of the median time through the proxy minus "
            "the median time direct; added_ms_min: the same with the fastest of each"
        )
        direct.delete_object(Bucket=bucket, Key=key)
        return out
    finally:
        direct.close()
        proxied.close()
