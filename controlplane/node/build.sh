#!/usr/bin/env bash
# Builds the local node's binaries from the Go module in this directory (go.mod and go.sum
# pin k8s.io/kubernetes and every module it needs, at the versions ../go.mod pins) into
#   <repo>/.cache/controlplane/node-<kubernetes version>/bin/
#     kubelet    k8s.io/kubernetes/cmd/kubelet, the real kubelet
#     gic-pause  the pod sandbox's process (cmd/gic-pause), made into an image locally
#     gic-http   a one-line HTTP server (cmd/gic-http), the tests' Service backend image
#     kube-proxy k8s.io/kubernetes/cmd/kube-proxy, Services as iptables rules
#     coredns    CoreDNS with the plugins of a cluster DNS, from dns/ (a module of its own
#                pinning github.com/coredns/coredns)
# (GIC_NODE_DIR overrides <repo>/.cache/controlplane/node-<version>). Binaries built from
# the same inputs (go.mod, go.sum, cmd/, dns/, this script, ../build_lib.sh) are reused;
# `--force` rebuilds.
# Refuses to build when go.mod's k8s.io/kubernetes differs from the control plane's. Uses
# `go` from PATH when it is at least the version go.mod asks for, else the toolchain that
# ../install_go.py installs into <repo>/.cache/go. Prints the time each binary took.
#
# Usage: controlplane/node/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$(dirname "$here")")
# shellcheck source=../build_lib.sh
. "$root/controlplane/build_lib.sh"
version=$(gic_k8s_version "$here/go.mod")
plane=$(gic_k8s_version "$here/../go.mod")
if [ "$version" != "$plane" ]; then
    echo "node: go.mod pins k8s.io/kubernetes $version, the control plane $plane;" \
        "move both together (see controlplane/README.md)" >&2
    exit 1
fi
out=${GIC_NODE_DIR:-$root/.cache/controlplane/node-$version}
bin=$out/bin
binaries=(kubelet gic-pause gic-http kube-proxy coredns)
force=0
[ "${1:-}" = "--force" ] && force=1

digest=$(gic_inputs_digest go.mod go.sum build.sh cmd dns)
gic_start_build "node $version"
# The version stamps ../build.sh sets, so the kubelet reports v1.37.2 like the control plane.
gic_k8s_ldflags "$version"

total_start=$(date +%s)
for name in "${binaries[@]}"; do
    start=$(date +%s)
    echo "node: $name: building"
    if [ "$name" = coredns ]; then
        # CoreDNS's module, its own version stamps (none: coremain reports its release).
        (cd dns && "$go" build -p 2 -trimpath -ldflags "-s -w" -o "$staging/$name" .)
    else
        "$go" build -p 2 -trimpath -ldflags "$ldflags" -o "$staging/$name" "./cmd/$name"
    fi
    echo "node: $name: done in $(fmt_seconds $(($(date +%s) - start))) ($(du -h "$staging/$name" | cut -f1))"
done
gic_publish
echo "node $version: built in $(fmt_seconds $(($(date +%s) - total_start))) into $bin"
