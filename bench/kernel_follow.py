"""The kernel-log follower against a burst and a 100 MB line, this tree against a before-tree.

Two cases, each run in a fresh Python process per tree (so peak memory is the case's own):

- burst: 20 MB of ordinary kernel lines are appended to a followed kern.log, then one XID
  line; the time from the append to the follower giving the XID, waiting as the daemon's
  event path does (`wait`, then `new_entries`);
- long line: an XID line, one line of 100 MB, then a second XID; whether both XIDs are given,
  how long it takes, and the process's peak RSS above what it held before the append.

Usage:
    .venv/bin/python bench/kernel_follow.py [--before DIR] [--runs 3] [--limit 70]

`--before DIR` names a tree holding an older `agent/gpuprobe` (e.g. `git archive <commit>
agent | tar -x -C DIR`); without it only this tree is measured. A case that does not give its
XIDs within `--limit` seconds is reported as not given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
# rsyslog's RSYSLOG_FileFormat lines, as the synthetic snapshots' kern.log holds them.
NOISE = (
    "2026-11-29T09:40:01.000000+00:00 gpu-node-17 kernel: mlx5_core 0000:0c:00.0: "
    "mlx5_port_module_event:1131:(pid 0): Port module event: module 0, Cable unplugged\n"
)
XID = (
    "2026-11-29T09:40:02.511207+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): {n}, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)
BURST_BYTES = 20 * 1024 * 1024
LINE_BYTES = 100 * 1024 * 1024


def child(case: str, limit: float) -> dict[str, Any]:
    """Run one case in this process (its tree is the one on sys.path)."""
    from gpuprobe.gpu.kernel_follow import KernelLogFollower
    from gpuprobe.host.fs import HostFS

    with tempfile.TemporaryDirectory(prefix="gpuprobe-follow-") as tmp:
        log = Path(tmp) / "var" / "log" / "kern.log"
        log.parent.mkdir(parents=True)
        log.write_text(NOISE)
        fs, paths = HostFS(tmp, snapshot=True), ["/var/log/kern.log"]
        follower = made_follower(KernelLogFollower, fs, paths)
        follower.start()
        want = 1
        try:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            with open(log, "ab") as f:
                if case == "burst":
                    piece = NOISE.encode() * (1024 * 1024 // len(NOISE))  # written 1 MiB at a time
                    for _ in range(BURST_BYTES // len(piece)):
                        f.write(piece)
                    f.write(XID.format(n=79).encode())
                else:
                    want = 2
                    f.write(XID.format(n=79).encode())
                    chunk = b"A" * (1024 * 1024)
                    for _ in range(LINE_BYTES // len(chunk)):
                        f.write(chunk)
                    f.write(b"\n" + XID.format(n=48).encode())
            started = time.monotonic()
            found: list[str] = []
            while len(found) < want and time.monotonic() - started < limit:
                follower.wait(max(0.0, limit - (time.monotonic() - started)))
                found += [text for text in new_texts(follower) if "NVRM: Xid" in text]
            elapsed = time.monotonic() - started
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        finally:
            follower.close()
    return {
        "given": len(found),
        "wanted": want,
        "seconds": round(elapsed, 3),
        "rss_above_mb": round((peak - before) / 1024, 1),
    }


def new_texts(follower: Any) -> list[str]:
    """The texts of what the follower gives now (its entries; an early tree's lines)."""
    if hasattr(follower, "new_entries"):
        return [entry.record.text for entry in follower.new_entries()]
    lines: list[str] = follower.new_lines()
    return lines


def made_follower(follower: Any, fs: Any, paths: list[str]) -> Any:
    """The follower as the daemon's event path makes it in this tree: through the host's
    followed files (this tree), with the markers of the kinds its checks subscribe to (the
    tree before), or as the earliest trees made it."""
    try:
        from gpuprobe.gpu.journal.files import LogFiles

        return follower(fs, paths, None, files=LogFiles())
    except (ImportError, TypeError):
        pass
    try:
        from gpuprobe.daemon.signals import KERNEL_MARKERS

        return follower(fs, paths, None, markers=KERNEL_MARKERS)
    except (ImportError, TypeError):
        pass
    try:
        from gpuprobe.checks.registry import CHECKS, kernel_kinds
        from gpuprobe.daemon.signals import kernel_markers

        return follower(fs, paths, None, markers=kernel_markers(kernel_kinds(CHECKS)))
    except (ImportError, TypeError):
        return follower(fs, paths, False)


def run(tree: Path, case: str, limit: float) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree / "agent")}
    out = subprocess.run(
        [sys.executable, __file__, "--child", case, "--limit", str(limit)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=limit + 120,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="a tree with an older agent/gpuprobe")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=float, default=70.0)
    parser.add_argument("--child", choices=["burst", "long line"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.limit)))
        return
    trees = [("after", HERE)] + ([("before", args.before)] if args.before else [])
    print(f"# {os.cpu_count()} CPUs; {args.runs} runs per case and tree; limit {args.limit} s")
    print("| case | tree | XIDs given | seconds (median) | peak RSS above start, MB (max) |")
    print("| --- | --- | --- | --- | --- |")
    for case in ("burst", "long line"):
        for name, tree in trees:
            results = [run(tree, case, args.limit) for _ in range(args.runs)]
            given = min(r["given"] for r in results)
            seconds = statistics.median(r["seconds"] for r in results)
            rss = max(r["rss_above_mb"] for r in results)
            wanted = results[0]["wanted"]
            print(f"| {case} | {name} | {given} of {wanted} | {seconds:.3f} | {rss:.1f} |")


if __name__ == "__main__":
    main()
