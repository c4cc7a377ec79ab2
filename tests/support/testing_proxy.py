"""A fault-injecting HTTP reverse proxy for tests and benchmarks of S3 clients.

:class:`TestingFaultProxy` listens on 127.0.0.1 (a free port) and forwards every request
to an upstream S3 endpoint, byte for byte, keeping the client's ``Host`` header so SigV4
signatures stay valid. Rules added at runtime make it misbehave for matching requests:

* ``slowdown``: answer ``503 SlowDown`` with an S3 XML error body (request not forwarded);
* ``delay``: wait N seconds, before forwarding or after the upstream answered;
* ``drop``: close the connection without a response, before forwarding (the server never
  sees the request) or after the upstream answered (the request took effect, the client
  does not learn it).

A rule fires for the next ``count`` matching requests (``None``: without limit), each
time with ``probability``, optionally only for one HTTP method and/or for paths
containing a substring. Rules are tried in the order they were added; the first that
fires decides. Counters record the requests seen and the faults injected.

Thread-safety: all methods may be called from any thread while requests are in flight.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import random
import socket
import sys
import threading
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import urlsplit

from .processes import Service, require_started

FaultKind = Literal["slowdown", "delay", "drop"]

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


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One fault: what to do (``kind``), to which requests, how often."""

    kind: FaultKind
    method: str | None = None
    """Only requests with this HTTP method (``PUT``, ``GET``...); ``None`` for all."""
    path_contains: str | None = None
    """Only requests whose path (with query) contains this; ``None`` for all."""
    probability: float = 1.0
    """Chance that a matching request gets the fault."""
    count: int | None = None
    """How many requests get the fault at most; ``None`` for no limit."""
    delay_s: float = 0.0
    """Seconds to wait, for ``delay`` rules."""
    after_upstream: bool = False
    """For ``delay`` and ``drop``: act once the upstream has answered."""


class TestingFaultProxy(Service):
    """Reverse proxy in front of ``upstream_url`` (``http://host:port``) with fault rules.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``seed`` makes the
    probability draws reproducible.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, upstream_url: str, *, seed: int | None = None) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream must be an http://host:port URL, got {upstream_url!r}")
        self._upstream = (parts.hostname, parts.port or 80)
        self._lock = threading.Lock()
        self._rules: list[_ActiveRule] = []
        self._random = random.Random(seed)
        self._seen: dict[str, int] = {}
        self._injected: dict[str, int] = {}
        self._request_ids = itertools.count(1)
        self._seen_changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` to give clients instead of the upstream URL."""
        server = require_started(
            self._server, RuntimeError, "TestingFaultProxy is not started; call start() first"
        )
        return f"http://127.0.0.1:{server.server_address[1]}"

    def start(self) -> TestingFaultProxy:
        """Start serving on a free loopback port; returns ``self``."""
        if self._server is None:
            self._stopping.clear()
            self._server = _Server(("127.0.0.1", 0), _Handler, self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},
                name="testing-fault-proxy",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting, cut open connections, cancel delays, and join all threads."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.close_all_connections()
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # --- rules -------------------------------------------------------------------------

    def add_rule(self, rule: FaultRule) -> None:
        """Add a rule after the existing ones."""
        if not 0.0 <= rule.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {rule.probability}")
        if rule.method is not None:
            rule = replace(rule, method=rule.method.upper())
        with self._lock:
            self._rules.append(_ActiveRule(rule, rule.count))

    def slowdown(
        self,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
    ) -> None:
        """Answer matching requests with ``503 SlowDown``."""
        self.add_rule(FaultRule("slowdown", method, path_contains, probability, count))

    def delay(
        self,
        seconds: float,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
        after_upstream: bool = False,
    ) -> None:
        """Hold matching requests for ``seconds`` (before forwarding, or before answering
        when ``after_upstream``)."""
        self.add_rule(
            FaultRule("delay", method, path_contains, probability, count, seconds, after_upstream)
        )

    def drop(
        self,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
        after_upstream: bool = False,
    ) -> None:
        """Close matching requests' connections without an answer."""
        self.add_rule(
            FaultRule("drop", method, path_contains, probability, count, 0.0, after_upstream)
        )

    def clear(self) -> None:
        """Remove every rule; requests pass through unchanged again."""
        with self._lock:
            self._rules.clear()

    # --- counters ----------------------------------------------------------------------

    @property
    def requests_seen(self) -> int:
        """Requests received so far (faulted or not)."""
        with self._lock:
            return sum(self._seen.values())

    def requests_by_method(self) -> dict[str, int]:
        """Requests received so far per HTTP method."""
        with self._lock:
            return dict(self._seen)

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` requests were seen; ``False`` on timeout."""
        with self._seen_changed:
            return self._seen_changed.wait_for(
                lambda: sum(self._seen.values()) >= count, timeout=timeout
            )

    def faults_injected(self) -> dict[str, int]:
        """Faults injected so far per kind (``slowdown``, ``delay``, ``drop``)."""
        with self._lock:
            return dict(self._injected)

    # --- used by the handler -----------------------------------------------------------

    def _choose(self, method: str, path: str) -> FaultRule | None:
        with self._lock:
            self._seen[method] = self._seen.get(method, 0) + 1
            self._seen_changed.notify_all()
            for active in self._rules:
                rule = active.rule
                if active.remaining == 0:
                    continue
                if rule.method is not None and rule.method != method:
                    continue
                if rule.path_contains is not None and rule.path_contains not in path:
                    continue
                if rule.probability < 1.0 and self._random.random() >= rule.probability:
                    continue
                if active.remaining is not None:
                    active.remaining -= 1
                self._injected[rule.kind] = self._injected.get(rule.kind, 0) + 1
                return rule
            return None

    def _next_request_id(self) -> int:
        with self._lock:
            return next(self._request_ids)


@dataclass(slots=True)
class _ActiveRule:
    """A rule and how many more times it may fire; mutated only under the proxy's lock."""

    rule: FaultRule
    remaining: int | None


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        proxy: TestingFaultProxy,
    ) -> None:
        self.proxy = proxy
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Connections cut by clients or by :meth:`TestingFaultProxy.stop` are expected;
        anything else is reported as usual."""
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            if add:
                self._conns.add(conn)
                if self.proxy._stopping.is_set():  # accepted while stopping
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
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    timeout = 120  # an idle keep-alive connection is closed after this
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
        """Silence the per-request log lines."""

    def do_GET(self) -> None:
        self._proxy()

    def do_HEAD(self) -> None:
        self._proxy()

    def do_PUT(self) -> None:
        self._proxy()

    def do_POST(self) -> None:
        self._proxy()

    def do_DELETE(self) -> None:
        self._proxy()

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

    def _proxy(self) -> None:
        proxy = self.server.proxy
        body = self._read_body()
        rule = proxy._choose(self.command, self.path)
        stopping = proxy._stopping
        if rule is not None and not rule.after_upstream:
            if rule.kind == "slowdown":
                self._send_slowdown(proxy._next_request_id())
                return
            if rule.kind == "drop":
                self._drop()
                return
            if stopping.wait(rule.delay_s):
                self._drop()
                return
        try:
            status, reason, headers, payload = self._forward(body)
        except (OSError, http.client.HTTPException):
            self._drop()  # upstream unreachable: look like a dead server
            return
        if (
            rule is not None
            and rule.after_upstream
            and (rule.kind == "drop" or stopping.wait(rule.delay_s))
        ):
            self._drop()
            return
        try:
            self._send_upstream_response(status, reason, headers, payload)
        except OSError:  # the client gave up (timeout) and closed its end
            self.close_connection = True

    def _send_upstream_response(
        self, status: int, reason: str, headers: list[tuple[str, str]], payload: bytes
    ) -> None:
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

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        for attempt in range(2):  # a pooled upstream connection may have gone stale
            if self._upstream is None:
                host, port = self.server.proxy._upstream
                self._upstream = http.client.HTTPConnection(host, port, timeout=120)
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
                payload = resp.read()
                return resp.status, resp.reason, resp.getheaders(), payload
            except (OSError, http.client.HTTPException):
                conn.close()
                self._upstream = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def _send_slowdown(self, request_id: int) -> None:
        try:
            self._write_slowdown(request_id)
        except OSError:
            self.close_connection = True

    def _write_slowdown(self, request_id: int) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            "<Error><Code>SlowDown</Code>"
            "<Message>Please reduce your request rate.</Message>"
            f"<Resource>{_xml_escape(self.path)}</Resource>"
            f"<RequestId>testing-fault-proxy-{request_id}</RequestId></Error>"
        ).encode()
        self.send_response_only(503, "Slow Down")
        self.send_header("Content-Type", "application/xml")
        self.send_header("x-amz-request-id", f"testing-fault-proxy-{request_id}")
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True
        _shutdown(self.connection)


def _shutdown(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer
        conn.shutdown(socket.SHUT_RDWR)


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
