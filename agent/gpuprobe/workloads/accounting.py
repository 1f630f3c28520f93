"""Idle accounting: per GPU, the seconds it was allocated, allocated but idle (by the holders'
namespace), and unallocated, summed from one daemon round to the next.

Each round after the first adds the wall-clock time since the round before:

- to `unallocated` when no pod holds the GPU, else to `allocated`;
- of the allocated time, the share of NVML utilization samples (`nvmlDeviceGetSamples`, the
  driver's buffer; only the samples newer than the last one counted) at or below the idle
  threshold goes to `idle_allocated`, split evenly among the holders (grouped by namespace).
  Without new samples (NVML does not serve them, or none came) the GPU is idle when it has no
  process and its utilization now is at or below the threshold;
- a MIG-enabled GPU counts in MIG devices: each is 1/n of its GPU (n its MIG devices), held or
  not by its own holders, idle when no process runs in it (NVML samples whole GPUs only;
  when NVML cannot list its processes, no idle is counted, as for a whole GPU).

So the figures are GPU-seconds: a GPU split in seven with three MIG devices held for an hour is
3/7 of an hour allocated. Allocation is read once per round and holds for the time before it.

The first round of a daemon only sets the baseline: time while no agent ran is never counted.
The totals live in memory (the workloads check's state, kept by the check runner) and in the
runner's state directory as `workload-accounting.json` (replaced atomically when they
change), so a restarted daemon goes on from them without counting anything twice:

    {"format": 1, "since": "2026-11-29T08:00:00Z",
     "gpus": {"GPU-5f1c...": {"gpu": 3, "allocated_seconds": 5400.0,
              "unallocated_seconds": 0.0, "idle_allocated_seconds": {"research": 1800.0}}}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.report import format_time, now
from gpuprobe.workloads.attribution import DeviceUse

STATE_FILE = "workload-accounting.json"
FORMAT = 1


@dataclass
class GpuSeconds:
    """One GPU's running totals."""

    gpu: int
    uuid: str | None
    allocated: float = 0.0
    unallocated: float = 0.0
    idle_allocated: dict[str, float] = field(default_factory=dict)  # by namespace

    @property
    def idle(self) -> float:
        """Allocated-idle seconds, all namespaces together."""
        return sum(self.idle_allocated.values())

    def to_dict(self) -> dict[str, Any]:
        """The totals as the check's data and the state file hold them."""
        return {
            "gpu": self.gpu,
            "uuid": self.uuid,
            "allocated_seconds": round(self.allocated, 3),
            "busy_seconds": round(self.allocated - self.idle, 3),
            "idle_allocated_seconds": {
                n: round(s, 3) for n, s in sorted(self.idle_allocated.items())
            },
            "unallocated_seconds": round(self.unallocated, 3),
        }


@dataclass
class Ledger:
    """Every GPU's totals since `since`, and where the last round left off."""

    since: str
    gpus: dict[str, GpuSeconds] = field(default_factory=dict)  # by UUID (or "index:<i>")
    last_round: float | None = None  # the clock at the previous round
    last_sample: dict[str, int] = field(default_factory=dict)  # newest sample counted, µs

    def to_json(self) -> dict[str, Any]:
        """The state file's content."""
        gpus = {key: g.to_dict() for key, g in sorted(self.gpus.items())}
        for entry in gpus.values():
            del entry["busy_seconds"]
        return {"format": FORMAT, "since": self.since, "gpus": gpus}


def new_ledger() -> Ledger:
    """Totals that start now."""
    return Ledger(since=format_time(now()))


def account(ledger: Ledger, devices: list[DeviceUse], clock: float, threshold: float) -> None:
    """Add the time since the previous round (none on the first) to every GPU's totals."""
    elapsed = None if ledger.last_round is None else clock - ledger.last_round
    ledger.last_round = clock
    for gpu, units in _by_gpu(devices):
        key = gpu.uuid or f"index:{gpu.gpu}"
        totals = ledger.gpus.setdefault(key, GpuSeconds(gpu.gpu, gpu.uuid))
        totals.gpu = gpu.gpu
        busy_share = _busy_share(ledger, key, gpu, threshold)
        if elapsed is None or elapsed <= 0:
            continue
        for unit, weight in units:
            seconds = elapsed * weight
            holders = unit.holders
            if not holders:
                totals.unallocated += seconds
                continue
            totals.allocated += seconds
            busy = busy_share if unit is gpu else _mig_busy(unit)
            idle = seconds * (1.0 - busy) if busy is not None else 0.0
            for holder in holders:
                namespace = holder.namespace
                totals.idle_allocated[namespace] = totals.idle_allocated.get(
                    namespace, 0.0
                ) + idle / len(holders)


def _by_gpu(devices: list[DeviceUse]) -> list[tuple[DeviceUse, list[tuple[DeviceUse, float]]]]:
    """Each GPU with what it is handed out as: its MIG devices (1/n each), else itself."""
    found = []
    for gpu in (d for d in devices if d.mig is None):
        migs = [d for d in devices if d.mig is not None and d.gpu_key == gpu.gpu_key]
        units = [(m, 1.0 / len(migs)) for m in migs] if migs and not gpu.grants else [(gpu, 1.0)]
        found.append((gpu, units))
    return found


def _mig_busy(mig: DeviceUse) -> float | None:
    """A MIG device's busy share: busy with a process in it, idle without; None (no idle
    counted, as for a whole GPU) when NVML cannot list its processes."""
    if mig.processes is None:
        return None
    return 1.0 if mig.processes else 0.0


def _busy_share(ledger: Ledger, key: str, gpu: DeviceUse, threshold: float) -> float | None:
    """The share of the new samples above the threshold; from processes and utilization now
    when there are none; None when nothing tells."""
    last = ledger.last_sample.get(key)
    fresh = [v for t, v in gpu.samples or [] if last is None or t > last]
    if gpu.samples:
        ledger.last_sample[key] = max(t for t, _ in gpu.samples)
    if fresh and last is not None:
        return sum(v > threshold for v in fresh) / len(fresh)
    if gpu.processes is None:
        return None
    if gpu.processes:
        return 1.0
    load = gpu.utilization_percent
    return 0.0 if load is None or load <= threshold else 1.0


def ledger_from_json(content: Any) -> Ledger:
    """The totals a state file holds (its JSON); raises ValueError saying why it is not a
    ledger this version reads (another format, a missing or mistyped field)."""
    try:
        if not isinstance(content, dict) or content.get("format") != FORMAT:
            found = content.get("format") if isinstance(content, dict) else None
            raise ValueError(f"format {found!r}, this version reads {FORMAT}")
        ledger = Ledger(since=str(content["since"]))
        for key, entry in content["gpus"].items():
            ledger.gpus[str(key)] = GpuSeconds(
                int(entry["gpu"]),
                entry.get("uuid"),
                float(entry["allocated_seconds"]),
                float(entry["unallocated_seconds"]),
                {str(n): float(s) for n, s in entry["idle_allocated_seconds"].items()},
            )
        return ledger
    except KeyError as exc:
        raise ValueError(f"no {exc}") from None
    except (TypeError, AttributeError) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from None
