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
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gic_operator.metrics import CONTENT_TYPE_LATEST, OperatorMetrics

_log = logging.getLogger(__name__)


class HealthServer:
    """Probe and metrics endpoints on ``host``:``port`` (0: any free port; the one
    chosen is :attr:`port` after :meth:`start`). Start and stop it from one thread;
    requests are served on threads of its own."""

    def __init__(
        self,
        port: int,
        metrics: OperatorMetrics | None,
        ready: Callable[[], bool],
        host: str = "0.0.0.0",
    ) -> None:
        self._requested = (host, port)
        self._metrics = metrics
        self._ready = ready
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port served on (the requested one until started)."""
        if self._server is not None:
            return int(self._server.server_address[1])
        return self._requested[1]

    @property
    def serves_metrics(self) -> bool:
        """Whether ``/metrics`` is served."""
        return self._metrics is not None

    def start(self) -> HealthServer:
        """Bind and serve on a daemon thread; return ``self``."""
        if self._server is not None:
            return self
        server = ThreadingHTTPServer(self._requested, self._handler_class())
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"gic-health-{self.port}",
            daemon=True,
        )
        self._thread.start()
        _log.info("serving probes%s on port %d", " and metrics" if self._metrics else "", self.port)
        return self

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
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
