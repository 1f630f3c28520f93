#!/usr/bin/env python3
"""gpuprobe's storage throughput against fio's, same path, block size, size, jobs, direct flag.

Each round runs `gpuprobe check --only storage` (the real command, JSON report) and fio's
matching sequential write then read jobs, alternating which goes first, and prints each
round's figures and the gpuprobe/fio ratios, then the median ratio per direction. Target:
write and read each within ±15 % of fio (ratio 0.85-1.15).

fio is run as the measurement the check performs: `--ioengine=psync --rw=write|read
--end_fsync=1 --fallocate=none --iomem_align=4096 --scramble_buffers=0 --numjobs=J
--size=S/J --offset_increment=S/J --group_reporting`, with `--direct=1`, or `--direct=0` when
gpuprobe fell back to buffered I/O (fio's default `invalidate=1` drops the file's cached pages
before the read, as gpuprobe does). Two of these make fio's buffers like gpuprobe's, so that
both measure the storage and not their own buffer handling: page-aligned (on some CPUs the
kernel copies into an unaligned buffer several times slower) and written as they are (fio by
default rewrites two words in every 512-byte sector before each write, CPU time that shows on
memory-speed filesystems; gpuprobe writes one distinct word per block).

Usage (from the repository root, after install):
  bench/storage_vs_fio.py PATH [--size BYTES] [--block-size BYTES] [--jobs N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".venv" / "bin" / "python"


SETTLE_SECONDS = 2.0


def settle() -> None:
    """Flush and pause before each run: on virtual disks the host's write-back of the last
    run's data would otherwise slow whichever tool starts writing sooner (fio starts faster
    than a Python process)."""
    os.sync()
    time.sleep(SETTLE_SECONDS)


def gpuprobe(path: str, size: int, block: int, jobs: int) -> dict[str, float | str]:
    """One storage check through the command line; its figures for `path`."""
    settle()
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as cfg:
        cfg.write(
            f"checks: {{deadlines: {{storage: 3600}}}}\n"
            f"storage: {{size_bytes: {size}, block_size_bytes: {block}, jobs: {jobs}, "
            "time_limit_seconds: 2000, force: true}\n"
        )
        cfg.flush()
        python = str(PYTHON) if PYTHON.exists() else sys.executable
        CHECK = [python, "-m", "gpuprobe", "check", "--json", "--only", "storage"]
        out = subprocess.run(
            [*CHECK, "--config", cfg.name, "--storage-path", path],
            capture_output=True,
            text=True,
            check=False,
        )
    entry = json.loads(out.stdout)["checks"][0]["data"]["paths"][0]
    if not entry["measured"] or entry["time_limited"]:
        raise SystemExit(f"gpuprobe did not measure {path}: {entry['not_measured']}")
    return {
        "write": entry["write_bytes_per_second"],
        "read": entry["read_bytes_per_second"],
        "method": entry["method"],
    }


def fio(path: str, size: int, block: int, jobs: int, direct: bool) -> dict[str, float]:
    """fio's sequential write, then read, of one file in `path`; bytes per second each."""
    target = os.path.join(path, f".fio-bench-{os.getpid()}.tmp")
    per_job = size // jobs // block * block
    common = [
        "fio",
        "--output-format=json",
        "--ioengine=psync",
        f"--filename={target}",
        f"--bs={block}",
        f"--size={per_job}",
        f"--numjobs={jobs}",
        f"--offset_increment={per_job}",
        f"--direct={int(direct)}",
        "--iomem_align=4096",  # page-aligned buffers, as gpuprobe's (fio aligns direct I/O only)
        "--scramble_buffers=0",  # no rewrite of every 512-byte sector per write, see above
        "--end_fsync=1",
        "--fallocate=none",
        "--group_reporting",
    ]
    figures = {}
    try:
        settle()
        for op in ("write", "read"):
            out = subprocess.run(
                [*common, f"--name={op}", f"--rw={op}"], capture_output=True, text=True, check=True
            )
            figures[op] = float(json.loads(out.stdout)["jobs"][0][op]["bw_bytes"])
    finally:
        if os.path.exists(target):
            os.unlink(target)
    return figures


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """First quartile, median, third quartile."""
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    """Run a warm-up of each, then the rounds, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="directory to measure (on the filesystem under test)")
    parser.add_argument("--size", type=int, default=1024**3, help="test bytes (default 1 GiB)")
    parser.add_argument("--block-size", type=int, default=1024**2, help="default 1 MiB")
    parser.add_argument("--jobs", type=int, default=4, help="parallel jobs (default 4)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds (default 9)")
    args = parser.parse_args()
    shape = (args.path, args.size, args.block_size, args.jobs)
    # The warm-up also tells which method gpuprobe uses here; fio gets the same direct flag.
    direct = gpuprobe(*shape)["method"] == "direct"
    fio(*shape, direct=direct)
    print(f"path {args.path}: {args.size} bytes, {args.block_size}-byte blocks, {args.jobs} jobs,")
    print(f"direct={int(direct)}; MB/s (10^6 bytes/s); gp = gpuprobe; fio runs twice a round")
    print("round  order        gp write  fio write  fio write  ratio", end="")
    print("   gp read  fio read  fio read  ratio")
    ratios: dict[str, list[float]] = {"write": [], "read": []}
    fio_vs_fio: dict[str, list[float]] = {"write": [], "read": []}
    for r in range(args.rounds):
        # Each tool takes each place in turn: first, between, last.
        order = [["gp", "fio", "fio"], ["fio", "gp", "fio"], ["fio", "fio", "gp"]][r % 3]
        fio_runs: list[dict[str, float]] = []
        gp: dict[str, float | str] = {}
        for tool in order:
            if tool == "gp":
                gp = gpuprobe(*shape)
            else:
                fio_runs.append(fio(*shape, direct=direct))
        cells = []
        for op in ("write", "read"):
            a, b = fio_runs[0][op], fio_runs[1][op]
            ratio = float(gp[op]) / ((a + b) / 2)
            ratios[op].append(ratio)
            fio_vs_fio[op].append(abs(1 - a / b))
            cells.append(f"{float(gp[op]) / 1e6:9.1f} {a / 1e6:10.1f} {b / 1e6:10.1f} {ratio:6.3f}")
        print(f"{r + 1:5}  {'-'.join(order):11}{cells[0]}  {cells[1]}")
    print("ratio = gpuprobe / the mean of the round's two fio runs")
    for op in ("write", "read"):
        q1, med, q3 = quartiles(ratios[op])
        verdict = "within" if 0.85 <= med <= 1.15 else "OUTSIDE"
        noise = statistics.median(fio_vs_fio[op])
        print(
            f"{op}: median ratio {med:.3f} (quartiles {q1:.3f}-{q3:.3f}), {verdict} ±15 % of fio;"
            f" fio's two runs in a round differ by {noise:.0%} (median)"
        )


if __name__ == "__main__":
    main()
