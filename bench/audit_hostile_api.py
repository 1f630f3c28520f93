"""`gpuprobe audit --kubeconfig --deadline N` against API servers that misbehave: one that accepts
connections and never answers, one that drips every answer a byte at a time, and one that
answers the node list with 1,000,000 empty items in one 3 MB page (asked with `limit=500`).

    .venv/bin/python bench/audit_hostile_api.py --deadline 5 [--before DIR]

Each case is the whole command under /usr/bin/time (bench/audit_scale.py's `timed`): wall
seconds and peak RSS. The API servers: a plain socket that accepts and never reads (no TLS
handshake completes), and the tests' stand-in (tests/kube_standin.py) with its drip and its
served-as-is answers. `--before DIR` runs the same cases with the package of another tree
(`DIR/agent`, e.g. `git archive <commit> agent | tar -x -C DIR`) in the same run, for the
ratio. Prints a JSON object. Targets: every case within the deadline and the view's 2 s grace
(and the interpreter's start), the million-item page under 300 MB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "bench")]

from audit_scale import timed  # noqa: E402
from kube_standin import AUDITOR, KubeStandIn, auditor_rules  # noqa: E402

TOKEN = "auditor-token"
MILLION = (
    b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":['
    + b"{}," * 999_999
    + b"{}]}"
)


@contextmanager
def silent(directory: Path) -> Iterator[Path]:
    """A kubeconfig for a server that accepts and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    path = directory / "kubeconfig-silent"
    cluster = {
        "server": f"https://127.0.0.1:{listener.getsockname()[1]}",
        "insecure-skip-tls-verify": True,
    }
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "s", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield path
    finally:
        listener.close()
        for connection in held:
            connection.close()


def run(kubeconfig: Path, deadline: float, tree: Path | None) -> dict[str, float]:
    """One audit, timed; with `tree`, that tree's package instead of this one."""
    if tree is not None:
        os.environ["PYTHONPATH"] = str(tree / "agent")
    try:
        command = [sys.executable, "-m", "gpuprobe", "audit", "--kubeconfig", str(kubeconfig)]
        found = timed([*command, "--deadline", f"{deadline:g}", "--json"], [])
    finally:
        os.environ.pop("PYTHONPATH", None)
    return {"seconds": found["seconds"], "peak_rss_mib": found["peak_rss_mib"]}


def cases(deadline: float, tree: Path | None) -> dict[str, Any]:
    """The three hostile servers and a well-behaved one (the floor)."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with silent(directory) as kubeconfig:
            found["never_answers"] = run(kubeconfig, deadline, tree)
        standin = KubeStandIn(directory, auditor_rules())
        standin.add_user(TOKEN, AUDITOR, auditor_rules())
        standin.add_node("gpu-node-1", {"nvidia.com/gpu.present": "true"})
        standin.start()
        try:
            kubeconfig = standin.kubeconfig(TOKEN)
            found["well_behaved"] = run(kubeconfig, deadline, tree)
            standin.faults.served = {"/api/v1/nodes": MILLION}
            found["million_item_page"] = run(kubeconfig, deadline, tree)
            standin.faults.served = {}
            standin.faults.drip = 0.05
            found["drips"] = run(kubeconfig, deadline, tree)
        finally:
            standin.stop()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deadline", type=float, default=5.0)
    parser.add_argument("--before", type=Path, help="a tree with the package to compare")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "deadline_seconds": args.deadline,
        "cpu": next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            "unknown",
        ),
        "cores": len(os.sched_getaffinity(0)),
        "this_tree": cases(args.deadline, None),
    }
    if args.before is not None:
        report["before"] = cases(args.deadline, args.before)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
