#!/usr/bin/env bash
# Builds the GIC images from the Dockerfile with podman (images/podman.sh), on the bases
# images/build_bases.sh builds from packages (so no container registry is needed):
#
#   localhost/gic-spark:<version>     --target spark-runtime (driver and executors)
#   localhost/gic-operator:<version>  --target operator
#
# <version> is the project's (pyproject.toml). The Dockerfile's *_IMAGE build arguments
# come from .cache/images/bases.env (name@sha256:digest of each local base); with
# GIC_BASES=official the Dockerfile's own defaults are used instead (the official images
# by digest: needs a registry, and SPARK_IMAGE=name:tag@sha256:... in the environment).
#
# Reused without building while both images in podman's storage carry, as label
# io.gic.inputs, the digest of the inputs (the Dockerfile, .dockerignore, this script, what
# the Dockerfile copies: pyproject.toml, README.md, runtime/, operator/, examples/,
# requirements/, and the bases' digests); podman's layer cache shortens a rebuild after a
# change. `--force` rebuilds. Prints each image's build time and size.
#
# Build steps that install from PyPI see the build host's CA bundle
# (GIC_BUILD_CA_BUNDLE, default /etc/ssl/certs/ca-certificates.crt) mounted over the
# image's for the step only, so a TLS-intercepting proxy the host trusts works; the images
# keep Debian's bundle.
#
# Usage: images/build.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=$root/.cache/images
podman=$here/podman.sh
force=0
[ "${1:-}" = "--force" ] && force=1

version=$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/pyproject.toml" | head -n1)
spark_ref=localhost/gic-spark:$version
operator_ref=localhost/gic-operator:$version

now() { date +%s; }
fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
step() { echo "images: $*"; }

build_args=()
ca_bundle=${GIC_BUILD_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -f "$ca_bundle" ] && build_args+=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro")
if [ "${GIC_BASES:-local}" = official ]; then
    [ -n "${SPARK_IMAGE:-}" ] && build_args+=(--build-arg "SPARK_IMAGE=$SPARK_IMAGE")
    bases="official"
else
    "$here/build_bases.sh"
    while IFS= read -r line; do
        build_args+=(--build-arg "$line")
    done <"$cache/bases.env"
    bases=$(cat "$cache/bases.env")
fi

inputs_digest() {
    {
        (cd "$root" && git ls-files -co --exclude-standard -- Dockerfile .dockerignore \
            images/build.sh pyproject.toml README.md runtime operator examples requirements |
            LC_ALL=C sort | while IFS= read -r file; do
                [ -f "$file" ] && sha256sum "$file"
            done)
        echo "$bases"
    } | sha256sum | cut -d' ' -f1
}

sizes() {
    local ref
    for ref in "$spark_ref" "$operator_ref"; do
        printf '  %-40s %s  %s\n' "$ref" "$("$podman" image inspect --format '{{.Size}}' "$ref" |
            awk '{ printf "%.0f MB", $1 / 1e6 }')" \
            "$("$podman" image inspect --format '{{.Id}}' "$ref" | cut -c1-12)"
    done
}

label() { # the io.gic.inputs label of a local image (empty when it has none)
    "$podman" image inspect --format '{{ index .Labels "io.gic.inputs" }}' "$1" 2>/dev/null
}

digest=$(inputs_digest)
if [ "$force" = 0 ] &&
    "$podman" image exists "$spark_ref" && [ "$(label "$spark_ref")" = "$digest" ] &&
    "$podman" image exists "$operator_ref" && [ "$(label "$operator_ref")" = "$digest" ]; then
    step "up to date"
    sizes
    exit 0
fi

mkdir -p "$cache/work"
exec 9>"$cache/.images.lock"
flock 9
previous=$("$podman" image inspect --format '{{.Id}}' "$spark_ref" "$operator_ref" 2>/dev/null ||
    true)
total=$(now)
for target in spark-runtime:"$spark_ref" operator:"$operator_ref"; do
    start=$(now)
    step "[${target%%:*}] podman build --target ${target%%:*} -t ${target#*:}"
    "$podman" build --pull=never --layers --target "${target%%:*}" "${build_args[@]}" \
        --label "io.gic.inputs=$digest" \
        -t "${target#*:}" -f "$root/Dockerfile" "$root" >"$cache/work/${target%%:*}.log" 2>&1 || {
        tail -n 40 "$cache/work/${target%%:*}.log" >&2
        echo "images: podman build failed; its log: $cache/work/${target%%:*}.log" >&2
        exit 1
    }
    step "[${target%%:*}] done in $(fmt_seconds $(($(now) - start)))"
done
# The images these names had before, unless still in use (by a tag or a container).
current=$("$podman" image inspect --format '{{.Id}}' "$spark_ref" "$operator_ref")
for id in $previous; do
    grep -qx "$id" <<<"$current" || "$podman" rmi "$id" >/dev/null 2>&1 || true
done
step "built in $(fmt_seconds $(($(now) - total)))"
sizes
