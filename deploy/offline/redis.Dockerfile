# Redis from Debian's redis-server package, shaped like redis:7.4-alpine for the Compose file
# (user `redis`, data in /data, `sh`, `redis-server` and `redis-cli` on PATH): for machines that
# cannot pull from Docker Hub. Built by deploy/offline/build.sh.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data \
    && chown redis:redis /data
WORKDIR /data
# The package's `redis` user (a system uid Debian assigns at install time).
# hadolint ignore=DL3066
USER redis
EXPOSE 6379
CMD ["redis-server"]
