"""A small synchronous JSON client for a Kubernetes API server over TLS, for test support.

:class:`ApiClient` authenticates with a client certificate or a bearer token and checks
the server against a CA file; :meth:`ApiClient.from_kubeconfig` reads those from a
kubeconfig's current context (file references or inline ``*-data``). Each request opens
its own connection, so any number of threads can share one client.
:meth:`ApiClient.watch` returns a :class:`WatchStream`; its :meth:`~WatchStream.close`
may be called from another thread and ends a blocked iteration at once.

Errors: a non-2xx answer raises :class:`ApiError` with the HTTP status and the decoded
``Status`` body; connection problems raise ``OSError``.

Thread-safety: :class:`ApiClient` is thread-safe; a :class:`WatchStream` is iterated by
one thread and closed by any.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import tempfile
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: ``status`` is the HTTP code, ``body`` the decoded Status."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message", "") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body

    @property
    def reason(self) -> str:
        """The Status ``reason`` (``Forbidden``, ``NotFound``, ``Conflict``...)."""
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


class ApiClient:
    """JSON over HTTPS to one API server."""

    def __init__(
        self,
        server: str,
        *,
        ca_file: Path | str,
        cert_file: Path | str | None = None,
        key_file: Path | str | None = None,
        token: str | None = None,
        timeout: float = 15.0,
    ) -> None:
        url = urllib.parse.urlsplit(server)
        if url.scheme != "https" or url.hostname is None:
            raise ValueError(f"an https server URL is needed, not {server!r}")
        self.server = server.rstrip("/")
        self.host = url.hostname
        self.port = url.port or 443
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=str(ca_file))
        if cert_file is not None:
            self._context.load_cert_chain(
                str(cert_file), None if key_file is None else str(key_file)
            )
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    @classmethod
    def from_kubeconfig(cls, path: Path | str, *, timeout: float = 15.0) -> ApiClient:
        """A client for the current context of a kubeconfig file."""
        path = Path(path)
        config = yaml.safe_load(path.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[config["current-context"]]
        cluster = {c["name"]: c["cluster"] for c in config.get("clusters") or []}[
            context["cluster"]
        ]
        user = {u["name"]: u.get("user") or {} for u in config.get("users") or []}.get(
            context.get("user", ""), {}
        )
        scratch = Path(tempfile.mkdtemp(prefix="gic-kubeconfig-"))

        def file_of(entry: Mapping[str, Any], key: str) -> Path | None:
            if entry.get(f"{key}-data"):
                target = scratch / key
                target.write_bytes(base64.b64decode(entry[f"{key}-data"]))
                target.chmod(0o600)
                return target
            if entry.get(key):
                value = Path(entry[key])
                return value if value.is_absolute() else path.parent / value
            return None

        ca = file_of(cluster, "certificate-authority")
        if ca is None:
            raise ValueError(f"{path}: the cluster has no certificate-authority")
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        client = cls(
            cluster["server"],
            ca_file=ca,
            cert_file=file_of(user, "client-certificate"),
            key_file=file_of(user, "client-key"),
            token=token,
            timeout=timeout,
        )
        for leftover in scratch.iterdir():  # loaded into the SSL context
            leftover.unlink()
        scratch.rmdir()
        return client

    def with_token(self, token: str, ca_file: Path | str) -> ApiClient:
        """A client for the same server authenticating with ``token`` only."""
        return ApiClient(self.server, ca_file=ca_file, token=token, timeout=self.timeout)

    def _connection(self, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, timeout=timeout, context=self._context
        )

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        *,
        params: Mapping[str, str] | None,
        content_type: str,
        accept: str,
    ) -> bytes:
        connection = self._connection(self.timeout)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {**self._headers, "Accept": accept}
            if payload is not None:
                headers["Content-Type"] = content_type
            connection.request(method, _url(path, params), body=payload, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        if response.status >= 300:
            raise ApiError(response.status, _decode(raw))
        return raw

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        """Send one request; the decoded JSON answer (text when it is not JSON)."""
        raw = self._send(
            method, path, body, params=params, content_type=content_type, accept="application/json"
        )
        return _decode(raw)

    def get(self, path: str, **params: str) -> Any:
        """GET ``path`` with query parameters."""
        return self.request("GET", path, params=params)

    def text(self, path: str, **params: str) -> str:
        """GET ``path`` as text (``pods/log``, ``/readyz``)."""
        raw = self._send("GET", path, None, params=params, content_type="", accept="*/*")
        return raw.decode("utf-8", "replace")

    def create(self, path: str, body: Any) -> Any:
        """POST ``body`` to a collection ``path``."""
        return self.request("POST", path, body)

    def replace(self, path: str, body: Any) -> Any:
        """PUT ``body`` to ``path`` (an update, checked against its resourceVersion)."""
        return self.request("PUT", path, body)

    def patch(self, path: str, patch: Any, *, content_type: str = MERGE_PATCH) -> Any:
        """PATCH ``path`` (a JSON merge patch unless told otherwise)."""
        return self.request("PATCH", path, patch, content_type=content_type)

    def delete(self, path: str, options: Any = None) -> Any:
        """DELETE ``path`` with optional ``DeleteOptions``."""
        return self.request("DELETE", path, options)

    def watch(self, path: str, **params: str) -> WatchStream:
        """Open a watch on a collection ``path``; iterate the stream for its events."""
        connection = self._connection(None)
        query = {"watch": "true", **params}
        try:
            connection.request("GET", _url(path, query), headers=self._headers)
            response = connection.getresponse()
        except BaseException:
            connection.close()
            raise
        if response.status >= 300:
            raw = response.read()
            connection.close()
            raise ApiError(response.status, json.loads(raw) if raw else None)
        return WatchStream(connection, response)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def _url(path: str, params: Mapping[str, str] | None) -> str:
    return f"{path}?{urllib.parse.urlencode(params)}" if params else path


class WatchStream:
    """The events of one watch request, as decoded JSON objects."""

    def __init__(
        self, connection: http.client.HTTPSConnection, response: http.client.HTTPResponse
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
                except (OSError, ValueError, http.client.HTTPException, ssl.SSLError):
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
