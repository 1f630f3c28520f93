"""AMD's part of the `cdi` check: the AMD Container Toolkit's specs (`amd-ctk cdi generate`,
kind `amd.com/gpu`) held against the node. A spec naming device nodes, mounts or hooks that
are gone (the GPUs' DRM minors move when GPUs are added, removed or re-partitioned) is stale: a
container given one of its devices fails to start. A warning: on Kubernetes the AMD device
plugin passes device nodes itself, without CDI."""

from __future__ import annotations

from typing import Any

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.cdi_paths import missing_paths, names
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.containers.cdi import CdiSpec
from gpuprobe.report import Action, Finding, Severity

# The AMD Container Toolkit's specs: vendor amd.com (kind amd.com/gpu).
AMD_VENDOR = "amd.com"


class AmdCdi:
    """AMD's rules of the `cdi` check (`checks.rules.vendor_part.CdiRules`)."""

    def judge(
        self, ctx: CheckContext, specs: list[tuple[CdiSpec, int]], data: dict[str, Any]
    ) -> Part | None:
        """CDI_SPEC_STALE for each stale AMD spec, where the bus shows AMD GPUs (None: it
        shows none); each AMD spec's entry in `data["specs"]` says what of it is gone."""
        if not ctx.gpus.gpu_count("amd"):
            return None
        findings = []
        for spec, _ in specs:
            if spec.vendor != AMD_VENDOR:
                continue
            gone = missing_paths(ctx.host, spec)
            entry = next(e for e in data["specs"] if e["path"] == spec.path)
            entry["stale"] = {
                "missing_device_nodes": gone.device_nodes,
                "missing_mounts": gone.mounts,
                "missing_hooks": gone.hooks,
                "driver_versions": [],  # NVIDIA's driver files' versions: none in AMD's spec
                "gpu_devices": None,
            }
            if gone.all:
                findings.append(_stale(spec, gone.all))
        return Part("AMD GPUs only", findings)


def _stale(spec: CdiSpec, gone: list[str]) -> Finding:
    return Finding(
        "CDI_SPEC_STALE",
        Severity.WARNING,
        f"CDI spec {spec.path} ({spec.kind}) is stale: it names {names(gone)} that do not "
        "exist on this node. Containers given its devices fail to start: regenerate it "
        f"(amd-ctk cdi generate --output={spec.path})",
        Action.FIX_CONFIG,
        f"file:{spec.path}",
    )
