"""A TCP forwarder: every connection accepted on one address is piped to another.

The real node (:mod:`.real_node_net`) uses it to put the API server and the local S3
server on the node's bridge address; bytes pass through untouched, TLS included.

Thread-safety: :meth:`TcpForwarder.start` and :meth:`TcpForwarder.stop` from one thread;
one thread accepts and two threads per connection copy bytes.
"""

from __future__ import annotations

import contextlib
import socket
import threading


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
