#!/usr/bin/env bash
# podman as this project runs it: `images/podman.sh ARGS...` runs `podman ARGS...` with a
# containers.conf of its own (<repo>/.cache/images/containers.conf, rewritten on every
# call, pointed at by CONTAINERS_CONF) that
#   * uses runc as the OCI runtime: crun refuses a host whose cgroup v1 and v2
#     hierarchies are mixed, runc runs there and on a plain cgroup v2 host alike;
#   * gives every container (and every build step) the open-files and process limits of
#     the calling shell instead of podman's much higher defaults, which a process without
#     CAP_SYS_RESOURCE may not set (runc: "error setting rlimits ... operation not
#     permitted"). The process limit is capped at 16384: runc is refused some values
#     the shell reports.
# Nothing else of podman's configuration changes (storage stays in /var/lib/containers
# for root). GIC_PODMAN_CONF names another containers.conf instead.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -z "${GIC_PODMAN_CONF:-}" ]; then
    conf=$root/.cache/images/containers.conf
    mkdir -p "$(dirname "$conf")"
    nofile_soft=$(ulimit -Sn) nofile_hard=$(ulimit -Hn)
    nproc=$(ulimit -Su)
    if [ "$nproc" = unlimited ] || [ "$nproc" -gt 16384 ]; then nproc=16384; fi
    [ "$nofile_hard" = unlimited ] && nofile_hard=$nofile_soft
    cat >"$conf.$$" <<CONF
# Written by images/podman.sh from the calling shell's limits; do not edit.
[containers]
default_ulimits = ["nofile=$nofile_soft:$nofile_hard", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
CONF
    mv "$conf.$$" "$conf"
    export CONTAINERS_CONF=$conf
else
    export CONTAINERS_CONF=$GIC_PODMAN_CONF
fi
exec podman "$@"
