#!/usr/bin/env bash
# Build the PyTorch runtime image without any registry: a Debian root filesystem made by
# mmdebstrap from Debian packages (python3, ca-certificates), with torch 2.13.0 (the CPU
# build) and its dependencies installed into it from wheels pip downloads here, imported
# with `podman import`.  The same tree stays in var/image/, where the local and Slurm
# launchers can run it as a runtime directory (TASKENV_RUNTIMES, docs/launchers.md).
#
#   deploy/image/build-pytorch.sh              build localhost/taskenv-pytorch:2.13 unless built
#   FORCE=1 deploy/image/build-pytorch.sh      rebuild it (and its tree)
#   IMAGE=localhost/x:y SUITE=bookworm MIRROR=http://deb.debian.org/debian deploy/image/build-pytorch.sh
#
# torch is pinned: on these machines pip finds 2.13.0's CPU wheel in the local wheel
# directory its configuration names; an unpinned or newer torch is a CUDA build of
# several GB.  The wheels are installed by the host's Debian python3 (the same 3.11 as
# the tree's), so the image needs no pip and no build reaches an index from inside it.
set -euo pipefail
cd "$(dirname "$0")/../.."

SUITE=${SUITE:-bookworm}
TORCH=2.13.0
IMAGE=${IMAGE:-localhost/taskenv-pytorch:2.13}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOTFS=${ROOTFS:-var/image/taskenv-pytorch-2.13}
WHEELS=${WHEELS:-var/image/pytorch-wheels}
PYTHON=/usr/bin/python3  # Debian's: the tree's python3 is the same release
FORCE=${FORCE:-0}
# Raised when what the image must hold changes, so an older build is rebuilt by itself.
# 2: the tree names itself in usr/share/taskenv-runtime/name (what a step can read).
REVISION="2-torch$TORCH-$SUITE"
LABEL=taskenv.io/pytorch-revision
PACKAGES=python3,ca-certificates

# The revision of the tree in $ROOTFS, if it is whole.
tree_revision() { cat "$ROOTFS/.taskenv-revision" 2>/dev/null || true; }

# Make the tree in $1 the runtime directory: /work writable by the step's user (nobody),
# everything readable by every user (the local launcher's task user reads it), stamped.
install_tree() {
    chmod 1777 "$1/work"
    chmod 0755 "$1"
    echo "$REVISION" >"$1/.taskenv-revision"
    rm -rf "$ROOTFS"
    mv "$1" "$ROOTFS"
    chmod 0755 "$(dirname "$ROOTFS")"
}

built=$(podman image inspect --format "{{index .Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null || true)
if [[ $FORCE != 1 ]] && [[ $built == "$REVISION" ]]; then
    # The image is built; a checkout that lacks the tree (a fresh clone on a machine that
    # built the image before) gets it back from the image itself, without a rebuild.
    if [[ "$(tree_revision)" != "$REVISION" ]]; then
        partial="$ROOTFS.partial"
        rm -rf "$partial"
        mkdir -p "$partial"
        cid=$(podman create --quiet "$IMAGE")
        podman export "$cid" | tar -x -C "$partial" --numeric-owner
        podman rm --force "$cid" >/dev/null
        install_tree "$partial"
        echo "the tree of $IMAGE restored to $ROOTFS from the image"
    fi
    echo "image $IMAGE exists (FORCE=1 rebuilds it)"
    exit 0
fi

if [[ $FORCE == 1 || "$(tree_revision)" != "$REVISION" ]]; then
    command -v mmdebstrap >/dev/null || { echo "apt-get install mmdebstrap" >&2; exit 1; }
    "$PYTHON" -m pip --version >/dev/null 2>&1 || { echo "apt-get install python3-pip" >&2; exit 1; }
    partial="$ROOTFS.partial"
    rm -rf "$partial"
    mkdir -p "$(dirname "$ROOTFS")" "$WHEELS"
    # minbase: essential packages and apt only; recommends stay out of an image.
    mmdebstrap --quiet --format=directory --variant=minbase --include="$PACKAGES" \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
        "$SUITE" "$partial" "$MIRROR"
    # The wheels: torch pinned, its dependencies as pip resolves them (kept between builds).
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --dest "$WHEELS" \
        "torch==$TORCH"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-index \
        --find-links "$WHEELS" --root "$partial" --prefix /usr --ignore-installed \
        --no-warn-script-location --no-compile --break-system-packages "torch==$TORCH"
    # Debian's pip puts prefix /usr under /usr/local; --ignore-installed: the host's own
    # torch must not count as the tree's.
    [[ -f $partial/usr/local/lib/python3.11/dist-packages/torch/__init__.py ]] ||
        { echo "torch did not land in the tree (is its python3 still 3.11?)" >&2; exit 1; }
    mkdir -p "$partial/usr/share/taskenv-runtime"
    echo "$IMAGE" >"$partial/usr/share/taskenv-runtime/name"
    mkdir -p "$partial/work"  # where the steps start (WORKDIR)
    install_tree "$partial"
fi

IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
tar -C "$ROOTFS" --numeric-owner --exclude=./.taskenv-revision -c . |
    podman import --quiet --change "ENV PATH=$IMAGE_PATH" \
        --change 'WORKDIR /work' --change 'CMD ["/usr/bin/python3"]' \
        --change "LABEL $LABEL=$REVISION" \
        --message "taskenv PyTorch runtime: Debian $SUITE python3, torch $TORCH (CPU)" \
        - "$IMAGE" >/dev/null
# The image's own python3 imports the image's own torch, or the build fails.
if ! podman run --rm --network none "$IMAGE" python3 -c \
    "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH')"; then
    podman image rm "$IMAGE" >/dev/null 2>&1 || true
    echo "$IMAGE does not import torch $TORCH: not kept" >&2
    exit 1
fi
if [[ -n $old && $old != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]]; then
    podman image rm "$old" >/dev/null 2>&1 || true  # still used by a container: keep it
fi
echo "built $IMAGE (its tree: $ROOTFS)"
