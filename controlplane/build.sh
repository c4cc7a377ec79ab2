#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd from
# the Go module in this directory (go.mod and go.sum pin every version) into
#   <repo>/.cache/controlplane/<kubernetes version>/bin/
# (GIC_CONTROLPLANE_DIR overrides <repo>/.cache/controlplane/<version>). Binaries built
# from the same inputs (go.mod, go.sum, cmd/, this script, build_lib.sh) are reused;
# anything else rebuilds all five. Uses `go` from PATH when it is at least the version
# go.mod asks for, else installs the pinned toolchain from the Go module proxy into
# <repo>/.cache/go (install_go.py). Prints each binary as it builds, with the elapsed
# time, then the total time and the disk used by the binaries and Go's caches. The steps
# the three builds (this, node/, helm/) share are in build_lib.sh.
#
# Usage: controlplane/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
# shellcheck source=build_lib.sh
. "$root/controlplane/build_lib.sh"
version=$(gic_k8s_version "$here/go.mod")
out=${GIC_CONTROLPLANE_DIR:-$root/.cache/controlplane/$version}
bin=$out/bin
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)
force=0
[ "${1:-}" = "--force" ] && force=1

digest=$(gic_inputs_digest go.mod go.sum build.sh cmd)
gic_start_build "controlplane $version" controlplane
gic_k8s_ldflags "$version"

ticker=""
stop_ticker() {
    if [ -n "$ticker" ]; then
        kill "$ticker" 2>/dev/null || true
        wait "$ticker" 2>/dev/null || true
        ticker=""
    fi
}
trap stop_ticker EXIT

total_start=$(date +%s)
i=0
for name in "${binaries[@]}"; do
    i=$((i + 1))
    start=$(date +%s)
    echo "[$i/${#binaries[@]}] $name: building"
    (
        while sleep 30; do
            echo "[$i/${#binaries[@]}] $name: $(fmt_seconds $(($(date +%s) - start))) elapsed"
        done
    ) &
    ticker=$!
    "$go" build -p 2 -trimpath -ldflags "$ldflags" -o "$staging/$name" "./cmd/$name"
    stop_ticker
    size=$(du -h "$staging/$name" | cut -f1)
    echo "[$i/${#binaries[@]}] $name: done in $(fmt_seconds $(($(date +%s) - start))) ($size)"
done

gic_publish
echo "controlplane $version: built in $(fmt_seconds $(($(date +%s) - total_start)))"
echo "  binaries:      $(du -sh "$bin" | cut -f1)  $bin"
for var in GOMODCACHE GOCACHE; do
    dir=$("$go" env "$var")
    printf '  %-14s %s  %s\n' "$var:" "$(du -sh "$dir" 2>/dev/null | cut -f1)" "$dir"
done
