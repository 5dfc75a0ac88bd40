#!/usr/bin/env bash
# Build the Docker image DockerSandbox runs (default agentgym-sandbox:bookworm), offline from the Debian packages of
# the mirror apt already uses: debootstrap --variant=minbase --include=python3 (python3-minimal lacks json), then
# `docker import`. No image registry is needed. Idempotent: does nothing when the image exists. Needs root,
# debootstrap and an engine.
#   bash tools/sandbox/build_image.sh [IMAGE]      (or: make sandbox-image)
set -euo pipefail
IMAGE=${1:-${AGENTGYM_DOCKER_IMAGE:-agentgym-sandbox:bookworm}}
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "build_image: $IMAGE exists"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "build_image: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
. /etc/os-release
SUITE=${DEBIAN_SUITE:-${VERSION_CODENAME:-bookworm}}
MIRROR=${DEBIAN_MIRROR:-}
if [ -z "$MIRROR" ] && [ -f /etc/apt/sources.list.d/debian.sources ]; then
    MIRROR=$(awk '$1 == "URIs:" && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$MIRROR" ] && [ -f /etc/apt/sources.list ]; then
    MIRROR=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
ROOT=$(mktemp -d /var/tmp/agentgym-image-XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
echo "build_image: debootstrap $SUITE from $MIRROR"
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 \
    || { tail -20 "$ROOT.log" >&2; rm -f "$ROOT.log"; exit 1; }
rm -f "$ROOT.log"
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc "$ROOT"/usr/share/man
tar -C "$ROOT" -c . | docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' -c 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "build_image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
