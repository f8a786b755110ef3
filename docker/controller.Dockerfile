# syntax=docker/dockerfile:1.7
# forest-controller: the agent package with its `kubernetes` extra (the native forest-agent is installed
# on machines, not in a container). Build from the repository root:
#   docker build -f docker/controller.Dockerfile -t registry.example.com/forest/forest-controller:0.1.0 .
# Health: the controller serves no port, so there is no HTTP probe. It exits on a fatal error (3: Host
# refused its credential) and on losing its leader Lease (5), and Kubernetes restarts it; a follower
# replica waits on the Lease. charts/forest-controller runs it (docs/deploy.md).

# ---- builder --------------------------------------------------------------------------------------------
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1 AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# Pinned dependencies and build tools (docker/controller-requirements.txt: requirements.lock's entries for
# this image, each file hash-checked), then the agent itself without build isolation, so the build uses
# exactly those pinned tools. Wheels only: no compiler anywhere.
COPY docker/controller-requirements.txt /tmp/controller-requirements.txt
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes --requirement /tmp/controller-requirements.txt
COPY agent /src/agent
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation /src/agent \
    && /opt/venv/bin/pip uninstall --yes setuptools wheel

# ---- runtime --------------------------------------------------------------------------------------------
FROM python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

LABEL org.opencontainers.image.title="forest-controller" \
      org.opencontainers.image.description="Forest's Kubernetes Grove controller"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN groupadd --system --gid 65532 forest \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin forest

COPY --from=builder /opt/venv /opt/venv

USER 65532:65532
# No port, no HTTP probe: see the header.
HEALTHCHECK NONE
ENTRYPOINT ["forest-controller"]
CMD ["run", "--in-cluster"]
