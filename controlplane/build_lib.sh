# Shared by controlplane/build.sh, controlplane/node/build.sh and controlplane/helm/build.sh,
# which source it (it runs nothing by itself): the digest of a build's inputs, the check
# that the binaries built from them are there (under a lock, so two builds of the same
# version do not race), choosing a Go toolchain, Kubernetes' version stamps, and timings.
#
# The functions read the caller's variables: `here` (the module's folder), `root` (the
# repository), `force` (1 for --force), `out` and `bin` (where the binaries go),
# `binaries` (their names) and `digest` (set from gic_inputs_digest).

fmt_seconds() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# gic_inputs_digest PATH...: one sha256 of every file under the PATHs (relative to $here)
# and of this file.
gic_inputs_digest() {
    (
        cd "$here"
        find "$@" -type f | LC_ALL=C sort | xargs sha256sum
        sha256sum "$root/controlplane/build_lib.sh" | cut -d' ' -f1
    ) | sha256sum | cut -d' ' -f1
}

gic_up_to_date() {
    [ "$force" = 0 ] && [ -f "$bin/.inputs" ] || return 1
    [ "$(cat "$bin/.inputs")" = "$digest" ] || return 1
    for name in "${binaries[@]}"; do
        [ -x "$bin/$name" ] || return 1
    done
}

# gic_exit_if_up_to_date LABEL: exit 0 saying so when the binaries are up to date, before
# and again after taking the build's lock (another build of the same version finishes
# first); the lock is held until the script ends.
gic_exit_if_up_to_date() {
    if gic_up_to_date; then
        echo "$1: up to date in $bin"
        exit 0
    fi
    mkdir -p "$out"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$out/.lock"
        flock 9
        if gic_up_to_date; then
            echo "$1: up to date in $bin"
            exit 0
        fi
    fi
}

# gic_select_go [LABEL]: sets `go` to a Go toolchain at least as new as go.mod's `go`
# line: `go` from PATH when it is, else the one install_go.py installs into
# <repo>/.cache/go. With LABEL, says so when the one on PATH is too old.
gic_select_go() {
    local needed have=""
    needed=$(awk '$1 == "go" { print $2; exit }' "$here/go.mod")
    go=""
    if command -v go >/dev/null 2>&1; then
        have=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null | sed -n 's/^go\([0-9][0-9.]*\).*/\1/p')
        if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$needed" "$have" | sort -V | head -n1)" = "$needed" ]; then
            go=$(command -v go)
        elif [ -n "${1:-}" ]; then
            echo "$1: go ${have:-?} on PATH is older than $needed"
        fi
    fi
    if [ -z "$go" ]; then
        go=$("${PYTHON:-python3}" "$root/controlplane/install_go.py" "$root/.cache/go")
    fi
}

# gic_start_build LABEL [GO_LABEL]: exit when up to date (gic_exit_if_up_to_date LABEL),
# else choose Go (gic_select_go GO_LABEL), say what builds with it, and enter $here with
# Go's build settings and an empty staging folder `staging` for gic_publish.
gic_start_build() {
    gic_exit_if_up_to_date "$1"
    gic_select_go "${2:-}"
    echo "$1: building with $("$go" version | cut -d' ' -f3) into $bin"
    cd "$here"
    export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
    staging=$out/.bin.partial
    rm -rf "$staging"
    mkdir -p "$staging"
}

# gic_k8s_version GO_MOD: the k8s.io/kubernetes version that go.mod requires.
gic_k8s_version() { awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$1"; }

# gic_k8s_ldflags VERSION: sets `ldflags` to Kubernetes' version stamps as its
# hack/lib/version.sh sets them; the build date is the release's module timestamp, so
# the same inputs give the same binaries. Run in the module's folder, with `go` set.
gic_k8s_ldflags() {
    local version=$1 build_date major minor pkg
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
}

# gic_publish: moves the staged binaries ($staging) with the inputs' digest into $bin,
# replacing what was there.
gic_publish() {
    echo "$digest" >"$staging/.inputs"
    rm -rf "$bin"
    mv "$staging" "$bin"
}
