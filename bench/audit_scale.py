"""How `gpuprobe audit` grows with the fleet: 1,000 and 10,000 agents on loopback addresses.

    .venv/bin/python bench/audit_scale.py --sizes 1000,10000 --runs 5

The fleet is bench/recorded_fleet.py: reports recorded from real agents (`gpuprobe serve`'s
Agent on the 8-GPU snapshots), answered by one gRPC server per process on thousands of
loopback addresses (127.1.0.1, ...), so the audit meets N distinct agents while the fleet
costs little. Each run is the whole command, `gpuprobe audit --json --targets @FILE`, under
/usr/bin/time: its wall time and peak RSS (of its largest process, and of all its processes
together: an audit of thousands runs helper processes), and what the fleet's processes spent
of the two cores meanwhile (CPU seconds over wall seconds × cores). Beside it, a bare Python
start-up (the floor) and, for sizes up to --reference-max, the same job done with an
independent gRPC client: `buf curl` GetReport on each agent, 16 at a time (xargs -P 16), the
API read from proto/ (the recorded fleet serves no reflection).

Prints a JSON object. Targets: 1,000 agents under 2 s and 10,000 under 10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLEET = ROOT / "bench" / "recorded_fleet.py"
SNAPSHOTS = [
    str(ROOT / "tests" / "snapshots" / name)
    for name in ("synthetic-h100-8gpu-healthy", "synthetic-h100-8gpu-idle")
]


def cpu_seconds(pids: list[int]) -> float:
    """The CPU seconds (user + system) the processes have spent so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / tick


def tree_rss_kib(root: int) -> int:
    """The resident memory of a process and all its descendants now (KiB, from /proc)."""
    total, waiting = 0, [root]
    while waiting:
        pid = waiting.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            for task in Path(f"/proc/{pid}/task").iterdir():
                waiting += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # it exited meanwhile
        rss = [line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")]
        total += int(rss[0]) if rss else 0  # a zombie has no VmRSS line
    return total


def timed(command: list[str], fleet: list[int]) -> dict[str, float]:
    """One run of `command` under /usr/bin/time: wall seconds, peak RSS (the largest single
    process, as /usr/bin/time reports it, and the audit's processes together, sampled every
    20 ms), the fleet's share of the cores."""
    with tempfile.NamedTemporaryFile("r") as out:
        before = cpu_seconds(fleet)
        started = time.monotonic()
        child = subprocess.Popen(
            ["/usr/bin/time", "-o", out.name, "-f", "%e %M %U %S", *command],
            stdout=subprocess.DEVNULL,
            env={**os.environ, "GRPC_VERBOSITY": "NONE"},
        )
        peak_tree = 0
        while child.poll() is None:
            peak_tree = max(peak_tree, tree_rss_kib(child.pid))
            time.sleep(0.02)
        wall = time.monotonic() - started
        spent = cpu_seconds(fleet) - before
        elapsed, rss_kib, user, system = out.read().split()[-4:]
    if child.returncode not in (0, 1, 2, 3):
        raise SystemExit(f"{command[:4]} failed with {child.returncode}")
    cores = len(os.sched_getaffinity(0))
    return {
        "seconds": float(elapsed),
        "peak_rss_mib": round(int(rss_kib) / 1024, 1),
        "peak_rss_all_processes_mib": round(peak_tree / 1024, 1),
        "cpu_seconds": round(float(user) + float(system), 2),  # its helpers' included
        "fleet_share_of_cores": round(spent / (wall * cores), 3),
    }


def summarize(runs: list[dict[str, float]]) -> dict[str, Any]:
    """Median, min and max seconds; the largest peak RSSs; the median CPU seconds and fleet
    share."""
    seconds = [r["seconds"] for r in runs]
    return {
        "median_seconds": statistics.median(seconds),
        "min_seconds": min(seconds),
        "max_seconds": max(seconds),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "peak_rss_all_processes_mib": max(r["peak_rss_all_processes_mib"] for r in runs),
        "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
        "fleet_share_of_cores": statistics.median(r["fleet_share_of_cores"] for r in runs),
        "runs": len(runs),
    }


def check_audit(python: str, targets: str, count: int) -> None:
    """One audit first: every agent must answer, or the timings would mean nothing."""
    out = subprocess.run(
        [python, "-m", "gpuprobe", "audit", "--json", "--deadline", "60", "--targets", targets],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GRPC_VERBOSITY": "NONE"},
    )
    totals = json.loads(out.stdout)["totals"]
    if totals["reachable_nodes"] != count:
        raise SystemExit(f"only {totals['reachable_nodes']} of {count} agents answered")


def main() -> int:
    """Start the fleet, time the audits and the reference, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="agent counts, comma-separated")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each audit")
    parser.add_argument("--processes", type=int, default=2, help="the fleet's processes")
    parser.add_argument(
        "--reference-max", type=int, default=1000, help="largest size buf curl also runs"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    python = sys.executable
    buf = shutil.which("buf")
    result: dict[str, Any] = {"load_average_before": os.getloadavg()[0], "sizes": {}}
    fleet = subprocess.Popen(
        [python, str(FLEET), "--count", str(max(sizes)), "--processes", str(args.processes)]
        + [arg for s in SNAPSHOTS for arg in ("--snapshot", s)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fleet.stdout is not None
        started = json.loads(fleet.stdout.readline())
        pids, listing = started["pids"], Path(started["targets_file"])
        everyone = listing.read_text().splitlines()
        with tempfile.TemporaryDirectory() as tmp:
            result["floor"] = summarize([timed([python, "-c", "pass"], pids) for _ in range(3)])
            for n in sizes:
                targets = Path(tmp) / f"targets-{n}"
                targets.write_text("\n".join(everyone[:n]) + "\n")
                check_audit(python, f"@{targets}", n)
                audit = [python, "-m", "gpuprobe", "audit", "--json", "--deadline", "60"]
                runs = [timed([*audit, "--targets", f"@{targets}"], pids) for _ in range(args.runs)]
                entry: dict[str, Any] = {"audit": summarize(runs)}
                if buf is not None and n <= args.reference_max:
                    curl = (
                        # The recorded fleet serves no reflection: buf reads the API from proto/.
                        f"xargs -P 16 -I@ {buf} curl --schema {ROOT} --protocol grpc "
                        "--http2-prior-knowledge "
                        f"http://@/gpuprobe.v1.NodeDiagnostics/GetReport -d '{{}}' "
                        f"< {targets} > /dev/null"
                    )
                    reference = summarize([timed(["sh", "-c", curl], pids)])
                    entry["buf_curl_16_at_a_time"] = reference
                    entry["audit_over_buf_curl"] = round(
                        entry["audit"]["median_seconds"] / reference["median_seconds"], 3
                    )
                result["sizes"][str(n)] = entry
    finally:
        if fleet.stdin is not None:
            fleet.stdin.close()
        fleet.wait(30)
    result["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
