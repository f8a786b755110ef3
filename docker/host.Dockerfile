# syntax=docker/dockerfile:1.7
# Forest Host: one image for every Host process, chosen by the command (docker/host-entrypoint.sh):
#   web (default) | worker | beat | runner | migrate | edge | manage ARGS...
# Build from the repository root:
#   docker build -f docker/host.Dockerfile -t registry.example.com/forest/forest-host:0.1.0 .
# Health: HEALTHCHECK runs docker/host-healthcheck.py (web: GET /healthz, which also checks the database;
# worker, runner and beat: their heartbeat file is fresh; migrate, edge: the process itself). In Kubernetes
# use /healthz as the web's readiness probe and a TCP check of port 8000 as its liveness probe
# (docs/deploy.md, charts/forest-host).

# ---- builder: the virtual environment and the collected static files -----------------------------------
# The base image is pinned by version and by digest (the multi-architecture index).
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1 AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /app

# Every dependency is a prebuilt wheel: no compiler in either stage. Pins: docker/host-requirements.txt,
# requirements.lock's entries for this image (scripts/image_requirements.py), each file hash-checked.
COPY docker/host-requirements.txt /tmp/host-requirements.txt
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes --requirement /tmp/host-requirements.txt

COPY manage.py pyproject.toml ./
COPY forest_host ./forest_host
COPY apps ./apps
COPY forest_cli ./forest_cli
# The edge (apps/ingress) renders nginx with the agent's module, one renderer for both hops: the package's
# source sits beside apps/ as Host's own code does (its dependencies are already Host's).
COPY agent/src/forest_agent ./forest_agent
COPY templates ./templates
COPY static ./static
COPY infra ./infra
COPY docker/host-entrypoint.sh docker/host-healthcheck.py ./docker/
RUN DEBUG=0 SECRET_KEY=collectstatic-only-never-used-at-run-time \
    /opt/venv/bin/python manage.py collectstatic --noinput --verbosity 0 \
    && /opt/venv/bin/python -m compileall -q forest_host apps forest_cli forest_agent

# ---- runtime --------------------------------------------------------------------------------------------
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

LABEL org.opencontainers.image.title="forest-host" \
      org.opencontainers.image.description="Forest Host: web, worker, beat, runner pool and edge by command"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=forest_host.settings \
    FOREST_VAR_DIR=/var/lib/forest \
    PORT=8000

# nginx for the `edge` process (manage.py forest_edge --serve runs it as a child with its own prefix under
# FOREST_VAR_DIR): Debian's nginx, the package the ingress tests run both hops on. Pinned to its
# upstream version; the wildcard takes Debian's security revisions (an exact revision disappears from the
# security archive when the next one lands, and the build would fail). A binary package: no compiler.
# A numeric, non-root user; the code is owned by root and read-only to it. Only FOREST_VAR_DIR (the
# filesystem CAS and broker of the embedded mode) is writable; mount a volume there if you use them.
RUN apt-get update \
    && apt-get install --yes --no-install-recommends 'nginx=1.22.1-9+deb12u*' \
    && rm -rf /var/lib/apt/lists/* \
    && nginx -v \
    && groupadd --system --gid 65532 forest \
    && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/forest --no-create-home \
       --shell /usr/sbin/nologin forest \
    && mkdir -p /var/lib/forest \
    && chown 65532:65532 /var/lib/forest

COPY --from=builder /opt/venv /opt/venv
COPY --from=builder /app /app
WORKDIR /app

USER 65532:65532
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["python", "/app/docker/host-healthcheck.py"]
ENTRYPOINT ["/app/docker/host-entrypoint.sh"]
CMD ["web"]
