"""HTTP endpoints for Kubernetes probes and Prometheus: ``/healthz``, ``/readyz``,
``/metrics``.

* ``GET /healthz`` -- 200 ``ok`` while the process serves requests (liveness);
* ``GET /readyz`` -- 200 ``ready`` when ``ready()`` is true, else 503 (readiness; a
  ``ready`` that raises counts as not ready);
* ``GET /metrics`` -- the Prometheus text of the given :class:`OperatorMetrics` (404
  when the server has none).

The server is a standard-library ``ThreadingHTTPServer`` on a daemon thread, so it never
keeps the process alive and a slow scrape never blocks a probe.

Thread-safety: :meth:`HealthServer.start` and :meth:`HealthServer.stop` are meant to be
called from one controlling thread; requests are served on the server's own threads.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gic_operator.operator_metrics import CONTENT_TYPE_LATEST, OperatorMetrics
from gic_runtime.listen import host_port, listen_addresses

_log = logging.getLogger(__name__)


class _Server(ThreadingHTTPServer):
    """A threading HTTP server whose address family follows its address (IPv4 or 6)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)


class HealthServer:
    """Probe and metrics endpoints on ``port`` (0: any free port; the one chosen is
    :attr:`port` after :meth:`start`) of ``host``: the pod's IP, and the loopback address
    too when that is not one (:func:`gic_runtime.listen.listen_addresses`, the same port
    on each); None or ``0.0.0.0``: every interface. Start and stop it from one thread;
    requests are served on threads of its own."""

    def __init__(
        self,
        port: int,
        metrics: OperatorMetrics | None,
        ready: Callable[[], bool],
        host: str | None = None,
    ) -> None:
        self._addresses = listen_addresses(host)
        self._requested_port = port
        self._metrics = metrics
        self._ready = ready
        self._servers: list[tuple[ThreadingHTTPServer, threading.Thread]] = []

    @property
    def port(self) -> int:
        """The port served on (the requested one until started)."""
        if self._servers:
            return int(self._servers[0][0].server_address[1])
        return self._requested_port

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses served on (once started), the pod's IP first."""
        return self._addresses

    @property
    def serves_metrics(self) -> bool:
        """Whether ``/metrics`` is served."""
        return self._metrics is not None

    def start(self) -> HealthServer:
        """Bind every address and serve on daemon threads; return ``self``. OSError (and
        nothing left bound) when an address cannot be bound."""
        if self._servers:
            return self
        handler = self._handler_class()
        try:
            for address in self._addresses:
                server = _Server((address, self.port), handler)
                thread = threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.1},
                    name=f"gic-health-{address}-{server.server_address[1]}",
                    daemon=True,
                )
                self._servers.append((server, thread))
                thread.start()
        except OSError as exc:
            self.stop()
            raise OSError(exc.errno, f"{host_port(address, self.port)}: {exc.strerror}") from exc
        _log.info(
            "serving probes%s on %s",
            " and metrics" if self._metrics else "",
            ", ".join(host_port(a, self.port) for a in self._addresses),
        )
        return self

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        servers, self._servers = self._servers, []
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join()

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _is_ready(self) -> bool:
        try:
            return bool(self._ready())
        except Exception:
            _log.exception("readiness check failed")
            return False

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "gic-operator"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._reply(200, b"ok\n")
                elif path == "/readyz":
                    ready = owner._is_ready()
                    self._reply(200 if ready else 503, b"ready\n" if ready else b"not ready\n")
                elif path == "/metrics" and owner._metrics is not None:
                    self._reply(200, owner._metrics.render(), CONTENT_TYPE_LATEST)
                else:
                    self._reply(404, b"not found\n")

            def _reply(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                _log.debug("%s " + format, self.address_string(), *args)

        return Handler
