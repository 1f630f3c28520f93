"""A node with both vendors' GPUs: an NVIDIA GPU and an AMD GPU of the same index stay two
GPUs in the idle accounting and the usage digest (a MIG device belongs to its own GPU)."""

from __future__ import annotations

from gpuprobe.gpu.backend import Partition
from gpuprobe.report import PodRef
from gpuprobe.workloads.accounting import account, new_ledger
from gpuprobe.workloads.allocations import Grant
from gpuprobe.workloads.attribution import DeviceUse
from gpuprobe.workloads.usage import node_usage

NVIDIA = "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000"
AMD = "7c3a51d2e0b4f600"
EVAL = PodRef("ml-team", "eval-0", "eval")


def devices() -> list[DeviceUse]:
    mig = Partition(0, 0, 1, 0, "MIG-0c6f8a1e-7b2d-5e3f-9a4c-1d2e3f4a5b6c", "1g.10gb")
    other = Partition(0, 1, 2, 0, "MIG-1c6f8a1e-7b2d-5e3f-9a4c-1d2e3f4a5b6c", "1g.10gb")
    held = Grant(EVAL, "nvidia.com/mig-1g.10gb", str(mig.uuid), mig.resource)
    return [
        DeviceUse(f"gpu:0:{NVIDIA}", 0, NVIDIA, processes=[]),
        DeviceUse(mig.resource, 0, NVIDIA, mig, [held], processes=[]),
        DeviceUse(other.resource, 0, NVIDIA, other, processes=[]),
        DeviceUse(f"gpu:0:{AMD}", 0, AMD, processes=[], vendor="amd"),  # held by no pod
    ]


def test_the_accounting_keeps_two_gpus_of_one_index_apart() -> None:
    ledger = new_ledger()
    account(ledger, devices(), 0.0, 5.0)
    account(ledger, devices(), 60.0, 5.0)
    nvidia, amd = ledger.gpus[NVIDIA], ledger.gpus[AMD]
    assert (nvidia.allocated, nvidia.unallocated) == (30.0, 30.0)  # one of two MIG devices
    assert (amd.allocated, amd.unallocated) == (0.0, 60.0)


def test_the_usage_digest_keeps_two_gpus_of_one_index_apart() -> None:
    usage = node_usage([d.to_dict() for d in devices()], {})
    assert usage["gpus"] == {
        "allocated": 0.5,
        "busy": 0.0,
        "allocated_idle": 0.5,
        "unallocated": 1.5,
    }
