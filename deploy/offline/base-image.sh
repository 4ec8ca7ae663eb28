#!/usr/bin/env bash
# A Debian bookworm base image with Python 3.11 made from Debian's own packages, for machines
# that cannot reach Docker Hub: debootstrap (minbase) into a temporary folder, then
# `docker import`. Stands in for python:3.12-slim-bookworm (PYTHON_IMAGE of the CPU image).
#   deploy/offline/base-image.sh [IMAGE]          (default local/python:3.11-bookworm; root)
set -euo pipefail
IMAGE=${1:-local/python:3.11-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$ROOTFS" "$MIRROR" >/dev/null
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb
tar -C "$ROOTFS" -c . | docker import -c 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "$IMAGE"
