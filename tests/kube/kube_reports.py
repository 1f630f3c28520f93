"""Reports for the Kubernetes tests, with findings as the checks raise them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, Status

T0 = datetime(2026, 12, 1, 21, 0, 0, tzinfo=UTC)
GPU3 = "gpu:3:GPU-5f1c3b7e-8a2d-4c1e-9f0a-6b2d8e4c1a93"

GPU_LOST = Finding(
    "GPU_LOST",
    Severity.CRITICAL,
    "GPU 3 is lost: NVML reports GpuIsLost (fallen off the bus or hung). Reboot the node; "
    "inspect the GPU if it happens again",
    Action.REBOOT_NODE,
    GPU3,
)
NVLINK_DOWN = Finding(
    "NVLINK_DOWN", Severity.CRITICAL, "GPU 3 NVLink 7 is down", Action.RESET_GPU, GPU3
)
THERMAL = Finding(
    "THERMAL_SLOWDOWN",
    Severity.WARNING,
    "GPU 3 is clocked down: thermal slowdown is active",
    Action.HARDWARE_INSPECTION,
    GPU3,
)
XID_APP = Finding(
    "XID",
    Severity.WARNING,
    "GPU 3 reported XID 13 (Graphics Engine Exception) 2 times",
    Action.RESTART_APP,
    GPU3,
)
NO_RUNTIME = Finding(
    "RUNTIME_NOT_CONFIGURED",
    Severity.CRITICAL,
    "containerd has no nvidia runtime in /etc/containerd/config.toml",
    Action.FIX_CONFIG,
    "file:/etc/containerd/config.toml",
)
TIMEOUT = Finding(
    "CHECK_TIMEOUT", Severity.UNKNOWN, "the check did not finish within 10 s", Action.NONE
)

HARDWARE = ("driver", "gpus", "mig", "xid")
RUNTIME = ("toolkit", "cdi", "device_plugin", "sharing")


def report(
    *findings: tuple[str, Finding], unknown: tuple[str, ...] = (), at: int = 0
) -> NodeReport:
    """A report of every hardware and runtime check, with `(check, finding)` pairs added and
    the named checks UNKNOWN; `at` seconds after T0."""
    checks = []
    for name in HARDWARE + RUNTIME:
        found = [f for check, f in findings if check == name]
        result = CheckResult(name, f"{name}: {len(found)} findings", found)
        if name in unknown:
            result.floor = Status.UNKNOWN
        checks.append(result)
    return NodeReport("gpu-node-17", T0 + timedelta(seconds=at), checks)


def later(seconds: float) -> datetime:
    """T0 plus `seconds`."""
    return T0 + timedelta(seconds=seconds)
