"""Where the host's NVML library (`libnvidia-ml.so.1`) lies under `--root`.

In the DaemonSet the agent reads the host through `/host` and runs without the NVIDIA
container runtime (the agent must not depend on the runtime it diagnoses), so nothing injects
NVML into the container: the agent loads the host's own library from the host's library
directories, the same file the host's `nvidia-smi` uses, so it always matches the loaded
kernel module. The search order (docs/deploy.md, "NVML without the NVIDIA runtime"):

1. the host's multiarch directories: `/usr/lib/<arch>-linux-gnu`, `/lib/<arch>-linux-gnu`
   (Debian, Ubuntu);
2. `/usr/lib64`, `/lib64` (RHEL, Rocky, Amazon Linux, SUSE), then `/usr/lib`, `/lib`;
3. the GPU Operator's driver container root, `/run/nvidia/driver` (the same directories
   below it): the driver there is installed in the container, not on the host;
4. `/home/kubernetes/bin/nvidia/lib64` and `/usr/local/nvidia/lib64` (GKE's installer).

Symbolic links are resolved inside the root, as the host's loader would see them: an absolute
link `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 -> /usr/lib/...so.550.54.15` is followed to
`<root>/usr/lib/...`, never to the agent's own filesystem.
"""

from __future__ import annotations

import os
import platform

SONAME = "libnvidia-ml.so.1"
# Links followed before giving up (the kernel's own limit for a path lookup).
MAX_LINKS = 40
# Driver roots other than the host's own `/`, in order.
DRIVER_ROOTS = ("/", "/run/nvidia/driver")
EXTRA_DIRECTORIES = ("/home/kubernetes/bin/nvidia/lib64", "/usr/local/nvidia/lib64")


def multiarch(machine: str | None = None) -> str:
    """The Debian multiarch tuple of this machine (`x86_64-linux-gnu`, `aarch64-linux-gnu`)."""
    arch = machine or platform.machine()
    return f"{arch}-linux-gnu"


def library_directories(machine: str | None = None) -> list[str]:
    """The host paths searched for NVML, in order (see the module's docstring)."""
    tuple_ = multiarch(machine)
    per_root = [
        f"/usr/lib/{tuple_}",
        f"/lib/{tuple_}",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
    ]
    found = [
        os.path.join(driver_root, directory.lstrip("/"))
        for driver_root in DRIVER_ROOTS
        for directory in per_root
    ]
    return [*found, *EXTRA_DIRECTORIES]


def resolve_in_root(root: str, host_path: str) -> str | None:
    """The real file `host_path` names on the host mounted at `root`, every symbolic link
    (absolute or relative, in any component) resolved inside `root`; None when it does not
    exist, loops, or is not a regular file."""
    root = os.path.realpath(root)
    pending = [part for part in host_path.split("/") if part]
    resolved: list[str] = []
    links = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if resolved:
                resolved.pop()  # never above the root: `..` of the root is the root
            continue
        candidate = os.path.join(root, *resolved, part)
        try:
            target = os.readlink(candidate)
        except OSError:
            resolved.append(part)  # not a link (or missing: the isfile below says so)
            continue
        links += 1
        if links > MAX_LINKS:
            return None
        if target.startswith("/"):
            resolved = []
        pending = [p for p in target.split("/") if p] + pending
    real = os.path.join(root, *resolved)
    return real if os.path.isfile(real) else None


def find_nvml_library(root: str, machine: str | None = None) -> str | None:
    """The path (on this machine) of the first `libnvidia-ml.so.1` in the host's library
    directories under `root`, or None when no directory holds one."""
    for directory in library_directories(machine):
        found = resolve_in_root(root, f"{directory}/{SONAME}")
        if found is not None:
            return found
    return None
