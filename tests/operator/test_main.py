"""The ``gic-operator`` command line: options, their validation and the settings."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from gic_operator import main as cli
from gic_operator.operator_settings import OperatorSettings
from gic_runtime.checkpoint.manifest_limits import OPERATOR_LIMITS


def error_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(list(argv))
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gic-operator")
    return err.splitlines()[-1]


def test_defaults() -> None:
    args = cli.parse_args(["--namespace", "prod"])
    assert (args.metrics_port, args.health_port, args.log_level) == (8080, 8081, "INFO")
    assert cli.settings_from_args(args) == OperatorSettings(
        reconcile_interval_s=5.0, peering="gic-operator", namespaces=("prod",)
    )


def test_namespaces_peering_and_interval() -> None:
    args = cli.parse_args(
        ["-n", "a", "--namespace", "b", "-n", "a", "--standalone", "--reconcile-interval", "0.5"]
    )
    assert cli.settings_from_args(args) == OperatorSettings(
        reconcile_interval_s=0.5, peering=None, namespaces=("a", "b")
    )
    args = cli.parse_args(["--all-namespaces", "--peering", "team-a", "--log-level", "debug"])
    assert args.log_level == "DEBUG"
    assert cli.settings_from_args(args) == OperatorSettings(
        peering="team-a", namespaces=(), all_namespaces=True
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "no namespace to watch: give --namespace NS (repeatable) or --all-namespaces"),
        (["-n", "a", "--all-namespaces"], "--namespace and --all-namespaces exclude each other"),
        (["-n", "Prod_1"], "invalid namespace name(s) 'Prod_1'"),
        (["-A", "--standalone", "--peering", "x"], "--standalone and --peering exclude"),
        (["-A", "--metrics-port", "70000"], "--metrics-port 70000 is not a port"),
        (["-A", "--health-port", "-2"], "--health-port -2 is not a port"),
        (["-A", "--reconcile-interval", "0"], "--reconcile-interval 0.0 must be a positive"),
        (["-A", "--reconcile-interval", "nan"], "--reconcile-interval nan must be a positive"),
        (["-A", "--log-level", "loud"], "invalid choice: 'LOUD'"),
        (["-A", "--metrics-port", "http"], "invalid int value: 'http'"),
    ],
)
def test_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert message in error_of(capsys, *argv)


def test_several_problems_are_reported_together(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_of(capsys, "--health-port", "-5", "--reconcile-interval", "-1")
    assert "no namespace to watch" in line
    assert "--health-port -5" in line
    assert "--reconcile-interval -1.0" in line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-A"], [(8081, False), (8080, True)]),
        (["-A", "--metrics-port", "-1"], [(8081, False)]),
        (["-A", "--health-port", "-1", "--metrics-port", "-1"], []),
        (["-A", "--health-port", "9000", "--metrics-port", "9000"], [(9000, True)]),
        (["-A", "--health-port", "0", "--metrics-port", "0"], [(0, False), (0, True)]),
    ],
)
def test_servers(argv: list[str], expected: list[tuple[int, bool]]) -> None:
    servers = cli.build_servers(cli.parse_args(argv), threading.Event())
    assert [(s.port, s.serves_metrics) for s in servers] == expected


def test_servers_bind_the_given_address() -> None:
    args = cli.parse_args(["-A", "--bind-address", "10.1.2.3"])
    servers = cli.build_servers(args, threading.Event())
    assert [s.addresses for s in servers] == [("10.1.2.3", "127.0.0.1")] * 2
    args = cli.parse_args(["-A", "--bind-address", "127.130.0.7"])
    assert [s.addresses for s in cli.build_servers(args, threading.Event())] == [
        ("127.130.0.7",)
    ] * 2
    assert [s.addresses for s in cli.build_servers(cli.parse_args(["-A"]), threading.Event())] == [
        ("0.0.0.0",)
    ] * 2


def test_warn_unwatched_is_for_a_namespaced_operator(capsys: pytest.CaptureFixture[str]) -> None:
    settings = cli.settings_from_args(cli.parse_args(["-n", "team-a", "--warn-unwatched"]))
    assert settings.warn_unwatched and settings.namespaces == ("team-a",)
    assert not cli.settings_from_args(cli.parse_args(["-n", "team-a"])).warn_unwatched
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["-A", "--warn-unwatched"])
    assert exited.value.code == 2
    assert "--warn-unwatched has nothing to warn about with --all-namespaces" in (
        capsys.readouterr().err
    )


def test_a_bind_address_that_is_no_ip_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["-A", "--bind-address", "pod-ip"])
    assert exited.value.code == 2
    assert "--bind-address: 'pod-ip' is not an IP address" in capsys.readouterr().err


def test_help_mentions_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for option in (
        "--namespace",
        "--all-namespaces",
        "--peering",
        "--standalone",
        "--metrics-port",
        "--health-port",
        "--reconcile-interval",
        "--log-level",
        "--verbose",
        "--bind-address",
        "--warn-unwatched",
    ):
        assert option in out


def test_a_taken_port_exits_with_advice_that_works() -> None:
    """A replica whose health port is taken on its address exits with 1 and says what to
    change (the server starts before kopf, so no cluster is needed)."""
    with socket.socket() as taken:
        taken.bind(("127.133.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [sys.executable, "-m", "gic_operator", "-n", "ns", "--standalone"]
        command += ["--metrics-port", "-1", "--health-port", str(port)]
        result = subprocess.run(
            [*command, "--bind-address", "127.133.0.1"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert result.returncode == 1, result.stderr
    assert f"127.133.0.1:{port}" in result.stderr
    assert "give --metrics-port and --health-port free ports (0: any)" in result.stderr
    assert "--bind-address (the Helm chart passes $(POD_IP))" in result.stderr


def test_the_manifest_limit_scales_what_the_operator_decodes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    default = cli.settings_from_args(cli.parse_args(["-A"])).manifest_limits
    assert default == OPERATOR_LIMITS
    limits = cli.settings_from_args(cli.parse_args(["-A", "--max-manifest-mib", "16"]))
    assert limits.manifest_limits.max_bytes == 16 << 20
    assert limits.manifest_limits.max_values == 2 * OPERATOR_LIMITS.max_values
    assert limits.manifest_limits.max_references == 2 * OPERATOR_LIMITS.max_references
    assert "--max-manifest-mib 0 must be 1-64" in error_of(capsys, "-A", "--max-manifest-mib", "0")
