"""The HTTP face of the Kubernetes API emulator: a kmock handler over a :class:`KubeStore`.

:class:`ApiHandler` extends kmock's ``KubernetesScaffold`` (request matching, reactions,
JSON and streaming rendering, ``Status`` errors). Everything the emulation answers is a
fallback reaction, so reactions a test adds through kmock's DSL (``handler[...] << 503``)
take precedence over it. On top of the scaffold it serves:

* discovery from the :class:`Registry` (``/api``, ``/apis``, ``/apis/<g>``, ``/api/v1``,
  ``/apis/<g>/<v>``, ``/version``), CRDs included as soon as they are created;
* GET, LIST, WATCH, POST, PUT, PATCH, DELETE and DELETE-collection of every served type
  and of the ``status`` subresource, and ``pods/log`` from an optional log source;
* watches as ``application/json`` lines, replaying from ``resourceVersion`` (``410``
  ERROR event when too old), honouring selectors, ``timeoutSeconds`` and
  ``sendInitialEvents`` (ending the initial events with a bookmark).

Deviations from kmock 0.8, which cannot be configured away: kmock's request parser fails
on ``/api/v1/namespaces`` and reads ``/namespaces/<ns>/status`` as a list of
``status``, so requests are parsed here; and requests are not kept after they are served
(kmock's matching walks the request log, which would make every request slower than
the last). Requests that are neither discovery nor API calls answer 404.

Thread-safety: not thread-safe; construct and use it inside the emulator's event loop.
Reactions may still be added from another thread (kmock replaces a list under the GIL).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import aiohttp.web
import attrs
from kmock import KubernetesError, KubernetesScaffold, Request
from kmock._internal import enums, parsing, references, rendering
from kmock._internal.rendering import Response

from gic_operator.testing.kube_errors import ApiError, bad_request
from gic_operator.testing.kube_protobuf import decode_object
from gic_operator.testing.kube_resources import ResourceType
from gic_operator.testing.kube_selectors import FieldSelector, LabelSelector
from gic_operator.testing.kube_store import PATCH_TYPES, KubeStore
from gic_operator.testing.kube_watch import WatchQueue, WatchScope, stream_events

_log = logging.getLogger(__name__)
LogSource = Callable[[str, str], "str | None"]
_JSON = "application/json"
_NAMESPACE_SUBRESOURCES = ("status", "finalize")


def parse_api_path(path: str) -> parsing.ParsedPath:
    """Split an API path into group, version, namespace, plural, name and subresource."""
    parts = [part for part in path.split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    elif parts[:1] == ["apis"] and len(parts) == 2:
        return parsing.ParsedPath(group=parts[1])
    else:
        return parsing.ParsedPath()
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in _NAMESPACE_SUBRESOURCES:
        namespace, rest = rest[1], rest[2:]
    return parsing.ParsedPath(
        group=group,
        version=version,
        plural=rest[0] if rest else None,
        namespace=namespace,
        name=rest[1] if len(rest) > 1 else None,
        subresource="/".join(rest[2:]) or None,
    )


def _respond(body: Any, status: int = 200, content_type: str = _JSON) -> Response:
    # Status and content type always explicit: kmock keeps them on the reaction between calls.
    return Response(status=status, headers={"Content-Type": content_type}, payload=body)


@attrs.define(kw_only=True)
class ApiHandler(KubernetesScaffold):
    """kmock's Kubernetes scaffold serving the objects of a :class:`KubeStore`."""

    store: KubeStore
    log_source: LogSource | None = None
    server_errors: list[BaseException] = attrs.field(factory=list, init=False)
    _watches: set[WatchQueue] = attrs.field(factory=set, init=False)
    _served: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.fallback[lambda request: request.resource is not None] << self._serve_api_call
        for probe in ("/healthz", "/readyz", "/livez"):
            self.fallback[f"get {probe}"] << (lambda: _respond(b"ok", content_type="text/plain"))
        # No OpenAPI documents: kubectl then does without them (hence --validate=false).
        missing = ApiError(404, "NotFound", "the server could not find the requested resource")
        self.fallback[re.compile(r"/openapi/.*")] << (lambda: self._error(missing))

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        body = await raw_request.read()
        k8s = parse_api_path(raw_request.path)
        resource = None
        if k8s.group is not None:
            resource = references.resource(group=k8s.group, version=k8s.version, plural=k8s.plural)
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = Request(
            id=self._served,
            raw_request=raw_request,
            url=raw_request.url,
            method=raw_request.method,
            params=dict(raw_request.query),
            headers=dict(raw_request.headers),
            body=body,
            text=body.decode("utf-8", "replace"),
            data=data,
            action=parsing.guess_k8s(
                k8s, enums.method(raw_request.method), dict(raw_request.query)
            ),
            resource=resource,
            namespace=k8s.namespace,
            name=k8s.name,
            subresource=k8s.subresource,
        )
        self._served += 1
        self._requests.append(request)
        try:
            return await self._handle(request)
        except rendering.StreamingError as exc:  # the headers are out: end the stream
            self._record_error(exc.__cause__ or exc)
            raw_response: aiohttp.web.StreamResponse = exc.args[0]
            await self._stream_error(exc, raw_response)
            await raw_response.write_eof()
            return raw_response
        except KubernetesError as exc:  # kmock's own 404 for unknown endpoints
            return await self._render_error(exc)
        except Exception as exc:
            self._record_error(exc)
            return await self._render_error(exc)
        finally:
            self._requests.remove(request)
            for payload in self._payloads:
                del payload._requests[:-10]

    def _record_error(self, exc: BaseException) -> None:
        _log.error("Kubernetes API emulator failed on a request", exc_info=exc)
        self.server_errors.append(exc)

    def close_watches(self) -> None:
        """End every open watch stream (on shutdown)."""
        for queue in list(self._watches):
            queue.put_nowait(None)

    # -- discovery --------------------------------------------------------------------------

    async def _serve_root(self, request: Request) -> Response:
        paths = {"/api", "/api/v1", "/apis", "/version", "/healthz", "/readyz", "/livez"}
        for group, versions in self.store.registry.groups().items():
            paths.add(f"/apis/{group}")
            paths.update(f"/apis/{group}/{version}" for version in versions)
        return _respond({"paths": sorted(paths)})

    async def _serve_server_version(self, request: Request) -> Response:
        return _respond(
            {
                "major": "1",
                "minor": "32",
                "gitVersion": "v1.32.0-emulated",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z",
                "goVersion": "go1.23.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        )

    async def _serve_api(self, request: Request) -> Response:
        raw = request._raw_request
        address = f"{raw.host}" if raw is not None else "127.0.0.1"
        return _respond(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": address}
                ],
            }
        )

    async def _serve_apis(self, request: Request) -> Response:
        return _respond(self.store.registry.api_group_list())

    async def _serve_group(self, request: Request) -> Response:
        assert request.resource is not None and request.resource.group is not None
        document = self.store.registry.api_group(request.resource.group)
        if document is None:
            return self._error(
                ApiError(404, "NotFound", "the server could not find the requested resource")
            )
        return _respond(document)

    async def _serve_version(self, request: Request) -> Response:
        assert request.resource is not None
        group, version = request.resource.group or "", request.resource.version or ""
        document = self.store.registry.api_resource_list(group, version)
        if document is None:
            return self._error(
                ApiError(404, "NotFound", "the server could not find the requested resource")
            )
        return _respond(document)

    # -- API calls --------------------------------------------------------------------------

    @staticmethod
    def _error(error: ApiError) -> Response:
        return _respond(error.status(), status=error.code)

    async def _serve_api_call(self, request: Request) -> Response:
        try:
            return self._dispatch(request)
        except ApiError as error:
            return self._error(error)

    def _resolve(self, request: Request) -> ResourceType:
        assert request.resource is not None
        res = request.resource
        rtype = None
        if res.group is not None and res.version and res.plural:
            rtype = self.store.registry.get(res.group, res.version, res.plural)
        missing = ApiError(404, "NotFound", "the server could not find the requested resource")
        if rtype is None or (request.namespace is not None and not rtype.namespaced):
            raise missing
        if request.subresource is not None and request.subresource not in rtype.subresources:
            raise missing
        return rtype

    def _dispatch(self, request: Request) -> Response:
        rtype = self._resolve(request)
        params = request.params
        if params.get("dryRun"):
            raise bad_request("dry-run requests are not supported by this emulator")
        method = request.method.value
        ns, name, sub = request.namespace, request.name, request.subresource
        labels = LabelSelector.parse(params.get("labelSelector"))
        fields = FieldSelector.parse(params.get("fieldSelector"))
        store = self.store
        if method == "GET" and params.get("watch") in ("true", "1"):
            if name is not None:
                fields = FieldSelector.parse(
                    ",".join(filter(None, [fields.text, f"metadata.name={name}"]))
                )
            scope = WatchScope(rtype, ns, labels, fields)
            return _respond(stream_events(self.store, scope, params, self._watches))
        if name is None:
            if method == "GET":
                limit_text = params.get("limit") or "0"
                if not limit_text.isdigit():
                    raise bad_request(f"invalid limit: {limit_text!r}")
                limit = int(limit_text)
                listing = store.list_objects(
                    rtype,
                    ns,
                    labels,
                    fields,
                    limit=limit,
                    continue_token=params.get("continue", ""),
                )
                return _respond(listing)
            if method == "POST":
                return _respond(store.create(rtype, ns, self._body(request)), status=201)
            if method == "DELETE":
                return _respond(
                    store.delete_collection(rtype, ns, labels, fields, self._options(request))
                )
        elif method == "GET" and sub == "log":
            store.get(rtype, ns, name)
            text = self.log_source(ns or "", name) if self.log_source is not None else None
            return _respond((text or "").encode(), content_type="text/plain")
        elif method == "GET":
            return _respond(store.get(rtype, ns, name))
        elif method == "PUT":
            return _respond(store.replace(rtype, ns, name, self._body(request), subresource=sub))
        elif method == "PATCH":
            patch_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if patch_type not in PATCH_TYPES:
                raise ApiError(
                    415, "UnsupportedMediaType", f"the media type {patch_type!r} is not supported"
                )
            return _respond(
                store.patch(rtype, ns, name, patch_type, self._body(request), subresource=sub)
            )
        elif method == "DELETE":
            result = store.delete(rtype, ns, name, self._options(request))
            return _respond(result, status=202 if store.contains(rtype, result) else 200)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported here")

    @staticmethod
    def _body(request: Request) -> Any:
        content_type = request.headers.get("Content-Type", _JSON).split(";")[0].strip()
        if content_type == "application/vnd.kubernetes.protobuf":
            try:
                return decode_object(request.body)
            except ValueError as exc:
                raise ApiError(415, "UnsupportedMediaType", f"{exc}; send JSON") from exc
        if "yaml" in content_type:
            raise ApiError(415, "UnsupportedMediaType", "YAML bodies are not supported; send JSON")
        if not request.body:
            raise bad_request("the request has no body")
        try:
            return json.loads(request.body)
        except ValueError as exc:
            raise bad_request(f"the body is not JSON: {exc}") from exc

    @staticmethod
    def _options(request: Request) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if request.body:
            try:
                parsed = json.loads(request.body)
            except ValueError as exc:
                raise bad_request(f"the delete options are not JSON: {exc}") from exc
            options = dict(parsed) if isinstance(parsed, dict) else {}
        params = request.params
        if "gracePeriodSeconds" in params:
            grace = params["gracePeriodSeconds"]
            if not grace.isdigit():
                raise bad_request(f"invalid gracePeriodSeconds: {grace!r}")
            options["gracePeriodSeconds"] = int(grace)
        if "propagationPolicy" in params:
            options["propagationPolicy"] = params["propagationPolicy"]
        return options
