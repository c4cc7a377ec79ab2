"""An HTTP reverse proxy on loopback that relays every request to an upstream S3 server.

:class:`HttpRelay` listens on 127.0.0.1 (a free port) and forwards each request byte for
byte, keeping the client's ``Host`` header so SigV4 signatures stay valid; hop-by-hop
headers are not relayed, and ``Content-Length`` is set anew. A client that sends
``Expect: 100-continue`` gets its ``100 Continue`` at once from the relay (the standard
library's handler answers it), as from a nearby endpoint. Subclasses decide what happens
to a request between its arrival and its answer by overriding :meth:`HttpRelay.handle`:
the benchmarks' latency proxy (:mod:`bench.streaming.latency_proxy`) holds every request
a set time, the tests' fault proxy (:mod:`tests.support.testing_proxy`) fails chosen ones.

Where it lives: the benchmarks must not import from ``tests/``, so the relay cannot live
there; ``gic_runtime.testing`` ships in the wheel, which holds only the small fakes at the
product's seams and no server harness (``tests/project/test_wheel_contents.py``). The
tests may import from ``bench/``, which never ships, so the relay sits here, on the layer
below both of its users, and imports only the standard library.

Thread-safety: one thread per client connection; :meth:`HttpRelay.stop` may be called
from any thread and cuts open connections and :meth:`HttpRelay.stopping` waits short.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

HOP_BY_HOP = frozenset(
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
"""Headers that belong to one connection, never relayed (``Content-Length`` is set anew)."""

Answer = tuple[int, str, list[tuple[str, str]], bytes]
"""An upstream's answer: status, reason, headers, body."""


class HttpRelay:
    """Reverse proxy to ``upstream_url`` (``http://host:port``). Use as a context manager,
    or :meth:`start` / :meth:`stop`. Subclasses set the class attributes and override
    :meth:`handle`; the default relays every request unchanged."""

    error: ClassVar[type[Exception]] = ValueError
    """Raised for a bad argument."""
    not_started_error: ClassVar[type[Exception]] = RuntimeError
    """Raised by :attr:`endpoint_url` before :meth:`start`."""
    thread_name: ClassVar[str] = "http-relay"
    timeout_s: ClassVar[float] = 120.0
    """An idle client connection, and a silent upstream, are given up after this."""
    request_queue_size: ClassVar[int] = 5
    """Connections waiting to be accepted (``listen`` backlog)."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            raise self.error(f"upstream must be an http://host:port URL, got {upstream_url!r}")
        self.upstream = (parts.hostname, parts.port or 80)
        self.stopping = threading.Event()
        """Set by :meth:`stop`: delays wait on it and end early."""
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT``, to give clients instead of the upstream's URL."""
        if self._server is None:
            name = type(self).__name__
            raise self.not_started_error(f"{name} is not started; call start() first")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        """Start serving on a free loopback port; returns ``self``."""
        if self._server is None:
            self.stopping.clear()
            self._server = _Server(("127.0.0.1", 0), self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=self.thread_name,
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut open connections and delays, join every thread."""
        server, self._server = self._server, None
        if server is None:
            return
        self.stopping.set()
        server.shutdown()
        server.close_all_connections()
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def handle(self, request: RelayHandler, body: bytes) -> None:
        """Answer one request whose headers and ``body`` have arrived (on its connection's
        thread). The default forwards it and relays the answer."""
        request.relay(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], relay: HttpRelay) -> None:
        self.relay = relay
        self.request_queue_size = relay.request_queue_size
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, RelayHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Connections cut by clients or by :meth:`HttpRelay.stop` are expected; anything
        else is reported as usual."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            if add:
                self._conns.add(conn)
                if self.relay.stopping.is_set():  # accepted while stopping
                    shutdown(conn)
            else:
                self._conns.discard(conn)

    def close_all_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            shutdown(conn)


class RelayHandler(BaseHTTPRequestHandler):
    """One client connection of an :class:`HttpRelay`, kept alive across requests, with
    its own kept-alive connection to the upstream."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.relay.timeout_s)  # an idle one is closed
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
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        self.server.relay.handle(self, self._read_body())

    def _read_body(self) -> bytes:
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

    def relay(self, body: bytes) -> None:
        """Forward the request and relay the answer; close the connection without an answer
        when the upstream cannot be reached (as a dead server would)."""
        answer = self.forward(body)
        if answer is None:
            self.drop()
        else:
            self.answer(answer)

    def forward(self, body: bytes) -> Answer | None:
        """Send the request to the upstream; its answer, or ``None`` when it failed."""
        for _attempt in range(2):  # a kept-alive upstream connection may have gone stale
            if self._upstream is None:
                host, port = self.server.relay.upstream
                self._upstream = http.client.HTTPConnection(
                    host, port, timeout=self.server.relay.timeout_s
                )
            conn = self._upstream
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for name, value in self.headers.items():
                    if name.lower() not in HOP_BY_HOP:
                        conn.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                return resp.status, resp.reason, resp.getheaders(), resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self._upstream = None
        return None

    def answer(self, answer: Answer) -> None:
        """Send the upstream's answer to the client (a client that gave up is let go)."""
        status, reason, headers, payload = answer
        try:
            self.send_response_only(status, reason)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP:
                    self.send_header(name, value)
            if self.command == "HEAD":
                length = next((v for n, v in headers if n.lower() == "content-length"), "0")
                self.send_header("Content-Length", length)
            else:
                self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:  # the client gave up (timeout) and closed its end
            self.close_connection = True

    def drop(self) -> None:
        """Close the connection without an answer."""
        self.close_connection = True
        shutdown(self.connection)


def shutdown(conn: socket.socket) -> None:
    """Shut both directions of ``conn`` (already closed by the peer: nothing to do)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
