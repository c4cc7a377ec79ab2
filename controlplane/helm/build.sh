#!/usr/bin/env bash
# Builds the Helm CLI from the Go module in this directory (go.mod and go.sum pin Helm and
# every module it needs; go.mod's `tool` line names helm.sh/helm/v3/cmd/helm) into
#   <repo>/.cache/controlplane/helm-<helm version>/bin/helm
# (GIC_HELM_DIR overrides <repo>/.cache/controlplane/helm-<version>). A binary built from
# the same inputs (go.mod, go.sum, this script) is reused; `--force` rebuilds. Uses `go`
# from PATH when it is at least the version go.mod asks for, else the toolchain that
# ../install_go.py installs from the Go module proxy into <repo>/.cache/go (the one the
# control plane's build uses). Needs no network but the Go module proxy. Prints the time
# it took and the binary's path.
#
# Usage: controlplane/helm/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$(dirname "$here")")
version=$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
go_needed=$(awk '$1 == "go" { print $2; exit }' "$here/go.mod")
out=${GIC_HELM_DIR:-$root/.cache/controlplane/helm-$version}
bin=$out/bin
force=0
[ "${1:-}" = "--force" ] && force=1

inputs_digest() {
    (cd "$here" && sha256sum go.mod go.sum build.sh) | sha256sum | cut -d' ' -f1
}

up_to_date() {
    [ "$force" = 0 ] && [ -f "$bin/.inputs" ] && [ -x "$bin/helm" ] || return 1
    [ "$(cat "$bin/.inputs")" = "$digest" ]
}

digest=$(inputs_digest)
if up_to_date; then
    echo "helm $version: up to date in $bin"
    exit 0
fi
mkdir -p "$out"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$out/.lock"
    flock 9  # another build of the same version finishes first
    if up_to_date; then
        echo "helm $version: up to date in $bin"
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
echo "helm $version: building with $("$go" version | cut -d' ' -f3) into $bin"

cd "$here"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
# As Helm's own Makefile stamps a release: the version, a clean tree, and the Kubernetes
# version its client libraries speak (client-go v0.X.Y -> 1.X) for chart capabilities.
client_go=$("$go" list -m -f '{{.Version}}' k8s.io/client-go)
k8s_minor=${client_go#v0.}
k8s_minor=${k8s_minor%%.*}
pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=$version -X $pkg/internal/version.metadata="
ldflags+=" -X $pkg/internal/version.gitCommit= -X $pkg/internal/version.gitTreeState=clean"
for p in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X $pkg/$p.k8sVersionMajor=1 -X $pkg/$p.k8sVersionMinor=$k8s_minor"
done

start=$(date +%s)
staging=$out/.bin.partial
rm -rf "$staging"
mkdir -p "$staging"
"$go" build -p 2 -trimpath -ldflags "$ldflags" -o "$staging/helm" "$pkg/cmd/helm"
echo "$digest" >"$staging/.inputs"
rm -rf "$bin"
mv "$staging" "$bin"
elapsed=$(($(date +%s) - start))
printf 'helm %s: built in %dm%02ds (%s) %s\n' "$version" $((elapsed / 60)) $((elapsed % 60)) \
    "$(du -h "$bin/helm" | cut -f1)" "$bin/helm"
