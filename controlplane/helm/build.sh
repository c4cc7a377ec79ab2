#!/usr/bin/env bash
# Builds the Helm CLI from the Go module in this directory (go.mod and go.sum pin Helm and
# every module it needs; go.mod's `tool` line names helm.sh/helm/v3/cmd/helm) into
#   <repo>/.cache/controlplane/helm-<helm version>/bin/helm
# (GIC_HELM_DIR overrides <repo>/.cache/controlplane/helm-<version>). A binary built from
# the same inputs (go.mod, go.sum, this script, ../build_lib.sh) is reused; `--force`
# rebuilds. Uses `go` from PATH when it is at least the version go.mod asks for, else the
# toolchain that ../install_go.py installs from the Go module proxy into <repo>/.cache/go
# (the one the control plane's build uses). Needs no network but the Go module proxy.
# Prints the time it took and the binary's path. The steps the three builds share are in
# ../build_lib.sh.
#
# Usage: controlplane/helm/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$(dirname "$here")")
# shellcheck source=../build_lib.sh
. "$root/controlplane/build_lib.sh"
version=$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2; exit }' "$here/go.mod")
out=${GIC_HELM_DIR:-$root/.cache/controlplane/helm-$version}
bin=$out/bin
binaries=(helm)
force=0
[ "${1:-}" = "--force" ] && force=1

digest=$(gic_inputs_digest go.mod go.sum build.sh)
gic_start_build "helm $version"
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
"$go" build -p 2 -trimpath -ldflags "$ldflags" -o "$staging/helm" "$pkg/cmd/helm"
gic_publish
echo "helm $version: built in $(fmt_seconds $(($(date +%s) - start)))" \
    "($(du -h "$bin/helm" | cut -f1)) $bin/helm"
