#!/usr/bin/env bash
# Build the base image of taskenv's services without any registry: a Debian root
# filesystem made by mmdebstrap from Debian packages (python3 and python3-venv for
# the API and workers, bubblewrap for the local launcher's sandbox, redis-server for
# the compose stack's Redis, slurm-client and munge for the slurm launcher's sbatch,
# squeue and scancel), imported with `podman import`.
#
#   deploy/image/build-base.sh             build localhost/taskenv-base:bookworm unless it exists
#   FORCE=1 deploy/image/build-base.sh     rebuild it (and its cached root filesystem)
#   IMAGE=localhost/x:y SUITE=bookworm MIRROR=http://deb.debian.org/debian deploy/image/build-base.sh
#
# The root filesystem is kept as a tarball under var/image/, so that importing the
# image again (after `podman rmi`) takes seconds instead of a new bootstrap.
set -euo pipefail
cd "$(dirname "$0")/../.."

SUITE=${SUITE:-bookworm}
IMAGE=${IMAGE:-localhost/taskenv-base:$SUITE}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
CACHE=${CACHE:-var/image/taskenv-base-$SUITE.tar}
FORCE=${FORCE:-0}
PACKAGES=python3,python3-venv,bubblewrap,libseccomp2,redis-server,ca-certificates,tini,slurm-client,munge

if [[ $FORCE != 1 ]] && podman image exists "$IMAGE"; then
    echo "image $IMAGE exists (FORCE=1 rebuilds it)"
    exit 0
fi
if [[ $FORCE == 1 || ! -s $CACHE ]]; then
    command -v mmdebstrap >/dev/null || { echo "apt-get install mmdebstrap" >&2; exit 1; }
    mkdir -p "$(dirname "$CACHE")"
    # minbase: essential packages and apt only; recommends stay out of an image.
    mmdebstrap --format=tar --variant=minbase --include="$PACKAGES" --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/{doc,man,locale,info}/*' \
        "$SUITE" "$CACHE.partial" "$MIRROR"
    mv "$CACHE.partial" "$CACHE"
fi

IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
podman import --quiet --change "ENV PATH=$IMAGE_PATH" --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "taskenv base: Debian $SUITE with ${PACKAGES//,/ }" \
    "$CACHE" "$IMAGE" >/dev/null
echo "built $IMAGE"
