#!/bin/sh
# mmdebstrap's customize hook for gpuprobe's image (scripts/build-image runs it; $1 is the root
# filesystem, Debian's packages already installed in it). It puts the agent in a virtual
# environment at /opt/gpuprobe (the Dockerfile's layout), adds the image's user, and removes
# what must not ship: the package manager, the wheels, logs and caches. Inputs from the
# environment: GPUPROBE_WHEELS (the wheels to install, the project's and its locked
# dependencies'), GPUPROBE_PIP_WHEEL (pip's own wheel, run from the wheel file and never
# installed), SOURCE_DATE_EPOCH.
set -eu
root=$1

# The environment, on Debian's python3. Without pip: pip runs from its wheel and leaves with it.
chroot "$root" python3 -m venv --without-pip /opt/gpuprobe
mkdir "$root/tmp/wheels"
cp "$GPUPROBE_WHEELS"/*.whl "$root/tmp/wheels/"
cp "$GPUPROBE_PIP_WHEEL" "$root/tmp/"
pip="/tmp/$(basename "$GPUPROBE_PIP_WHEEL")/pip"
wheels=$(cd "$root" && ls tmp/wheels/*.whl | sed 's|^|/|')
# shellcheck disable=SC2086 # one argument per wheel
chroot "$root" env PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    /opt/gpuprobe/bin/python "$pip" install --quiet --no-deps --no-compile $wheels
# The locked set is complete: every installed distribution's requirements are installed.
chroot "$root" env PIP_DISABLE_PIP_VERSION_CHECK=1 /opt/gpuprobe/bin/python "$pip" check
# Every extension module finds its shared libraries among Debian's (grpcio needs libstdc++).
chroot "$root" /opt/gpuprobe/bin/python -c 'import grpc, grpc_health.v1.health, psutil, yaml
import google.protobuf.message, msgspec, pyroute2, prometheus_client, pynvml, lightkube
import gpuprobe.cli'
# Byte code once, now: the root filesystem is read-only where the agent runs. Hash-based and
# unchecked: no source timestamps in it, nothing to compare at import.
chroot "$root" /opt/gpuprobe/bin/python -m compileall -q -j 1 \
    --invalidation-mode unchecked-hash /opt/gpuprobe/lib
rm -rf "$root/tmp/wheels" "$root/tmp/$(basename "$GPUPROBE_PIP_WHEEL")"

# The image's own user, as the Dockerfile's useradd makes it (the DaemonSet runs as root anyway).
echo 'gpuprobe:x:10001:10001::/nonexistent:/usr/sbin/nologin' >>"$root/etc/passwd"
echo 'gpuprobe:x:10001:' >>"$root/etc/group"
echo 'gpuprobe:!*:::::::' >>"$root/etc/shadow"

# No package manager: dpkg's programs go (apt was never installed); its database stays, for the
# SBOM and for scanners (trivy and grype read /var/lib/dpkg/status).
rm -f "$root"/usr/bin/dpkg "$root"/usr/bin/dpkg-* "$root"/usr/sbin/dpkg-* \
    "$root"/usr/bin/update-alternatives
rm -rf "$root"/etc/dpkg/dpkg.cfg.d "$root"/var/lib/dpkg/*-old "$root"/var/cache/debconf/*-old
# What records the build's own run or machine: logs, caches, the host's resolver and name (the
# container runtime mounts the node's own over these two). mmdebstrap's reproducible cleanup
# and its tarball (every time clamped to SOURCE_DATE_EPOCH) do the rest.
rm -rf "$root"/var/log/* "$root"/tmp/* "$root"/root/.cache "$root"/var/lib/apt/lists/* \
    "$root"/var/cache/apt/*
: >"$root/etc/resolv.conf"
: >"$root/etc/hostname"
