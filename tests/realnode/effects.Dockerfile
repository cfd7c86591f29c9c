# The exactly-once run's Job-mode task image (tests/realnode/test_exactly_once.py): the operator
# image (its venv carries the SDK and cronoq.fencing) with Debian's python3-psycopg, and the
# handler tests/support/effects.py (`python3 /app/effects.py job`). `make image` builds it
# (hack/image.py), tagged localhost/cronoq/effects:dev, with the build context tests/support:
#
#   podman build --build-arg=OPERATOR=localhost/cronoq/operator:dev -f tests/realnode/effects.Dockerfile tests/support
#
# psycopg comes from Debian's packages in a stage of its own on the base image, not on the
# operator image: that stage stays cached while the operator image changes with every commit, and
# only the files of the packages it added (python3-psycopg, libpq5 and the libraries libpq links)
# are carried over, psycopg into a directory of its own on PYTHONPATH (the rest of Debian's
# Python packages, older than the venv's, stay out of its way).
ARG BASE=python:3.11-slim-bookworm
ARG OPERATOR=localhost/cronoq/operator:dev
FROM ${OPERATOR} AS operator

FROM ${BASE} AS psycopg
USER root
RUN dpkg-query -W -f='${Package}\n' | sort > /tmp/before \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-psycopg > /dev/null \
 && dpkg-query -W -f='${Package}\n' | sort > /tmp/after \
 && mkdir -p /staged/opt/psycopg /staged/etc \
 && comm -13 /tmp/before /tmp/after | xargs dpkg -L | grep '^/usr/lib/' | grep -v '^/usr/lib/python3' \
    | while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then cp -a --parents "$f" /staged; fi; done \
 && cp -a /usr/lib/python3/dist-packages/psycopg /staged/opt/psycopg/ \
 && cp -a /etc/ld.so.cache /staged/etc/ \
 && rm -rf /var/lib/apt/lists/*

FROM operator
COPY --from=psycopg /staged/ /
COPY effects.py /app/effects.py
ENV PYTHONPATH=/opt/psycopg
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["python3", "/app/effects.py", "job"]
