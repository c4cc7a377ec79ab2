#!/usr/bin/env bash
# Builds the base images the Dockerfile names, from Debian packages and the locked PyPI
# packages alone (no container registry needed), with podman (images/podman.sh):
#
#   localhost/gic-base-python:bookworm  Debian bookworm (mmdebstrap, minbase) with Python
#                                       3.11 and pip: PYTHON_IMAGE (the wheel and operator
#                                       stages)
#   localhost/gic-base-jdk:bookworm     Debian bookworm with OpenJDK 17 (javac, jar):
#                                       JDK_IMAGE (the placement jar stage)
#   localhost/gic-base-spark:<version>  Debian bookworm with Python 3.11, OpenJDK 17's
#                                       runtime, tini, and Spark <version> from the pyspark
#                                       wheel requirements/run.lock pins, laid out as the
#                                       official Spark images are (images/spark/): SPARK_IMAGE
#
# Each root file system comes from mmdebstrap (bookworm, bookworm-updates and
# bookworm-security, no recommended packages, no manual pages or documentation but the
# copyright files) and is imported with `podman import`; its package list is kept in the
# image at /etc/gic-base.packages. Downloaded .deb files are kept in .cache/images/debs and
# the two Python wheels in .cache/images/wheels, so later builds download only what changed.
#
# Writes .cache/images/bases.env (every run), the Dockerfile's build arguments naming each base by
# name and digest:
#   PYTHON_IMAGE=localhost/gic-base-python:bookworm@sha256:...
#   JDK_IMAGE=localhost/gic-base-jdk:bookworm@sha256:...
#   SPARK_IMAGE=localhost/gic-base-spark:4.3.0@sha256:...
# Reused without building while the three images in podman's storage carry, as label
# io.gic.inputs, the digest of the inputs (this script, images/spark/, podman.sh, the
# pyspark and py4j entries of run.lock, the package lists): the record lives with the
# images, so a fresh clone on a machine that built them before reuses them. The Debian
# packages are whatever bookworm has at build time (a stable release: security and
# point-release updates only); `--force` rebuilds.
#
# Needs: root, mmdebstrap, podman and runc (.ci/run installs them), and pip (PIP, default
# `python3 -m pip`) to fetch and build the wheels. Prints each step with its time, then
# each image's size.
#
# Usage: images/build_bases.sh [--force]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cache=$root/.cache/images
podman=$here/podman.sh
mirror=${GIC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${GIC_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
read -r -a pip <<<"${PIP:-python3 -m pip}"
force=0
[ "${1:-}" = "--force" ] && force=1

python_packages=(python3 python3-pip ca-certificates passwd)
jdk_packages=(openjdk-17-jdk-headless ca-certificates)
spark_packages=(python3 python3-pip ca-certificates passwd openjdk-17-jre-headless tini procps
    libnss-wrapper)

now() { date +%s; }
fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
step() { echo "bases: $*"; }

# The pinned requirement NAME of run.lock with its hash lines.
lock_entry() {
    awk -v name="$1" '
        $0 ~ "^" name "==" { on = 1; print; next }
        on && /^ +--hash/ { print; next }
        { on = 0 }
    ' "$root/requirements/run.lock"
}

spark_version=$(lock_entry pyspark | sed -n 's/^pyspark==\([^ ]*\).*/\1/p')
[ -n "$spark_version" ] || { echo "no pyspark in requirements/run.lock" >&2; exit 1; }
python_ref=localhost/gic-base-python:bookworm
jdk_ref=localhost/gic-base-jdk:bookworm
spark_ref=localhost/gic-base-spark:$spark_version

inputs_digest() {
    {
        (cd "$root" && find images/build_bases.sh images/podman.sh images/spark -type f |
            LC_ALL=C sort | xargs sha256sum)
        lock_entry pyspark
        lock_entry py4j
        echo "${python_packages[*]} / ${jdk_packages[*]} / ${spark_packages[*]} / $mirror"
    } | sha256sum | cut -d' ' -f1
}

reference() { # name:tag@sha256:<manifest digest> of a local image
    echo "$1@$("$podman" image inspect --format '{{.Digest}}' "$1")"
}

label() { # the io.gic.inputs label of a local image (empty when it has none)
    "$podman" image inspect --format '{{ index .Labels "io.gic.inputs" }}' "$1" 2>/dev/null
}

up_to_date() {
    [ "$force" = 0 ] || return 1
    local ref
    for ref in "$python_ref" "$jdk_ref" "$spark_ref"; do
        "$podman" image exists "$ref" && [ "$(label "$ref")" = "$digest" ] || return 1
    done
}

bases_env() {
    echo "PYTHON_IMAGE=$(reference "$python_ref")"
    echo "JDK_IMAGE=$(reference "$jdk_ref")"
    echo "SPARK_IMAGE=$(reference "$spark_ref")"
}

sizes() {
    local ref
    for ref in "$python_ref" "$jdk_ref" "$spark_ref"; do
        printf '  %-40s %s\n' "$ref" "$("$podman" image inspect --format '{{.Size}}' "$ref" |
            awk '{ printf "%.0f MB", $1 / 1e6 }')"
    done
}

# rootfs NAME PACKAGES...: a bookworm minbase root file system with PACKAGES, imported
# as localhost/gic-base-NAME-rootfs:bookworm; .deb files cached in $cache/debs.
rootfs() {
    local name=$1
    shift
    local start tar includes
    start=$(now)
    tar=$cache/work/$name.tar
    includes=$(IFS=,; echo "$*")
    step "[$name] mmdebstrap bookworm minbase + $includes"
    mkdir -p "$cache/debs" "$cache/work"
    rm -f "$tar"
    # (openjdk's postinst links man pages: the directory must exist, though empty)
    if ! mmdebstrap --variant=minbase --include="$includes" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --setup-hook='mkdir -p "$1/var/cache/apt/archives" "$1/usr/share/man/man1"' \
        --setup-hook="sync-in $cache/debs /var/cache/apt/archives/" \
        --customize-hook="sync-out /var/cache/apt/archives $cache/debs" \
        --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" >"$1/etc/gic-base.packages"' \
        --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
        bookworm "$tar" \
        "deb $mirror bookworm main" \
        "deb $mirror bookworm-updates main" \
        "deb $security bookworm-security main" >"$cache/work/$name.log" 2>&1; then
        tail -n 40 "$cache/work/$name.log" >&2
        echo "bases: mmdebstrap failed; its log: $cache/work/$name.log" >&2
        exit 1
    fi
    "$podman" import --quiet \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL io.gic.inputs=$digest" \
        "$tar" "localhost/gic-base-$name-rootfs:bookworm" >/dev/null
    rm -f "$tar"
    step "[$name] done in $(fmt_seconds $(($(now) - start)))"
}

# The pyspark wheel (built from the hash-checked sdist; pip's cache keeps the build) and
# the py4j wheel, into $cache/wheels/spark-<version>.
wheels() {
    local start out
    start=$(now)
    out=$cache/wheels/spark-$spark_version
    step "[spark] pyspark $spark_version and py4j wheels (pip, hash-checked)"
    mkdir -p "$out"
    { lock_entry pyspark; lock_entry py4j; } >"$cache/work/spark-wheels.txt"
    "${pip[@]}" wheel --quiet --no-deps --require-hashes -r "$cache/work/spark-wheels.txt" \
        --wheel-dir "$out"
    step "[spark] wheels done in $(fmt_seconds $(($(now) - start)))"
}

digest=$(inputs_digest)
mkdir -p "$cache/work"
if up_to_date; then
    bases_env >"$cache/bases.env"
    step "up to date ($(tr '\n' ' ' <"$cache/bases.env"))"
    sizes
    exit 0
fi
for tool in mmdebstrap podman runc; do
    command -v "$tool" >/dev/null 2>&1 || {
        echo "bases: $tool is missing: apt-get install -y podman runc mmdebstrap" \
            "(.ci/run does)" >&2
        exit 1
    }
done

exec 9>"$cache/.bases.lock"
flock 9 # another build finishes first
refs=("$python_ref" "$jdk_ref" "$spark_ref" localhost/gic-base-{python,jdk,spark}-rootfs:bookworm)
previous=$("$podman" image inspect --format '{{.Id}}' "${refs[@]}" 2>/dev/null || true)
total=$(now)
rootfs python "${python_packages[@]}"
"$podman" tag "localhost/gic-base-python-rootfs:bookworm" "$python_ref"
rootfs jdk "${jdk_packages[@]}"
"$podman" tag "localhost/gic-base-jdk-rootfs:bookworm" "$jdk_ref"
rootfs spark "${spark_packages[@]}"
wheels

start=$(now)
step "[spark] /opt/spark from the wheels (images/spark/Containerfile)"
context=$cache/work/spark-context
rm -rf "$context"
mkdir -p "$context/wheels"
cp "$here/spark/entrypoint.sh" "$context/"
pyspark_wheel=$(ls "$cache/wheels/spark-$spark_version"/pyspark-"$spark_version"-*.whl)
py4j_wheel=$(ls "$cache/wheels/spark-$spark_version"/py4j-*.whl)
ln "$pyspark_wheel" "$py4j_wheel" "$context/wheels/" 2>/dev/null ||
    cp "$pyspark_wheel" "$py4j_wheel" "$context/wheels/"
"$podman" build --quiet --pull=never --layers=false --label "io.gic.inputs=$digest" \
    --build-arg "ROOTFS=localhost/gic-base-spark-rootfs:bookworm" \
    -f "$here/spark/Containerfile" -t "$spark_ref" "$context" >/dev/null
rm -rf "$context"
step "[spark] done in $(fmt_seconds $(($(now) - start)))"

bases_env >"$cache/bases.env"
# The images these names had before, unless still in use (by a tag or a container).
current=$("$podman" image inspect --format '{{.Id}}' "${refs[@]}")
for id in $previous; do
    grep -qx "$id" <<<"$current" || "$podman" rmi "$id" >/dev/null 2>&1 || true
done
step "built in $(fmt_seconds $(($(now) - total)))"
sizes
