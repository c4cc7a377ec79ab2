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
# the same inputs (go.mod, go.sum, cmd/, dns/, this script) are reused; `--force` rebuilds.
# Refuses to build when go.mod's k8s.io/kubernetes differs from the control plane's. Uses
# `go` from PATH when it is at least the version go.mod asks for, else the toolchain that
# ../install_go.py installs into <repo>/.cache/go. Prints the time each binary took.
#
# Usage: controlplane/node/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$(dirname "$here")")
k8s_version() { awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$1"; }
version=$(k8s_version "$here/go.mod")
plane=$(k8s_version "$here/../go.mod")
if [ "$version" != "$plane" ]; then
    echo "node: go.mod pins k8s.io/kubernetes $version, the control plane $plane;" \
        "move both together (see controlplane/README.md)" >&2
    exit 1
fi
go_needed=$(awk '$1 == "go" { print $2; exit }' "$here/go.mod")
out=${GIC_NODE_DIR:-$root/.cache/controlplane/node-$version}
bin=$out/bin
binaries=(kubelet gic-pause gic-http kube-proxy coredns)
force=0
[ "${1:-}" = "--force" ] && force=1

fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

inputs_digest() {
    (
        cd "$here"
        find go.mod go.sum build.sh cmd dns -type f | LC_ALL=C sort | xargs sha256sum
    ) | sha256sum | cut -d' ' -f1
}

up_to_date() {
    [ "$force" = 0 ] && [ -f "$bin/.inputs" ] || return 1
    [ "$(cat "$bin/.inputs")" = "$digest" ] || return 1
    for name in "${binaries[@]}"; do
        [ -x "$bin/$name" ] || return 1
    done
}

digest=$(inputs_digest)
if up_to_date; then
    echo "node $version: up to date in $bin"
    exit 0
fi
mkdir -p "$out"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9  # another build of the same version finishes first
    if up_to_date; then
        echo "node $version: up to date in $bin"
        exit 0
    fi
fi

version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
go=""
if command -v go >/dev/null 2>&1; then
    have=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9][0-9.]*\).*/\1/p')
    if [ -n "$have" ] && version_ge "$have" "$go_needed"; then
        go=$(command -v go)
    fi
fi
if [ -z "$go" ]; then
    go=$("${PYTHON:-python3}" "$root/controlplane/install_go.py" "$root/.cache/go")
fi
echo "node $version: building with $("$go" version | cut -d' ' -f3) into $bin"

# The version stamps ../build.sh sets, so the kubelet reports v1.37.2 like the control plane.
cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
build_date=$("$go" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
major=${version#v}
major=${major%%.*}
minor=${version#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done

staging=$out/.bin.partial
rm -rf "$staging"
mkdir -p "$staging"
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
echo "$digest" >"$staging/.inputs"
rm -rf "$bin"
mv "$staging" "$bin"
echo "node $version: built in $(fmt_seconds $(($(date +%s) - total_start))) into $bin"
