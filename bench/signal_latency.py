"""Time from a fault's kernel-log line to the node's condition and to `/metrics`, at
`--interval 60` (the event path, docs/configuration.md `serve.follow_events`).

    python bench/signal_latency.py --trials 20 --source kern.log
    python bench/signal_latency.py --trials 20 --source kmsg
    python bench/signal_latency.py --trials 5 --rounds-only     # the reference: rounds alone
    python bench/signal_latency.py --idle-cpu 600 --reference-agent DIR   # CPU at idle, paired
    python bench/signal_latency.py --ring-records 65536 ...   # with a full /dev/kmsg ring
    python bench/signal_latency.py --idle-cpu 180 --log-bytes 16777216 --reference-agent DIR

Each trial starts `gpuprobe serve` on a fresh copy of the 8-GPU snapshot
`synthetic-h100-8gpu-healthy`, publishing to the tests' Kubernetes API stand-in
(tests/kube_standin.py, HTTPS on loopback, started here) with the taint on; once the node's
`GPUHardwareReady` is True, it appends the driver's line for a GPU fallen off the bus, XID 79,
to the snapshot's `rootfs/var/log/kern.log` (as rsyslog writes it) or, with `--source kmsg`, the
record to `rootfs/dev/kmsg` (as the device gives it), and times until the stand-in holds
`GPUHardwareReady=False` and until `/metrics` shows the XID finding. Prints p50, p99 and max of
both, in seconds, as JSON. `--rounds-only` turns the event path off (`serve.follow_events:
false`): the reference, where the fault waits for the next round (the line comes just after the
agent's first round, so about one interval).

`--idle-cpu SECONDS` instead serves the snapshot at `--interval 60` for that long, scraped every
15 s, beside the same agent started from `--reference-agent` (a source tree's `agent/`
directory put first on PYTHONPATH: the code before the event path, e.g. from
`git archive <commit> agent | tar -x -C DIR`), and prints each one's CPU as a percentage of one
core: both at the same time, so the machine's noise falls on both (`--reference-first` starts
the reference first).
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
import threading
import time
import urllib.request
from pathlib import Path

from agents import ROOT, SNAPSHOT, cpu_seconds, serve, stop

sys.path.insert(0, str(ROOT / "tests"))
from kube_standin import KubeStandIn, running

NODE = "gpu-node-17"
KERN_LOG_LINE = (
    "{stamp} gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
    "name=<unknown>, GPU has fallen off the bus.\n"
)
KMSG_RECORD = (
    "4,{sequence},{usec},-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n"
)
KMSG_NOISE = (
    "6,{sequence},{usec},-;mlx5_core 0000:0c:00.0: mlx5_port_module_event:1131:(pid 0): Port "
    "module event: module 0, Cable unplugged\n"
)
KMSG_START = "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"
FINDING = 'check="xid",code="XID"'
# How long a trial waits for the fault to show: past a 60 s round with its 10 % jitter.
WATCH_SECONDS = 90


def main() -> None:
    """Run the trials (or the idle CPU comparison) and print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--source", choices=["kern.log", "kmsg"], default="kern.log")
    parser.add_argument("--interval", type=float, default=60)
    parser.add_argument("--idle-cpu", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--reference-agent", help="an agent/ directory to compare with")
    parser.add_argument(
        "--reference-first", action="store_true", help="with --idle-cpu: start it first"
    )
    parser.add_argument(
        "--ring-records",
        type=int,
        default=0,
        metavar="N",
        help="fill the snapshot's /dev/kmsg with N kernel records first (65536: a full ring)",
    )
    parser.add_argument(
        "--log-bytes",
        type=int,
        default=0,
        metavar="N",
        help="with --idle-cpu: put N bytes of a NIC's kernel lines before kern.log's own",
    )
    parser.add_argument(
        "--rounds-only",
        action="store_true",
        help="the reference: serve.follow_events off, the fault waits for the next round",
    )
    args = parser.parse_args()
    if args.idle_cpu:
        print(json.dumps(idle_cpu(args), indent=1))
        return
    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as standin:
        config = Path(tmp) / "config.yaml"
        settings: dict[str, object] = {
            "kubernetes": {"start_jitter_seconds": 0, "taint": {"enabled": True}}
        }
        if args.rounds_only:
            settings["serve"] = {"follow_events": False}
        config.write_text(json.dumps(settings))
        flags = [
            *("--interval", str(args.interval), "--kubeconfig", str(standin.kubeconfig())),
            *("--config", str(config), "--node-name", NODE),
        ]
        to_node, to_metrics = [], []
        for i in range(args.trials):
            node, page = trial(
                Path(tmp) / f"trial-{i}", standin, flags, args.source, args.ring_records
            )
            to_node.append(node)
            to_metrics.append(page)
            print(f"trial {i}: node {node:.3f} s, /metrics {page:.3f} s", file=sys.stderr)
    print(
        json.dumps(
            {
                "source": args.source,
                "event_path": not args.rounds_only,
                "interval_seconds": args.interval,
                "trials": args.trials,
                "ring_records": args.ring_records,
                "to_node_condition_seconds": summary(to_node),
                "to_metrics_seconds": summary(to_metrics),
                "load_average_1m_end": round(os.getloadavg()[0], 2),
            },
            indent=1,
        )
    )


def fill_ring(directory: Path, records: int) -> int:
    """Write the snapshot's /dev/kmsg: the boot's first record and `records` - 1 ordinary
    kernel records after it (a NIC's port events); the next sequence number."""
    ring = directory / "rootfs/dev/kmsg"
    ring.parent.mkdir(exist_ok=True)
    with open(ring, "w") as f:
        f.write(KMSG_START)
        for sequence in range(1, records):
            f.write(KMSG_NOISE.format(sequence=sequence, usec=sequence * 1000))
    return max(records, 1)


def memory_mib(pid: int) -> dict[str, float]:
    """A process's resident memory now and at its peak (/proc's VmRSS, VmHWM), in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    kib = {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM") if key in fields}
    return {
        "rss_mib": round(kib.get("VmRSS", 0) / 1024, 1),
        "peak_rss_mib": round(kib.get("VmHWM", 0) / 1024, 1),
    }


def fill_log(directory: Path, size: int) -> None:
    """Put `size` bytes of a NIC's kernel lines, as rsyslog writes them, before the snapshot's
    own kern.log lines."""
    log = directory / "rootfs/var/log/kern.log"
    own = log.read_bytes()
    line = (
        b"2026-11-29T09:39:01.000000+00:00 gpu-node-17 kernel: mlx5_core 0000:0c:00.0: "
        b"mlx5_port_module_event:1131:(pid 0): Port module event: module 0, Cable unplugged\n"
    )
    log.write_bytes(line * (size // len(line)) + own)


def trial(
    directory: Path, standin: KubeStandIn, flags: list[str], source: str, ring_records: int = 0
) -> tuple[float, float]:
    """One agent, one fault: seconds from the line to the condition and to /metrics."""
    shutil.copytree(SNAPSHOT, directory)
    ring = directory / "rootfs/dev/kmsg"
    sequence = 1
    if source == "kmsg" or ring_records:
        sequence = fill_ring(directory, ring_records)
    proc, _, metrics_port = serve(flags, directory)
    try:
        wait(lambda: hardware(standin) == "True", 60)
        wait(lambda: 'check="xid"} 0.0' in metrics(metrics_port), 30)
        seen: dict[str, float] = {}
        watchers = [
            threading.Thread(
                target=watch, args=(seen, "node", lambda: hardware(standin) == "False")
            ),
            threading.Thread(
                target=watch, args=(seen, "metrics", lambda: FINDING in metrics(metrics_port))
            ),
        ]
        started = time.monotonic()
        if source == "kmsg":
            usec = int(time.monotonic() * 1e6)
            with open(ring, "a") as f:
                f.write(KMSG_RECORD.format(sequence=sequence, usec=usec))
        else:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())
            with open(directory / "rootfs/var/log/kern.log", "a") as f:
                f.write(KERN_LOG_LINE.format(stamp=stamp))
        for t in watchers:
            t.start()
        for t in watchers:
            t.join(WATCH_SECONDS + 5)
        return seen["node"] - started, seen["metrics"] - started
    finally:
        stop(proc)


def watch(seen: dict[str, float], key: str, condition: object) -> None:
    """Poll `condition` every 5 ms (WATCH_SECONDS at most) and note when it first holds."""
    assert callable(condition)
    end = time.monotonic() + WATCH_SECONDS
    while time.monotonic() < end:
        if condition():
            seen[key] = time.monotonic()
            return
        time.sleep(0.005)
    raise RuntimeError(f"{key}: not reached within {WATCH_SECONDS} s")


def hardware(standin: KubeStandIn) -> str | None:
    """The node's GPUHardwareReady status in the stand-in."""
    found = standin.conditions(NODE).get("GPUHardwareReady")
    return found["status"] if found else None


def metrics(port: int) -> str:
    """The agent's /metrics page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def wait(condition: object, timeout: float) -> None:
    """Wait until `condition()` holds."""
    assert callable(condition)
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise RuntimeError("timed out")
        time.sleep(0.05)


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 (nearest rank) and max, in seconds."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, max(0, round(0.99 * len(ordered) + 0.5) - 1))]
    return {
        "p50": round(statistics.median(ordered), 3),
        "p99": round(p99, 3),
        "max": round(ordered[-1], 3),
    }


def idle_cpu(args: argparse.Namespace) -> dict[str, object]:
    """This tree's agent and the reference's, side by side, idle at the interval."""
    if not args.reference_agent:
        raise SystemExit("--idle-cpu needs --reference-agent DIR (an agent/ directory)")
    reference = Path(args.reference_agent).resolve()
    procs: dict[str, tuple[subprocess.Popen[str], int]] = {}
    env_before = os.environ.get("PYTHONPATH")
    order = ["reference", "this"] if args.reference_first else ["this", "reference"]
    snapshot = SNAPSHOT
    if args.ring_records or args.log_bytes:  # both agents serve one copy holding them
        snapshot = Path(tempfile.mkdtemp(prefix="gpuprobe-ring-")) / "node"
        shutil.copytree(SNAPSHOT, snapshot)
        if args.ring_records:
            fill_ring(snapshot, args.ring_records)
        if args.log_bytes:
            fill_log(snapshot, args.log_bytes)
    try:
        for name in order:
            if name == "reference":
                os.environ["PYTHONPATH"] = str(reference)
            elif env_before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = env_before
            proc, _, port = serve(["--interval", str(args.interval)], snapshot)
            procs[name] = (proc, port)
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    try:
        time.sleep(5)
        start = {name: cpu_seconds(p.pid) for name, (p, _) in procs.items()}
        began = time.monotonic()
        while (elapsed := time.monotonic() - began) < args.idle_cpu:
            for _, port in procs.values():
                metrics(port)
            time.sleep(min(15, max(0.0, args.idle_cpu - elapsed)))
        elapsed = time.monotonic() - began
        return {
            name: {
                "cpu_percent_of_one_core": round(
                    100 * (cpu_seconds(p.pid) - start[name]) / elapsed, 3
                ),
                **memory_mib(p.pid),
            }
            for name, (p, _) in procs.items()
        } | {
            "run": {
                "interval_seconds": args.interval,
                "duration_seconds": round(elapsed, 1),
                "reference_agent": str(reference),
                "ring_records": args.ring_records,
                "log_bytes": args.log_bytes,
                "started_first": order[0],
                "load_average_1m_end": round(os.getloadavg()[0], 2),
            }
        }
    finally:
        for p, _ in procs.values():
            stop(p)
        if snapshot != SNAPSHOT:
            shutil.rmtree(snapshot.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
