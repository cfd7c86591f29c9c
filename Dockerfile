# The cronoq operator image. Build it from the repository root:
#
#   docker build -t ghcr.io/cronoq/operator:0.1.0 .
#
# It runs `cronoq operator` as the unprivileged user 65532 (no passwd entry needed) and writes
# nothing but /tmp, so it runs with a read-only root filesystem; the Helm chart mounts an
# emptyDir at /tmp and passes the flags (--namespace, --metrics-port, --probe-port, ...).
FROM python:3.11-slim-bookworm

LABEL org.opencontainers.image.title="cronoq" \
      org.opencontainers.image.description="Kubernetes operator that runs tasks as pods with task-queue guarantees" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# The package and its pinned dependencies (pyproject.toml), installed from this repository.
# Only these paths are in the build context (.dockerignore); the sources go once installed.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip install . && rm -rf /src

# Bytecode was compiled at install time; at run time nothing is written outside /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
USER 65532:65532

EXPOSE 9090 8080
ENTRYPOINT ["cronoq", "operator"]
