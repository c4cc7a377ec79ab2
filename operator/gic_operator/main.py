"""The ``gic-operator`` command: parse options, serve probes and metrics, run kopf.

Sequence of :func:`main`: validate the options (a bad combination exits with status 2
and says what to change), configure logging (kopf's per-handler INFO lines only at
DEBUG, :mod:`gic_operator.kopf_settings`), load and configure the handlers
(:mod:`gic_operator.handlers`, imported only here so that parsing options needs no
cluster), start the health and metrics servers, then run kopf until it is signalled to
stop. Readiness (``/readyz``) turns true once kopf's startup handlers (including the one
here that applies the operator's kopf settings) have finished.

Thread-safety: runs once per process, on the main thread (kopf needs it for signals).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import re
import secrets
import sys
import threading
from collections.abc import Sequence
from typing import Any

from gic_operator.control_keys import ENV_CONTROL_KEY, ControlKeys
from gic_operator.operator_metrics import default_metrics
from gic_operator.operator_settings import (
    ENV_ALLOWED_S3_ENDPOINTS,
    ENV_ALLOWED_STORAGE,
    OperatorSettings,
    StorageAllowlist,
)
from gic_operator.probes import HealthServer
from gic_runtime.checkpoint.manifest_limits import DRIVER_LIMITS, OPERATOR_LIMITS, ManifestLimits
from gic_runtime.errors import ConfigurationError
from gic_runtime.listen import listen_addresses

_log = logging.getLogger(__name__)

FINALIZER = "gic.io/finalizer"
DEFAULT_PEERING = "gic-operator"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PORT_MAX = 65535
#: Largest --max-manifest-mib: what a driver may write at most.
_MANIFEST_MIB_MAX = DRIVER_LIMITS.max_bytes >> 20


def build_parser() -> argparse.ArgumentParser:
    """The command's argument parser."""
    parser = argparse.ArgumentParser(
        prog="gic-operator",
        description="Kubernetes operator for GIC streaming jobs (GICJob and Savepoint resources).",
    )
    where = parser.add_argument_group("what to watch")
    where.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="Watch namespace NS (repeat for several).",
    )
    where.add_argument("--all-namespaces", "-A", action="store_true", help="Watch every namespace.")
    where.add_argument(
        "--warn-unwatched",
        action="store_true",
        help="Post a Warning Event (NotWatched) on GICJobs in namespaces not watched (needs "
        "a cluster-wide list of GICJobs and creating Events; not with --all-namespaces).",
    )
    peers = parser.add_argument_group("peering (one active operator at a time)")
    peers.add_argument(
        "--peering",
        metavar="NAME",
        default=None,
        help=f"kopf peering object shared with other replicas (default {DEFAULT_PEERING}).",
    )
    peers.add_argument(
        "--standalone", action="store_true", help="Run without peering (a single replica)."
    )
    peers.add_argument(
        "--priority",
        type=int,
        default=None,
        help="Peering priority; the highest active replica works, the others wait. Default: "
        "random, so equal replicas never pause each other (kopf pauses all on a tie).",
    )
    serve = parser.add_argument_group("endpoints")
    serve.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        metavar="PORT",
        help="Port of /metrics (0: any free port, -1: off; default 8080).",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=8081,
        metavar="PORT",
        help="Port of /healthz and /readyz (0: any free port, -1: off; default 8081).",
    )
    serve.add_argument(
        "--bind-address",
        metavar="IP",
        default=None,
        help="IP address of both endpoints: the pod's IP (the chart passes status.podIP), "
        "served together with the loopback address when it is not one; default: every "
        "interface.",
    )
    parser.add_argument(
        "--reconcile-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="Seconds between reconciles of each resource (default 5).",
    )
    parser.add_argument(
        "--max-manifest-mib",
        type=int,
        default=OPERATOR_LIMITS.max_bytes >> 20,
        metavar="MIB",
        help="Largest checkpoint manifest a driver wrote that the operator decodes, in MiB "
        f"(default {OPERATOR_LIMITS.max_bytes >> 20}); JSON values per manifest and objects "
        "a job's retained manifests reference together scale with it (see "
        "docs/operations.md). Raise it only for jobs whose manifests are that large.",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="Log level (default INFO).",
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", help="Log at DEBUG level (as --log-level DEBUG)."
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse and validate the command line; on an error print it and exit with 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    problems = []
    if args.all_namespaces and args.namespace:
        problems.append("--namespace and --all-namespaces exclude each other: give one")
    elif not args.all_namespaces and not args.namespace:
        problems.append(
            "no namespace to watch: give --namespace NS (repeatable) or --all-namespaces"
        )
    if args.warn_unwatched and args.all_namespaces:
        problems.append(
            "--warn-unwatched has nothing to warn about with --all-namespaces: leave it out"
        )
    bad = [ns for ns in args.namespace if not _NAMESPACE.match(ns)]
    if bad:
        problems.append(
            f"invalid namespace name(s) {', '.join(map(repr, bad))}: a namespace is 1-63 "
            "lowercase letters, digits or '-', starting and ending with a letter or digit"
        )
    if args.standalone and args.peering is not None:
        problems.append("--standalone and --peering exclude each other: give one")
    ports = (("--metrics-port", args.metrics_port), ("--health-port", args.health_port))
    for option, port in ports:
        if not -1 <= port <= _PORT_MAX:
            problems.append(f"{option} {port} is not a port: use 0-{_PORT_MAX}, or -1 for off")
    try:
        listen_addresses(args.bind_address)
    except ConfigurationError as exc:
        problems.append(f"--bind-address: {exc}")
    if not 1 <= args.max_manifest_mib <= _MANIFEST_MIB_MAX:
        problems.append(
            f"--max-manifest-mib {args.max_manifest_mib} must be 1-{_MANIFEST_MIB_MAX} (MiB)"
        )
    interval = args.reconcile_interval
    if not (math.isfinite(interval) and interval > 0):
        problems.append(f"--reconcile-interval {interval} must be a positive number of seconds")
    try:
        args.allowlist = StorageAllowlist.from_env(os.environ)
    except ConfigurationError as exc:
        problems.append(f"{exc} (format: comma-separated VALUE or NAMESPACE=VALUE entries)")
    try:
        args.control_keys = ControlKeys.from_env(os.environ)
    except ConfigurationError as exc:
        problems.append(str(exc))
    if problems:
        parser.error("; ".join(problems))
    args.namespace = list(dict.fromkeys(args.namespace))
    return args


def settings_from_args(args: argparse.Namespace) -> OperatorSettings:
    """The operator settings a validated command line describes."""
    return OperatorSettings(
        reconcile_interval_s=float(args.reconcile_interval),
        peering=None if args.standalone else (args.peering or DEFAULT_PEERING),
        namespaces=tuple(args.namespace),
        all_namespaces=bool(args.all_namespaces),
        allowlist=getattr(args, "allowlist", None) or StorageAllowlist(),
        warn_unwatched=bool(getattr(args, "warn_unwatched", False)),
        control_keys=getattr(args, "control_keys", None) or ControlKeys.process_default(),
        manifest_limits=manifest_limits(
            getattr(args, "max_manifest_mib", OPERATOR_LIMITS.max_bytes >> 20)
        ),
    )


def manifest_limits(mib: int) -> ManifestLimits:
    """The operator's manifest limits for manifests of at most ``mib`` MiB: JSON values
    and references scale with the default's ratios (8 MiB: 1,000,000 values, 100,000
    references)."""
    base = OPERATOR_LIMITS.max_bytes >> 20
    return ManifestLimits(
        max_bytes=mib << 20,
        max_values=OPERATOR_LIMITS.max_values * mib // base,
        max_buckets=OPERATOR_LIMITS.max_buckets,
        max_references=OPERATOR_LIMITS.max_references * mib // base,
    )


def _configure_logging(args: argparse.Namespace) -> None:
    import kopf

    from gic_operator.kopf_settings import quiet_kopf_logs

    level = "DEBUG" if args.verbose else args.log_level
    kopf.configure(debug=level == "DEBUG", verbose=args.verbose)
    logging.getLogger().setLevel(level)
    quiet_kopf_logs(level)


def _register_startup(operator: OperatorSettings) -> None:
    """Register the kopf startup handler that applies the operator's kopf settings."""
    import kopf

    from gic_operator.kopf_settings import apply_kopf_settings

    def apply_settings(settings: kopf.OperatorSettings, **_: Any) -> None:
        apply_kopf_settings(settings, peering=operator.peering, finalizer=FINALIZER)

    kopf.on.startup(id="gic-operator-settings")(apply_settings)


def build_servers(args: argparse.Namespace, ready: threading.Event) -> list[HealthServer]:
    """The health and metrics servers the options ask for (one when the ports match)."""
    metrics = default_metrics()
    health, scrape = args.health_port, args.metrics_port
    host = args.bind_address
    if health >= 0 and health == scrape and health != 0:
        return [HealthServer(health, metrics, ready.is_set, host)]
    servers = []
    if health >= 0:
        servers.append(HealthServer(health, None, ready.is_set, host))
    if scrape >= 0:
        servers.append(HealthServer(scrape, metrics, ready.is_set, host))
    return servers


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator; returns the process exit status."""
    args = parse_args(argv)
    settings = settings_from_args(args)
    _configure_logging(args)
    import kopf

    # Importing the handlers registers them with kopf.
    handlers = importlib.import_module("gic_operator.handlers")
    handlers.configure(settings)
    _register_startup(settings)
    ready = threading.Event()
    servers = build_servers(args, ready)
    try:
        for server in servers:
            server.start()
    except OSError as exc:
        for server in servers:
            server.stop()
        print(
            f"gic-operator: cannot serve probes or metrics: {exc}. Another process listens "
            "there: give --metrics-port and --health-port free ports (0: any), or bind the "
            "pod's own IP with --bind-address (the Helm chart passes $(POD_IP))",
            file=sys.stderr,
        )
        return 1
    scope = "all namespaces" if settings.all_namespaces else ", ".join(settings.namespaces)
    _log.info("gic-operator watching %s (peering: %s)", scope, settings.peering or "standalone")
    if settings.warn_unwatched:
        _log.info("GICJobs in other namespaces get a Warning Event NotWatched")
    if not settings.allowlist.configured:
        _log.warning(
            "no storage root is allowed: every GICJob is refused (StorageNotAllowed) until "
            "%s names the roots jobs may use (and %s the S3 endpoints they may name), e.g. "
            "the Helm value storageAllowlist.storage={s3://bucket/prefix}",
            ENV_ALLOWED_STORAGE,
            ENV_ALLOWED_S3_ENDPOINTS,
        )
    if not settings.control_keys.configured:
        _log.warning(
            "no %s: the operator derives jobs' control keys from a random key of this "
            "process, so after a restart it cannot authenticate control requests (savepoints, "
            "stops) to drivers launched before it; set it to a long random value (the chart "
            "does)",
            ENV_CONTROL_KEY,
        )
    try:
        kopf.run(
            clusterwide=settings.all_namespaces,
            namespaces=settings.namespaces,
            peering_name=settings.peering,
            standalone=settings.peering is None,
            liveness_endpoint=None,
            ready_flag=ready,
            priority=args.priority if args.priority is not None else secrets.randbelow(1_000_000),
        )
    finally:
        for server in servers:
            server.stop()
    return 0
