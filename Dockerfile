# gpuprobe's image with Docker: the agent (gpuprobe serve) and the one-shot commands. The
# released image is built without Docker or a base image by scripts/build-image (Debian's
# packages, an SBOM, reproducible); this file makes the same layout (/opt/gpuprobe, user 10001,
# entrypoint, command, environment, ports; tests/deploy/test_dockerfile.py holds the two
# together) for those who build with Docker (docs/deploy.md, "The image"):
#   docker build -t registry.example.com/gpuprobe:0.1.0 .
#   docker push registry.example.com/gpuprobe:0.1.0
# The base is pinned by digest (the tag's multi-architecture index); to move it:
#   skopeo inspect --format '{{.Digest}}' docker://docker.io/library/python:3.11-slim-bookworm
# NVML is not in the image: the agent loads the node's own libnvidia-ml.so.1 from the host's
# library directories under --root /host (no NVIDIA runtime needed), so one image fits every
# driver.

# Build stage: install gpuprobe and its runtime dependencies into a virtual environment.
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91 AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scripts/image/requirements.txt ./scripts/image/
COPY agent ./agent
# The runtime dependencies at the versions and sha256 the recipe installs (no test extra), then
# the package alone; then pip itself leaves the environment.
RUN python -m venv /opt/gpuprobe \
    && /opt/gpuprobe/bin/pip install --no-compile --no-deps --require-hashes \
       --requirement scripts/image/requirements.txt \
    && /opt/gpuprobe/bin/pip install --no-compile --no-deps /src \
    && /opt/gpuprobe/bin/pip check \
    && /opt/gpuprobe/bin/python -m compileall -q /opt/gpuprobe/lib \
    && /opt/gpuprobe/bin/pip uninstall --yes pip

# Final stage: the same slim base (the environment's python links to it), and the environment.
FROM python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91
ARG VERSION=0.1.0
# docker build --build-arg REVISION="$(git rev-parse HEAD)" --build-arg SOURCE=<your repository>
ARG REVISION=unknown
ARG SOURCE=https://gpuprobe.example/source
LABEL org.opencontainers.image.title="gpuprobe" \
      org.opencontainers.image.description="Node-level GPU diagnostics agent for Kubernetes GPU clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91"
COPY --from=build /opt/gpuprobe /opt/gpuprobe
# The image's own user is unprivileged (the one-shot commands run as it); the DaemonSet runs
# the agent as root in a privileged container, for the reasons docs/deploy.md gives ("What
# needs root": the GPUs' device nodes without the NVIDIA runtime).
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
