"""The all-reduce rank program that `gpuprobe mesh --transport nccl` runs in the user's image.

It runs where gpuprobe is not installed: in a pod of an Indexed Job, from a ConfigMap, in the
user's own PyTorch image. So it imports nothing of gpuprobe and nothing beyond the standard
library and torch (imported only when it runs, so gpuprobe's tests read its table without it).

One copy runs per node (the Job's index is the node's rank) and starts one process per local
GPU; the ranks meet through torch.distributed's TCP store at rank 0's address (`MASTER_ADDR`,
the headless Service's name for index 0) and all-reduce with NCCL. Global rank 0 prints the
table nccl-tests' `all_reduce_perf` prints (the same header, columns and footer), so one
parser reads both: sizes from `-b` to `-e` by factor `-f`, out-of-place then in-place, time in
microseconds, algbw and busbw in GB/s (1e9 B/s), busbw = algbw x 2(n-1)/n, and `#wrong`
counting the elements that differ from the exact sum.

Environment: `MASTER_ADDR`, `MASTER_PORT` (29500), `NNODES` (1), the node's rank in
`NODE_RANK` or the Job's `JOB_COMPLETION_INDEX` (0), `NCCL_DEBUG` (WARN unless set, so NCCL's
own `NCCL WARN` lines reach the log when a run fails).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}
_FLOAT_BYTES = 4
FAILED_MARK = "# gpuprobe-nccl-rank FAILED:"


def size_bytes(text: str) -> int:
    """A size as nccl-tests reads it: digits with an optional K, M or G (powers of 1024)."""
    text = text.strip()
    unit = _UNITS.get(text[-1:].upper(), 1)
    digits = text[:-1] if unit != 1 else text
    if not digits.isdigit() or int(digits) <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (digits, then K, M or G)")
    return int(digits) * unit


def sweep(min_bytes: int, max_bytes: int, factor: int) -> Iterator[int]:
    """The sizes nccl-tests steps through with `-b -e -f`: whole floats, from min times factor
    while at most max."""
    size = max(min_bytes - min_bytes % _FLOAT_BYTES, _FLOAT_BYTES)
    while size <= max_bytes:
        yield size
        if factor < 2:
            return
        size *= factor


def bus_factor(world: int) -> float:
    """AllReduce's bus bandwidth factor, 2(n-1)/n: 0 for one rank, which moves nothing."""
    return 2 * (world - 1) / world


@dataclass(frozen=True)
class Timing:
    """One size's measurement on rank 0: microseconds per iteration and wrong elements."""

    microseconds: float
    wrong: int


def _bandwidths(size: int, timing: Timing, world: int) -> tuple[float, float]:
    algbw = size / (timing.microseconds * 1e-6) / 1e9 if timing.microseconds > 0 else 0.0
    return algbw, algbw * bus_factor(world)


def _time(value: float) -> str:
    return f"{value:7.1f}" if value < 10000 else f"{value:7.0f}"


def row(size: int, out_of_place: Timing, in_place: Timing, world: int) -> str:
    """One line of the table, in nccl-tests' columns and spacing."""
    line = f"{size:12d}  {size // _FLOAT_BYTES:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
    for timing in (out_of_place, in_place):
        algbw, busbw = _bandwidths(size, timing, world)
        line += f"  {_time(timing.microseconds)}  {algbw:6.2f}  {busbw:6.2f}  {timing.wrong:5d}"
    return line


def header(args: argparse.Namespace, gpus_per_process: int, devices: Sequence[str]) -> list[str]:
    """The lines above the table: the sweep, the devices, the column names and units."""
    return [
        f"# nThread 1 nGpus {gpus_per_process} minBytes {args.minbytes} maxBytes "
        f"{args.maxbytes} step: {args.stepfactor}(factor) warmup iters: {args.warmup_iters} "
        f"iters: {args.iters} agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *devices,
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)",
    ]


def footer(rows: Sequence[tuple[int, Timing, Timing]], world: int) -> list[str]:
    """The lines below the table: out-of-bounds values and the average bus bandwidth."""
    wrong = sum(o.wrong + i.wrong for _, o, i in rows)
    busbws = [_bandwidths(s, t, world)[1] for s, o, i in rows for t in (o, i)]
    average = sum(busbws) / len(busbws) if busbws else 0.0
    return [
        f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {average:.3f} ",
        "#",
    ]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """nccl-tests' own sweep flags (`-b -e -f -n -w`), so one command line reads the same."""
    parser = argparse.ArgumentParser(prog="nccl_rank.py", description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--minbytes", type=size_bytes, default=size_bytes("32M"))
    parser.add_argument("-e", "--maxbytes", type=size_bytes, default=size_bytes("32M"))
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup_iters", type=int, default=5)
    parser.add_argument("-g", "--ngpus", type=int, default=0, help="GPUs per node (0: all seen)")
    args = parser.parse_args(argv)
    if args.maxbytes < args.minbytes or args.iters < 1 or args.warmup_iters < 0:
        parser.error("need -b <= -e, -n >= 1 and -w >= 0")
    return args


@dataclass(frozen=True)
class Place:
    """Where this process sits in the world."""

    rank: int
    local: int
    world: int
    master: str
    port: int


def _timed(torch: Any, dist: Any, source: Any, in_place: bool, iters: int) -> float:
    """Microseconds per all-reduce.

    In place, as nccl-tests times: `iters` all-reduces of one buffer back to back, by the wall
    clock from the first launch to the last completion. Out of place, torch has no such call
    (it reduces in place only): each all-reduce takes a fresh copy of the source, made before
    a CUDA event on the current stream (which waits for NCCL's), so the copy is not counted;
    the events give the GPU's time from that point to the reduction's end.
    """
    if in_place:
        buffer = source.clone()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buffer)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / iters * 1e6
    elapsed = 0.0
    for _ in range(iters):
        target = source.clone()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        dist.all_reduce(target)
        end.record()
        end.synchronize()
        elapsed += begin.elapsed_time(end) * 1000.0
    return elapsed / iters


def _run_sizes(torch: Any, dist: Any, args: argparse.Namespace, place: Place) -> list[Any]:
    device = torch.device("cuda", place.local)
    expected = float(place.world * (place.world + 1) // 2)
    rows = []
    for size in sweep(args.minbytes, args.maxbytes, args.stepfactor):
        source = torch.full(
            (size // _FLOAT_BYTES,), float(place.rank + 1), dtype=torch.float32, device=device
        )
        timings = []
        for in_place in (False, True):
            if args.warmup_iters:
                _timed(torch, dist, source, in_place, args.warmup_iters)
            dist.barrier(device_ids=[place.local])
            microseconds = _timed(torch, dist, source, in_place, args.iters)
            check = source.clone()
            dist.all_reduce(check)
            wrong = int((check != expected).sum().item())
            del check
            timings.append(Timing(microseconds, wrong))
        rows.append((size, timings[0], timings[1]))
        del source
    return rows


def _device_line(torch: Any, place: Place) -> str:
    props = torch.cuda.get_device_properties(place.local)
    bus = getattr(props, "pci_bus_id", None)
    where = f"[0x{bus:02x}] " if isinstance(bus, int) else ""
    return (
        f"#  Rank {place.rank:2d} Group  0 Pid {os.getpid():6d} on {socket.gethostname():>10} "
        f"device {place.local:2d} {where}{props.name}"
    )


def rank_main(local: int, args: argparse.Namespace, node_rank: int, gpus: int) -> None:
    """One GPU's process: join the world, all-reduce each size, rank 0 prints the table."""
    import torch
    import torch.distributed as dist

    nnodes = int(os.environ.get("NNODES", "1"))
    place = Place(
        rank=node_rank * gpus + local,
        local=local,
        world=nnodes * gpus,
        master=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        port=int(os.environ.get("MASTER_PORT", "29500")),
    )
    torch.cuda.set_device(place.local)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://{place.master}:{place.port}",
        rank=place.rank,
        world_size=place.world,
        device_id=torch.device("cuda", place.local),
    )
    try:
        devices: list[Any] = [None] * place.world
        dist.all_gather_object(devices, _device_line(torch, place))
        rows = _run_sizes(torch, dist, args, place)
        if place.rank == 0:
            lines = header(args, 1, devices)
            lines += [row(size, o, i, place.world) for size, o, i in rows]
            lines += footer(rows, place.world)
            print("\n".join(lines), flush=True)
        dist.barrier(device_ids=[place.local])
    finally:
        dist.destroy_process_group()


# A Python exception's line in a traceback: `RuntimeError: ...`,
# `torch.distributed.DistBackendError: ...` (not NCCL's `ncclRemoteError: ...` after it).
_RAISED = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit):")


def failure_words(error: BaseException) -> str:
    """An error in one line. A rank's failure reaches this process as a traceback in text
    (torch.multiprocessing's ProcessRaisedException): its words are the last exception the
    text names and what follows it (NCCL's `Last error:` lines), joined."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    raised = [i for i, line in enumerate(lines) if _RAISED.match(line)]
    start = raised[-1] if raised else 0
    return " / ".join(lines[start:])


def _failed(error: BaseException) -> int:
    print(f"{FAILED_MARK} {failure_words(error)}", file=sys.stderr, flush=True)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Start one process per local GPU; exit 0 once every rank has finished."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("NCCL_DEBUG", "WARN")
    node_rank = int(os.environ.get("NODE_RANK", os.environ.get("JOB_COMPLETION_INDEX", "0")))
    try:
        import torch
        import torch.multiprocessing as mp

        gpus = args.ngpus or torch.cuda.device_count()
        if gpus < 1:
            raise RuntimeError("this pod sees no GPU (torch.cuda.device_count() is 0)")
        if gpus == 1:
            rank_main(0, args, node_rank, gpus)
        else:
            mp.spawn(rank_main, args=(args, node_rank, gpus), nprocs=gpus, join=True)
    except Exception as error:  # every failure ends in one line naming it
        return _failed(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
