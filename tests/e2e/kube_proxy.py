"""A TCP forwarder standing in for kube-proxy's rule for the ``kubernetes`` Service.

Spark's Kubernetes backend talks to ``https://kubernetes.default.svc`` (port 443), the
master every GICJob on Kubernetes uses. On the test machine the API server listens on
127.0.0.1 at a random port, so :class:`TcpForwarder` listens on another loopback address
at port 443 and pipes every connection to the API server (:func:`service_forwarder` picks
a free address of 127.0.0.0/8 for each run, so several suites can run at once); the
process kubelet maps the Service's names to that address in the ``/etc/hosts`` of
isolated pods. TLS passes through untouched (the API server's
certificate names ``kubernetes.default.svc``).

Thread-safety: :meth:`TcpForwarder.start` and :meth:`TcpForwarder.stop` from one thread;
one thread accepts and two threads per connection copy bytes.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading

#: The ``kubernetes`` Service's port.
SERVICE_PORT = 443
#: The names of the ``kubernetes`` Service in the ``default`` namespace.
SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


class TcpForwarder:
    """Forwards every connection accepted on ``listen`` to ``target``."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen = listen
        self.target = target
        self._server: socket.socket | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> TcpForwarder:
        """Listen (OSError when the address cannot be bound, e.g. port 443 without root)."""
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(self.listen)
            server.listen(64)
        except OSError:
            server.close()
            raise
        self._server = server
        self._thread = threading.Thread(target=self._accept, name="tcp-forward", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every forwarded connection."""
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _accept(self) -> None:
        while self._server is not None:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            running = [2]  # directions still copying
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pipe,
                    args=(source, sink, running),
                    name="tcp-forward-pipe",
                    daemon=True,
                ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, running: list[int]) -> None:
        """Copy ``source`` to ``sink`` until EOF; the second direction to end closes both."""
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            running[0] -= 1
            last = running[0] == 0
            if last:
                self._open.difference_update((source, sink))
        if last:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def service_forwarder(target: tuple[str, int], *, attempts: int = 64) -> TcpForwarder:
    """A started forwarder to ``target`` on port :data:`SERVICE_PORT` of a loopback
    address nobody listens on yet (tried at random in 127.0.2.0-127.255.255.254; its
    ``listen[0]`` is where the Service's names must point). OSError when none binds."""
    error: OSError | None = None
    for _ in range(attempts):
        host = f"127.{random.randint(0, 255)}.{random.randint(2, 255)}.{random.randint(1, 254)}"
        try:
            return TcpForwarder((host, SERVICE_PORT), target).start()
        except OSError as exc:  # taken (another run), or no rights to port 443
            error = exc
    assert error is not None
    raise error
