"""How `gpuprobe audit` grows with the number of agents: 16, 64 and 256 real agents on
loopback, served by a few processes (64 agents each, every agent on its own port), timed by
hyperfine beside a bare Python start-up (the floor) and beside the same job done with an
independent gRPC client: `buf curl` GetReport on each agent, 16 at a time (xargs -P 16).

    .venv/bin/python bench/audit_scale.py --sizes 16,64,256 --runs 10

Prints a JSON object: per size the audit's and the reference's mean, min and max seconds
and their ratio, the floor, and the machine's load average around the run. Target: the audit
of 256 agents under 3 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fleet import FleetAgent, fleet  # noqa: E402

SNAPSHOTS = [
    str(ROOT / "tests" / "snapshots" / name)
    for name in ("synthetic-h100-8gpu-healthy", "synthetic-driver-too-old")
]


def start_agents(count: int, per_process: int, stack: contextlib.ExitStack) -> list[FleetAgent]:
    """`count` agents over ceil(count / per_process) processes, listed round-robin across the
    processes so that any first N of them spread over every process."""
    groups = []
    for k in range(0, count, per_process):
        size = min(per_process, count - k)
        groups.append(stack.enter_context(fleet(SNAPSHOTS, size, f"p{k // per_process}-node-")))
    ordered = []
    for i in range(max(len(g) for g in groups)):
        ordered += [g[i] for g in groups if i < len(g)]
    return ordered


def hyperfine(commands: dict[str, str], runs: int, out: Path) -> dict[str, dict[str, float]]:
    """Time the commands (name → shell command); mean, min and max seconds of each."""
    args = ["hyperfine", "--warmup", "1", "--runs", str(runs), "--export-json", str(out)]
    for name, command in commands.items():
        args += ["--command-name", name, command]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    results = json.loads(out.read_text())["results"]
    return {
        r["command"]: {k: round(r[k], 4) for k in ("mean", "stddev", "min", "max")} for r in results
    }


def check_audit(python: str, targets: str, count: int) -> None:
    """One audit first: every agent must answer, or the timings would mean nothing."""
    out = subprocess.run(
        [python, "-m", "gpuprobe", "audit", "--json", "--targets", targets],
        capture_output=True,
        text=True,
        check=False,
    )
    totals = json.loads(out.stdout)["totals"]
    if totals["reachable_nodes"] != count:
        raise SystemExit(f"only {totals['reachable_nodes']} of {count} agents answered")


def main() -> int:
    """Start the agents, time the audits and the reference, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="16,64,256", help="agent counts, comma-separated")
    parser.add_argument("--per-process", type=int, default=64, help="agents per process")
    parser.add_argument("--runs", type=int, default=10, help="hyperfine runs of each audit")
    parser.add_argument("--reference-runs", type=int, default=3, help="runs of buf curl")
    parser.add_argument("--no-reference", action="store_true", help="skip the buf curl runs")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    python = shlex.quote(sys.executable)
    buf = shutil.which("buf")
    if shutil.which("hyperfine") is None:
        raise SystemExit("hyperfine is not installed")
    if buf is None and not args.no_reference:
        raise SystemExit("buf is not installed (npm install -g @bufbuild/buf), or --no-reference")
    result: dict[str, Any] = {"load_average_before": os.getloadavg()[0], "sizes": {}}
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        agents = start_agents(max(sizes), args.per_process, stack)
        audits, references = {"floor": f"{python} -c pass"}, {}
        for n in sizes:
            targets = ",".join(a.target for a in agents[:n])
            check_audit(sys.executable, targets, n)
            audits[f"audit {n}"] = f"{python} -m gpuprobe audit --json --targets {targets}"
            listing = Path(tmp) / f"targets-{n}"
            listing.write_text("\n".join(a.target for a in agents[:n]) + "\n")
            references[f"buf curl {n}"] = (
                f"xargs -P 16 -I@ {buf} curl --protocol grpc --http2-prior-knowledge "
                f"http://@/gpuprobe.v1.NodeDiagnostics/GetReport -d '{{}}' < {listing} > /dev/null"
            )
        timed = hyperfine(audits, args.runs, Path(tmp) / "audit.json")
        if not args.no_reference:
            timed |= hyperfine(references, args.reference_runs, Path(tmp) / "reference.json")
    result["floor"] = timed["floor"]
    for n in sizes:
        entry: dict[str, Any] = {"audit": timed[f"audit {n}"]}
        if f"buf curl {n}" in timed:
            entry["buf_curl_16_at_a_time"] = timed[f"buf curl {n}"]
            entry["audit_over_buf_curl"] = round(
                timed[f"audit {n}"]["mean"] / timed[f"buf curl {n}"]["mean"], 3
            )
        result["sizes"][str(n)] = entry
    result["load_average_after"] = os.getloadavg()[0]
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
