"""gpuprobe's own load on the GPUs: while the agent's NCCL test runs, the GPUs are busy with
the agent's processes, which says nothing about whether they are paid for and unused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpuprobe.host import Host

_KEY = "own_gpu_tests"


@contextmanager
def own_gpu_test(host: Host) -> Iterator[None]:
    """Mark the GPUs as loaded by gpuprobe itself for the duration of the block."""
    memory = host.memory.of("gpu_load")
    memory[_KEY] = memory.get(_KEY, 0) + 1
    try:
        yield
    finally:
        memory[_KEY] -= 1


def own_gpu_test_running(host: Host) -> bool:
    """Whether gpuprobe's own GPU test is running now."""
    return bool(host.memory.of("gpu_load").get(_KEY, 0))
