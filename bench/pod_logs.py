"""What the `pods` check's log reading costs on a node of large logs, beside GNU `tail -c`.

    python bench/pod_logs.py --containers 100 --rounds 20

Builds a kubelet log tree (`var/log/pods/<ns>_<pod>_<uid>/<container>/`) of `--containers`
containers, each with a live `1.log` of 1 GiB (sparse: no disk used) that ends in 256 KiB of
CRI lines, a rotated `1.log.<stamp>` and the previous instance's `0.log`. Each round lists the
tree, reads every container's 64 KiB tail, parsed into lines, and matches every line against
the signatures (a healthy log: nothing matches, so every line is tried). The reference is one
`tail -q -c 65536` over the same live files, which only seeks and copies. Prints p50 / p99 of
both in milliseconds, their ratio, and the peak memory one round of the check's reading
allocates, as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "agent")]

from gpuprobe.checks.rules import pod_signatures  # noqa: E402
from gpuprobe.containers import cri_log  # noqa: E402
from gpuprobe.host.fs import HostFS  # noqa: E402

LINE = (
    "2026-11-29T20:{m:02d}:{s:02d}.{n:09d}Z stdout F step {n} loss 2.31 lr 3.0e-4 tokens/s 91234\n"
)


def build(root: Path, containers: int) -> list[Path]:
    """The log tree; returns the live files."""
    tail = "".join(LINE.format(m=n // 3600 % 60, s=n // 60 % 60, n=n) for n in range(3000))
    tail = tail[-256 * 1024 :]
    tail = tail[tail.index("\n") + 1 :]
    live = []
    for i in range(containers):
        base = (
            root / f"var/log/pods/ml-team_trainer-{i}_7c1e{i:04x}-2d4b-4a8e-9f3c-{i:012x}/trainer"
        )
        base.mkdir(parents=True)
        path = base / "1.log"
        with open(path, "wb") as f:
            f.truncate(1024**3)
            f.seek(0, 2)
            f.write(b"\n" + tail.encode())
        (base / "1.log.20261129-204500").write_text(tail[:4096])
        (base / "0.log").write_text(tail[:4096])
        live.append(path)
    return live


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds."""
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"p50_ms": round(statistics.median(ordered) * 1e3, 3), "p99_ms": round(p99 * 1e3, 3)}


def check_round(fs: HostFS) -> int:
    """List the tree, read every tail and match every line (healthy logs: no line matches,
    the most the check pays); returns the lines parsed."""
    count = 0
    for log in cri_log.list_logs(fs):
        lines = cri_log.read_tail(fs, log).lines
        count += len(lines)
        for line in reversed(lines):
            pod_signatures.match(line.text)
    return count


def main() -> None:
    """Time the rounds and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="gp-bench-", dir="/tmp"))
    try:
        live = build(root, args.containers)
        fs = HostFS(root)
        lines = check_round(fs)
        ours, tails = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            check_round(fs)
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(
                ["tail", "-q", "-c", "65536", *map(str, live)],
                stdout=subprocess.DEVNULL,
                check=True,
            )
            tails.append(time.perf_counter() - started)
        tracemalloc.start()
        check_round(fs)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        result = {
            "containers": args.containers,
            "log_bytes_per_container": 1024**3,
            "lines_parsed_per_round": lines,
            "pods_check": percentiles(ours),
            "tail_c": percentiles(tails),
            "ratio_p50": round(statistics.median(ours) / statistics.median(tails), 2),
            "peak_traced_bytes": peak,
        }
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
