#!/usr/bin/env bash
# Builds widebeam:<version>-cpu (and, where Docker Hub cannot be reached, the Redis image the
# Compose stack needs) with today's defaults where they can be reached and local stand-ins
# where not. Run from anywhere; prints the settings it used, one `NAME=VALUE` per line:
#   PYTHON_IMAGE   the CPU image's base: $PYTHON_IMAGE, else python:3.12-slim-bookworm if it
#                  is present or can be pulled, else a debootstrap image (base-image.sh)
#   REDIS_IMAGE    redis:7.4-alpine if present or pullable, else local/redis:bookworm built
#                  from redis.Dockerfile on that base
#   TORCH_INDEX_URL  the PyTorch CPU index if it answers, else PyPI, with every torch CPU wheel
#                  of pip's find-links folders copied to deploy/wheels/ (pip takes it there)
#   CA_BUNDLE      the CA bundle given to pip (empty: none)
# The CA bundle ($CA_BUNDLE, default the system one) is given to pip as the build secret
# `ca_bundle`, so it never lands in a layer. Needs BuildKit (Docker 23+, or DOCKER_BUILDKIT=1).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n1)
IMAGE=${IMAGE:-widebeam:$VERSION-cpu}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}
export DOCKER_BUILDKIT=1

available() { docker image inspect "$1" >/dev/null 2>&1 || timeout 60 docker pull -q "$1" >/dev/null 2>&1; }
answers() { timeout 15 python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" "$1" >/dev/null 2>&1; }

if [ -z "${PYTHON_IMAGE:-}" ]; then
    PYTHON_IMAGE=python:3.12-slim-bookworm
    if ! available "$PYTHON_IMAGE"; then
        PYTHON_IMAGE=local/python:3.11-bookworm
        docker image inspect "$PYTHON_IMAGE" >/dev/null 2>&1 || "$ROOT/deploy/offline/base-image.sh" "$PYTHON_IMAGE" >&2
    fi
fi
if [ -z "${REDIS_IMAGE:-}" ]; then
    REDIS_IMAGE=redis:7.4-alpine
    if ! available "$REDIS_IMAGE"; then
        REDIS_IMAGE=local/redis:bookworm
        docker build -q -t "$REDIS_IMAGE" --build-arg BASE_IMAGE="$PYTHON_IMAGE" \
            -f "$ROOT/deploy/offline/redis.Dockerfile" "$ROOT/deploy/offline" >&2
    fi
fi
if ! answers "$TORCH_INDEX_URL/torch/"; then
    TORCH_INDEX_URL=https://pypi.org/simple
    links=${PIP_FIND_LINKS:-$(pip config get global.find-links 2>/dev/null || true)}
    for folder in $links; do
        folder=${folder#file://}
        [ -d "$folder" ] && find "$folder" -maxdepth 1 -name 'torch-*+cpu-*.whl' \
            -exec cp -u {} "$ROOT/deploy/wheels/" \;
    done
fi

secret=()
if [ -s "$CA_BUNDLE" ]; then secret=(--secret "id=ca_bundle,src=$CA_BUNDLE"); else CA_BUNDLE=; fi
docker build -q -f "$ROOT/deploy/Dockerfile.cpu" -t "$IMAGE" "${secret[@]}" \
    --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" --build-arg TORCH_INDEX_URL="$TORCH_INDEX_URL" \
    --build-arg VERSION="$VERSION" "$ROOT" >&2
echo "IMAGE=$IMAGE"
echo "PYTHON_IMAGE=$PYTHON_IMAGE"
echo "REDIS_IMAGE=$REDIS_IMAGE"
echo "TORCH_INDEX_URL=$TORCH_INDEX_URL"
echo "CA_BUNDLE=$CA_BUNDLE"
