# gpuprobe's image: the agent (gpuprobe serve) and the one-shot commands.
# Build and push (docs/deploy.md, "The image"):
#   docker build -t registry.example.com/gpuprobe:0.1.0 .
#   docker push registry.example.com/gpuprobe:0.1.0
# NVML is not in the image: the agent loads the node's own libnvidia-ml.so.1 from the host's
# library directories under --root /host (no NVIDIA runtime needed), so one image fits every
# driver.

# Build stage: install gpuprobe and its runtime dependencies into a virtual environment.
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
# Only the runtime dependencies (no test extra); then pip itself leaves the environment.
RUN python -m venv /opt/gpuprobe \
    && /opt/gpuprobe/bin/pip install --no-compile /src \
    && /opt/gpuprobe/bin/python -m compileall -q /opt/gpuprobe/lib \
    && /opt/gpuprobe/bin/pip uninstall --yes pip

# Final stage: the same slim base (the environment's python links to it), and the environment.
FROM python:3.11-slim-bookworm
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpuprobe" \
      org.opencontainers.image.description="Node-level GPU diagnostics agent for Kubernetes GPU clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm"
COPY --from=build /opt/gpuprobe /opt/gpuprobe
# The image runs as an unprivileged user; the DaemonSet runs it as root without
# capabilities, for the reasons docs/deploy.md gives ("What needs root").
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuprobe
ENV PATH=/opt/gpuprobe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001
# No HEALTHCHECK: Kubernetes ignores it and probes the agent itself (the DaemonSet): liveness
# is GET /healthz on the metrics port (9760), readiness gRPC health of gpuprobe.v1.NodeDiagnostics
# (GET /readyz with TLS). The image has no HTTP client for a HEALTHCHECK to call.
HEALTHCHECK NONE
EXPOSE 50051 9760
ENTRYPOINT ["gpuprobe"]
CMD ["serve"]
