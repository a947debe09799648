#!/usr/bin/env bash
# Build the image of taskenv's services (deploy/Dockerfile) without any registry:
# the Debian base image first (deploy/image/build-base.sh, kept once built), then
# wheels of taskenv and its dependencies built here with the project's virtualenv,
# then the image, which installs them with no index.
#
#   deploy/image/build-taskenv.sh                      build localhost/taskenv:latest
#   IMAGE=localhost/x:y BASE=localhost/b:c PYTHON=python3 deploy/image/build-taskenv.sh
#
# It always rebuilds (the image must hold the code as it is now); podman's layer
# cache keeps that to the steps whose input changed.
set -euo pipefail
cd "$(dirname "$0")/../.."

IMAGE=${IMAGE:-localhost/taskenv:latest}
BASE=${BASE:-localhost/taskenv-base:bookworm}
PYTHON=${PYTHON:-.venv/bin/python}
SOURCE=var/image/source
WHEELS=var/image/wheels  # the dependencies: the same files from one build to the next
APP=var/image/app  # taskenv's own wheel, new each time

IMAGE=$BASE deploy/image/build-base.sh

# The wheel is built from a copy of the sources, so that no build/ directory is left
# in the working tree.
rm -rf "$SOURCE" "$WHEELS" "$APP"
mkdir -p "$SOURCE" "$APP"
cp -r pyproject.toml README.md api workers shared cli "$SOURCE"/
find "$SOURCE" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m pip wheel --quiet --wheel-dir "$WHEELS" "$SOURCE"
# Apart, so that a code change rebuilds only the image's last layer.
mv "$WHEELS"/taskenv-*.whl "$APP"/
# The image's Python is Debian's, not ours, and some dependencies differ by version
# (redis needs async-timeout before 3.11.3): ask the image's pip what it still
# lacks, and add it as a wheel built here, until nothing is missing.
missing() {
    podman run --rm -v "$PWD/$WHEELS:/wheels:ro" -v "$PWD/$APP:/app:ro" "$BASE" sh -c \
        'python3 -m venv /tmp/v && /tmp/v/bin/pip install --dry-run --no-index \
            --find-links /wheels --find-links /app taskenv 2>&1 || true' |
        sed -n 's/^ERROR: No matching distribution found for \([^;]*\).*/\1/p'
}
for _ in 1 2 3 4 5; do
    requirement=$(missing)
    [[ -n $requirement ]] || break
    "$PYTHON" -m pip wheel --quiet --wheel-dir "$WHEELS" "$requirement"
done

podman build --quiet --build-arg BASE="$BASE" --file deploy/Dockerfile --tag "$IMAGE" . >/dev/null
echo "built $IMAGE"
