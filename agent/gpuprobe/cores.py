"""The CPU cores this process may use: what sizes its worker threads and processes."""

from __future__ import annotations

import os


def usable_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may use: its CPU affinity, and below it the CPU quota of its
    own cgroup (cgroup v2 `cpu.max`: a pod's CPU limit), rounded up. A DaemonSet pod limited to
    2 CPUs on a 128-core node gets 2, not 128 threads that the quota would throttle."""
    cores = len(os.sched_getaffinity(0))
    try:
        with open(cpu_max, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota to read: the affinity alone
    return cores
