"""A minimal synchronous JSON client for the Kubernetes API, for test fixtures.

It reads the server URL and bearer token of a kubeconfig's current context (plain
``http`` only, which is what the emulator serves) and makes one connection per request,
so any number of threads can share a :class:`KubeClient`. :meth:`KubeClient.watch`
returns a :class:`WatchStream` whose :meth:`~WatchStream.close` may be called from
another thread and ends a blocked iteration at once (the socket is shut down).

Thread-safety: :class:`KubeClient` is thread-safe; a :class:`WatchStream` is iterated by
one thread and closed by any.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml


class KubeClientError(Exception):
    """A non-2xx answer; ``status`` is the HTTP code, ``body`` the decoded Status (if any)."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


class KubeClient:
    """JSON over HTTP to the API server named by a kubeconfig."""

    def __init__(self, kubeconfig: Path | str, *, timeout: float = 10.0) -> None:
        config = yaml.safe_load(Path(kubeconfig).read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[config["current-context"]]
        clusters = {c["name"]: c["cluster"] for c in config.get("clusters") or []}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        server = urllib.parse.urlsplit(clusters[context["cluster"]]["server"])
        if server.scheme != "http" or server.hostname is None:
            raise ValueError(f"only plain http API servers are supported, not {server.geturl()}")
        self.host = server.hostname
        self.port = server.port or 80
        self.namespace: str = context.get("namespace") or "default"
        self.timeout = timeout
        token = users.get(context.get("user", ""), {}).get("token")
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request and return the decoded JSON answer (text if not JSON)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = dict(self._headers)
            if payload is not None:
                headers["Content-Type"] = content_type
            connection.request(method, self._url(path, params), body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode("utf-8", "replace")
        if response.status >= 300:
            raise KubeClientError(response.status, decoded)
        return decoded

    def get(self, path: str, **params: str) -> Any:
        """GET ``path`` with query parameters."""
        return self.request("GET", path, params=params)

    def merge_patch(self, path: str, patch: Any) -> Any:
        """PATCH ``path`` with a JSON merge patch."""
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path: str, options: Any = None) -> Any:
        """DELETE ``path`` with optional ``DeleteOptions``."""
        return self.request("DELETE", path, options)

    def watch(self, path: str, **params: str) -> WatchStream:
        """Open a watch on a list ``path``; iterate the returned stream for events."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=None)
        query = {"watch": "true", **params}
        connection.request("GET", self._url(path, query), headers=self._headers)
        response = connection.getresponse()
        if response.status >= 300:
            raw = response.read()
            connection.close()
            raise KubeClientError(response.status, json.loads(raw) if raw else None)
        return WatchStream(connection, response)

    @staticmethod
    def _url(path: str, params: Mapping[str, str] | None) -> str:
        return f"{path}?{urllib.parse.urlencode(params)}" if params else path


class WatchStream:
    """The events of one watch request, as decoded JSON objects."""

    def __init__(
        self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse
    ) -> None:
        self._connection = connection
        self._response = response
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            while not self._closed:
                try:
                    line = self._response.readline()
                except (OSError, ValueError, http.client.HTTPException):
                    return
                except AttributeError:  # http.client, when the socket is shut down under it
                    if self._closed:
                        return
                    raise
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            self.close()

    def close(self) -> None:
        """End the stream; a blocked iteration in another thread returns promptly."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sock = self._connection.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        self._connection.close()
