# The cronoq operator image. Build it from the repository root:
#
#   make image                                   # podman or docker, whichever this machine has
#   docker build -t ghcr.io/cronoq/operator:0.1.0 .
#
# BASE is any image with Python 3.11+ and its venv module: the official python image for public
# builds, or (what `make image` does where no registry is reachable, hack/image.py) a Debian
# bookworm made from Debian's packages. The package goes into a venv at /opt/cronoq, so the
# Debian base's externally-managed system Python (PEP 668) is never touched.
#
# It runs `cronoq operator` as the unprivileged user 65532 (no passwd entry needed) and writes
# nothing but /tmp, so it runs with a read-only root filesystem; the Helm chart mounts an
# emptyDir at /tmp and passes the flags (--namespace, --metrics-port, --probe-port, ...).
# The same image is the heartbeat sidecar (`cronoq heartbeat`) and the push runner.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

LABEL org.opencontainers.image.title="cronoq" \
      org.opencontainers.image.description="Kubernetes operator that runs tasks as pods with task-queue guarantees" \
      org.opencontainers.image.source="https://github.com/cronoq/cronoq" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    VIRTUAL_ENV=/opt/cronoq \
    PATH=/opt/cronoq/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The package and its pinned dependencies (pyproject.toml; constraints.txt pins the transitive
# ones too), installed from this repository, with the `postgres` extra: psycopg 3, for an archive
# on Postgres (--archive postgresql://...).
# Only these paths are in the build context (.dockerignore); the sources go once installed.
# PIP_CERT (optional, a build argument) names a CA bundle for pip where downloads go through
# a TLS-inspecting proxy; it is unset in public builds and never stored in the image.
ARG PIP_CERT
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY operator/ operator/
RUN python3 -m venv /opt/cronoq \
 && pip install '.[postgres,otel]' --constraint constraints.txt \
 && rm -rf /src

# Bytecode was compiled at install time; at run time nothing is written outside /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
USER 65532:65532

EXPOSE 9090 8080
ENTRYPOINT ["cronoq", "operator"]
