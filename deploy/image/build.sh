#!/usr/bin/env bash
# Build the local runtime image taskenv launches tasks in, without any registry:
# a root filesystem holding one statically linked busybox (Debian's busybox-static)
# plus a symlink per applet (sh, env, cat, echo, sleep, ...), imported with
# `podman import`.
#
#   deploy/image/build.sh              build localhost/taskenv-runtime:latest unless it exists
#   FORCE=1 deploy/image/build.sh      rebuild it anyway
#   IMAGE=localhost/x:y BUSYBOX=/path/to/busybox deploy/image/build.sh
#
# The image's only environment is PATH (`podman kube play` sets none by default,
# and a task's scripts need one): what a task sees is the resolved env plus PATH
# and the few variables podman and the step shell add (see docs/launchers.md).
set -euo pipefail

IMAGE=${IMAGE:-localhost/taskenv-runtime:latest}
BUSYBOX=${BUSYBOX:-/bin/busybox}
FORCE=${FORCE:-0}
# Raised when what the image must hold changes, so an older build is rebuilt by itself.
# 2: /work writable by every user (steps run as nobody, never root).
REVISION=2

built=$(podman image inspect --format '{{index .Labels "taskenv.io/runtime-revision"}}' \
    "$IMAGE" 2>/dev/null || true)
if [[ $FORCE != 1 ]] && [[ $built == "$REVISION" ]]; then
    echo "image $IMAGE exists (FORCE=1 rebuilds it)"
    exit 0
fi
if [[ ! -x $BUSYBOX ]]; then
    echo "no busybox at $BUSYBOX: apt-get install busybox-static" >&2
    exit 1
fi
if ldd "$BUSYBOX" >/dev/null 2>&1; then
    echo "$BUSYBOX is dynamically linked; the image needs a static one (busybox-static)" >&2
    exit 1
fi

IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
old=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
rootfs=$(mktemp -d "${TMPDIR:-/tmp}/taskenv-rootfs.XXXXXX")
trap 'rm -rf "$rootfs"' EXIT

mkdir -p "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,proc,sys,dev,run,var/tmp,work}
# /work is where the steps start (WORKDIR): the step's user (nobody) writes there, as in /tmp.
chmod 1777 "$rootfs/tmp" "$rootfs/var/tmp" "$rootfs/work"
chmod 0700 "$rootfs/root"
install -m 0755 "$BUSYBOX" "$rootfs/bin/busybox"
# One symlink per applet at the path busybox expects it (bin/sh, usr/bin/env, ...).
while read -r applet; do
    [[ $applet == */* ]] || continue  # `linuxrc` and other top-level entries: not needed
    [[ -e $rootfs/$applet ]] || ln -s /bin/busybox "$rootfs/$applet"
done < <("$BUSYBOX" --list-full)

cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF

tar -C "$rootfs" --numeric-owner --owner=0 --group=0 -c . |
    podman import --quiet --change 'CMD ["/bin/sh"]' --change 'WORKDIR /work' \
        --change "LABEL taskenv.io/runtime-revision=$REVISION" \
        --change "ENV PATH=$IMAGE_PATH" \
        --message "taskenv runtime: busybox $("$BUSYBOX" | head -n1 | awk '{print $2}')" \
        - "$IMAGE" >/dev/null
if [[ -n $old && $old != "$(podman image inspect --format '{{.Id}}' "$IMAGE")" ]]; then
    podman image rm "$old" >/dev/null 2>&1 || true  # still used by a container: keep it
fi
echo "built $IMAGE"
