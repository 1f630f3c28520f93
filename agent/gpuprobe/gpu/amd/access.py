"""What ROCm containers need on the host, as it stands: `/dev/kfd` (amdgpu's compute
interface), each driven GPU's `/dev/dri/renderD<N>` (which the AMD device plugin, or
`--device`, passes in), and the binary of the AMD Container Toolkit's `amd` runtime in each
container engine that names one."""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.containers.engines import Engine
from gpuprobe.containers.toolkit import resolve_binary
from gpuprobe.gpu.amd.sysfs import AmdGpu
from gpuprobe.host import Host

KFD = "/dev/kfd"
# The AMD Container Toolkit's runtime: `amd-ctk runtime configure` names it `amd`.
AMD_RUNTIME = "amd"


@dataclass(frozen=True)
class AmdRuntime:
    """An engine's `amd` runtime: the engine, the binary it names (None: none), the file
    that defines it, and whether the binary is there."""

    engine: str
    binary: str | None
    defined_in: str
    found: bool


@dataclass(frozen=True)
class ContainerAccess:
    """`/dev/kfd` present, each driven GPU's render node (path → present), the `amd`
    runtimes of the engines, and how many GPUs amdgpu drives."""

    kfd: bool
    render_nodes: dict[str, bool]
    runtimes: list[AmdRuntime]
    driven_gpus: int


def read_container_access(host: Host, gpus: list[AmdGpu], engines: list[Engine]) -> ContainerAccess:
    """The device nodes and runtime binaries ROCm containers need, as the host has them."""
    fs = host.fs
    bound = [g for g in gpus if g.bound]
    kfd = fs.exists(KFD)
    nodes = {f"/dev/dri/{g.render_node}": fs.exists(f"/dev/dri/{g.render_node}")
             for g in bound if g.render_node}  # fmt: skip
    runtimes = []
    for engine in engines:
        runtime = engine.config.runtimes.get(AMD_RUNTIME)
        if runtime is None:
            continue
        found = resolve_binary(fs, runtime.binary or "")
        runtimes.append(
            AmdRuntime(engine.config.flavor, runtime.binary, runtime.defined_in, found is not None)
        )
    return ContainerAccess(kfd, nodes, runtimes, len(bound))
