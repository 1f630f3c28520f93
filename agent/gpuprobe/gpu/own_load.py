"""gpuprobe's own load on the GPUs: while the agent's NCCL test runs, the GPUs are busy with
the agent's processes, which says nothing about whether they are paid for and unused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from gpuprobe.host import Host

_KEY = "own_gpu_tests"
_ENDED = "own_gpu_test_ended"
# NVML's utilization is a sample over the last second or so: a test's load shows a little
# after it ended.
TRAILING_SECONDS = 2.0


@contextmanager
def own_gpu_test(host: Host) -> Iterator[None]:
    """Mark the GPUs as loaded by gpuprobe itself for the duration of the block."""
    memory = host.memory.of("gpu_load")
    memory[_KEY] = memory.get(_KEY, 0) + 1
    try:
        yield
    finally:
        memory[_KEY] -= 1
        memory[_ENDED] = host.clock.monotonic()


def own_gpu_test_running(host: Host) -> bool:
    """Whether gpuprobe's own GPU test is running now, or ended so recently that its load may
    still show in NVML's readings."""
    memory = host.memory.of("gpu_load")
    if memory.get(_KEY, 0):
        return True
    ended = memory.get(_ENDED)
    return ended is not None and host.clock.monotonic() - ended < TRAILING_SECONDS
