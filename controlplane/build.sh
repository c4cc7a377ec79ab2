#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd from
# the Go module in this directory (go.mod and go.sum pin every version) into
#   <repo>/.cache/controlplane/<kubernetes version>/bin/
# (GIC_CONTROLPLANE_DIR overrides <repo>/.cache/controlplane/<version>). Binaries built
# from the same inputs (go.mod, go.sum, cmd/, this script) are reused; anything else
# rebuilds all five. Uses `go` from PATH when it is at least the version go.mod asks
# for, else installs the pinned toolchain from the Go module proxy into <repo>/.cache/go
# (install_go.py). Prints each binary as it builds, with the elapsed time, then the total
# time and the disk used by the binaries and Go's caches.
#
# Usage: controlplane/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
go_needed=$(awk '$1 == "go" { print $2; exit }' "$here/go.mod")
out=${GIC_CONTROLPLANE_DIR:-$root/.cache/controlplane/$version}
bin=$out/bin
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd)
force=0
[ "${1:-}" = "--force" ] && force=1

fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

inputs_digest() {
    (
        cd "$here"
        find go.mod go.sum build.sh cmd -type f | LC_ALL=C sort | xargs sha256sum
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
    echo "controlplane $version: up to date in $bin"
    exit 0
fi

mkdir -p "$out"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9  # another build of the same version finishes first
    if up_to_date; then
        echo "controlplane $version: up to date in $bin"
        exit 0
    fi
fi

# A Go toolchain at least as new as go.mod's `go` line.
version_ge() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
go_version_of() { GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9][0-9.]*\).*/\1/p'; }
go=""
if command -v go >/dev/null 2>&1; then
    have=$(go_version_of go)
    if [ -n "$have" ] && version_ge "$have" "$go_needed"; then
        go=$(command -v go)
    else
        echo "controlplane: go ${have:-?} on PATH is older than $go_needed"
    fi
fi
if [ -z "$go" ]; then
    go=$("${PYTHON:-python3}" "$here/install_go.py" "$root/.cache/go")
fi
echo "controlplane $version: building with $("$go" version | cut -d' ' -f3) into $bin"

# Version stamps as Kubernetes' hack/lib/version.sh sets them; the build date is the
# release's module timestamp, so the same inputs give the same binaries.
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

rm -rf "$bin"
mv "$staging" "$bin"
echo "$digest" >"$bin/.inputs"
echo "controlplane $version: built in $(fmt_seconds $(($(date +%s) - total_start)))"
echo "  binaries:      $(du -sh "$bin" | cut -f1)  $bin"
for var in GOMODCACHE GOCACHE; do
    dir=$("$go" env "$var")
    printf '  %-14s %s  %s\n' "$var:" "$(du -sh "$dir" 2>/dev/null | cut -f1)" "$dir"
done
