"""An in-process Kubernetes API server for end-to-end tests, on loopback, in its own thread.

``with KubeEmulator() as kube:`` serves the API at ``kube.url`` (``http://127.0.0.1:<free
port>``) from a thread with its own event loop, until the block ends. kopf, the
``kubernetes`` client and ``kubectl`` (with ``--validate=false``) talk to it through the
kubeconfig that :meth:`KubeEmulator.write_kubeconfig` writes. The semantics (resource
versions, generations, status subresources, patches, finalizers, cascading deletion,
watches with replay) are those of :mod:`gic_operator.testing.kube_store`, served by
:mod:`gic_operator.testing.kube_api` on kmock. No authentication is checked; nothing runs
pods (see :mod:`gic_operator.testing.kubelet`).

Invariants: one store per emulator, touched only from the emulator's loop thread; once
:meth:`KubeEmulator.stop` returns, the thread is gone and open watch streams have ended.

Thread-safety: :meth:`start`, :meth:`stop`, :meth:`write_kubeconfig`, :attr:`url` and
:meth:`call` may be called from any thread; :attr:`handler` is for adding kmock reactions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import aiohttp.web
import yaml

from gic_operator.testing.kube_api import ApiHandler, LogSource
from gic_operator.testing.kube_resources import Registry
from gic_operator.testing.kube_store import KubeStore

T = TypeVar("T")
CONTEXT_NAME = "gic-emulator"


class KubeEmulator:
    """A Kubernetes API emulator served from a background thread."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        history_size: int = 10_000,
        log_source: LogSource | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._history_size = history_size
        self._log_source = log_source
        self._url: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._handler: ApiHandler | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> KubeEmulator:
        """Start serving; returns once the port accepts connections."""
        if self._thread is not None:
            raise RuntimeError("the emulator was started already")
        self._thread = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        if self._failure is not None:
            self._thread.join()
            raise RuntimeError("the Kubernetes API emulator failed to start") from self._failure
        if self._url is None:
            raise RuntimeError("the Kubernetes API emulator did not start in 30 s")
        return self

    def stop(self) -> None:
        """End the watches, close the server and join its thread (idempotent)."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None or loop is None or stopping is None:
            return
        if thread.is_alive():
            loop.call_soon_threadsafe(stopping.set)
            thread.join(timeout=30)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        registry = Registry()
        store = KubeStore(registry, history_size=self._history_size)
        namespaces = registry.get("", "v1", "namespaces")
        assert namespaces is not None
        store.create(namespaces, None, {"metadata": {"name": "default"}})
        handler = ApiHandler(store=store, log_source=self._log_source)
        self._handler = handler
        async with handler:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            server = aiohttp.web.Server(handler, handler_cancellation=True)
            runner = aiohttp.web.ServerRunner(server, shutdown_timeout=2.0)
            await runner.setup()
            try:
                await aiohttp.web.SockSite(runner, sock).start()
                self._url = f"http://{self._host}:{sock.getsockname()[1]}"
                self._ready.set()
                await self._stopping.wait()
                handler.close_watches()
            finally:
                await runner.cleanup()

    # -- access -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL of the API, e.g. ``http://127.0.0.1:41234``."""
        if self._url is None:
            raise RuntimeError("the emulator is not running")
        return self._url

    @property
    def handler(self) -> ApiHandler:
        """The kmock handler, for reactions that override the emulation (fault injection)."""
        if self._handler is None:
            raise RuntimeError("the emulator is not running")
        return self._handler

    @property
    def server_errors(self) -> list[BaseException]:
        """Exceptions the emulator raised while serving (a bug here, not in the client)."""
        return list(self._handler.server_errors) if self._handler is not None else []

    def call(self, fn: Callable[[KubeStore], T]) -> T:
        """Run ``fn(store)`` in the emulator's loop thread and return its result."""
        loop, handler = self._loop, self._handler
        if loop is None or handler is None:
            raise RuntimeError("the emulator is not running")
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                future.set_result(fn(handler.store))
            except BaseException as exc:
                future.set_exception(exc)

        loop.call_soon_threadsafe(invoke)
        return future.result(timeout=30)

    def set_log_source(self, source: LogSource | None) -> None:
        """Serve ``pods/<name>/log`` from ``source(namespace, name)`` (e.g. a kubelet's)."""
        self._log_source = source
        if self._handler is not None:
            handler = self._handler
            self.call(lambda _store: setattr(handler, "log_source", source))

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig document pointing at this emulator, with a dummy bearer token."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT_NAME, "user": {"token": "emulator-token"}}],
            "contexts": [
                {
                    "name": CONTEXT_NAME,
                    "context": {
                        "cluster": CONTEXT_NAME,
                        "user": CONTEXT_NAME,
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": CONTEXT_NAME,
            "preferences": {},
        }

    def write_kubeconfig(self, path: Path | str, namespace: str = "default") -> Path:
        """Write :meth:`kubeconfig` to ``path`` (parents created) and return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(namespace), sort_keys=False))
        return target
