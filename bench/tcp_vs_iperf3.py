"""gpuprobe's TCP bandwidth test against iperf3 on the same veth link, in one run.

Two network namespaces joined by a veth pair; for each case the tools take turns (iperf3,
gpuprobe, iperf3, gpuprobe, ...; who goes first alternates) so that both see the same
machine noise. Printed: the machine (CPU model, cores, kernel, congestion control, iperf3's
version) and the load average around each case, every round on stderr as it ends, then a
Markdown table of the medians, the median of the paired per-round ratios (the figure to read
on a noisy machine) and each tool's CPU seconds (both ends together) per Gbit moved.

Cases: one stream (`iperf3 -P1`), four streams (`iperf3 -P4`), four streams against four
iperf3 processes of one stream each side by side (iperf3 before 3.16 drives all its streams
from one thread: four processes are what 3.16's thread per stream can reach), and one
stream over a link capped at 1 Gbit/s with `tc qdisc ... tbf`. `--before DIR` also runs the
gpuprobe of another source tree (its `agent/` directory, put first on PYTHONPATH) in the
same rounds, for a before-and-after in one run.

Run as root from the repository root, after install:
  .venv/bin/python bench/tcp_vs_iperf3.py [--rounds 6] [--seconds 3] [--cases p1,p4]
                                          [--before ../before/agent]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SERVER_IP, CLIENT_IP = "10.99.0.2", "10.99.0.1"
TARGET = 0.9  # gpuprobe's figure at least this share of iperf3's, per case


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check)


@contextmanager
def veth_pair() -> Iterator[tuple[str, str]]:
    """Namespaces a (client) and b (server) joined by veth; removed on every way out."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"gpbench-a-{tag}", f"gpbench-b-{tag}"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "-n", a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b)
        sh("ip", "-n", a, "addr", "add", f"{CLIENT_IP}/24", "dev", "va")
        sh("ip", "-n", b, "addr", "add", f"{SERVER_IP}/24", "dev", "vb")
        for ns, dev in ((a, "va"), (b, "vb")):
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        yield a, b
    finally:
        sh("ip", "netns", "del", a, check=False)
        sh("ip", "netns", "del", b, check=False)


@dataclass(frozen=True)
class Run:
    """One measurement: bytes per second received, and CPU seconds (both ends) per Gbit."""

    bytes_per_second: float
    cpu_seconds_per_gbit: float


@dataclass(frozen=True)
class Case:
    """What both tools measure: `streams` streams, iperf3 as `processes` clients (each with
    streams / processes streams), on the bare link or one capped with tbf."""

    key: str
    name: str
    streams: int
    processes: int
    capped: bool


CASES = (
    Case("p1", "1 stream (iperf3 -P1)", 1, 1, False),
    Case("p4", "4 streams (iperf3 -P4)", 4, 1, False),
    Case("p4x4", "4 streams (4 iperf3 processes)", 4, 4, False),
    Case("tbf", "1 stream, tbf 1 Gbit/s", 1, 1, True),
)


def iperf3(a: str, b: str, streams: int, seconds: int, processes: int = 1) -> Run:
    """`iperf3 -P streams`, or `processes` iperf3 clients of one stream each side by side."""
    ports = [5299 + i for i in range(processes)]
    servers = [
        subprocess.Popen(
            ["ip", "netns", "exec", b, "iperf3", "-s", "-1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        time.sleep(0.3)  # the servers start listening
        clients = [
            subprocess.Popen(
                [
                    *("ip", "netns", "exec", a, "iperf3", "-c", SERVER_IP, "-p", str(port)),
                    *("-t", str(seconds), "-P", str(streams), "-O", "1", "-J"),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for port in ports
        ]
        runs = []
        for client in clients:
            out, _ = client.communicate()
            result = json.loads(out)
            if "error" in result:
                raise RuntimeError("iperf3 did not run: " + str(result["error"]))
            rate = float(result["end"]["sum_received"]["bits_per_second"]) / 8
            cpu = result["end"]["cpu_utilization_percent"]
            # Percent of one core over the test, at each end: cores busy per Gbit/s.
            cores = (cpu["host_total"] + cpu["remote_total"]) / 100
            runs.append(Run(rate, cores / (rate * 8 / 1e9)))
        total = sum(r.bytes_per_second for r in runs)
        cores_used = sum(r.cpu_seconds_per_gbit * r.bytes_per_second * 8 / 1e9 for r in runs)
        return Run(total, cores_used / (total * 8 / 1e9))
    finally:
        for server in servers:
            server.kill()
            server.wait()


PEER = f"""
import sys, json
from gpuprobe.measure.tcp import TcpSink, send
if sys.argv[1] == "sink":
    sink = TcpSink("{SERVER_IP}", "{CLIENT_IP}", int(sys.argv[2]), 10**13, 120)
    print(json.dumps({{"port": sink.port, "token": sink.token_hex}}), flush=True)
    sink.wait(120)
else:
    port, token = int(sys.argv[2]), bytes.fromhex(sys.argv[3])
    streams, seconds = int(sys.argv[4]), float(sys.argv[5])
    result = send("{SERVER_IP}", port, token, streams=streams, duration=seconds, warmup=1.0)
    print(json.dumps(result.to_dict()))
"""


def gpuprobe(a: str, b: str, streams: int, seconds: int, agent: str | None = None) -> Run:
    """gpuprobe's test with a 1 s warm-up, from this install or from `agent` (a source tree's
    agent/ directory)."""
    env = dict(os.environ)
    if agent is not None:
        env["PYTHONPATH"] = agent
    sink = subprocess.Popen(
        ["ip", "netns", "exec", b, sys.executable, "-c", PEER, "sink", str(streams)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert sink.stdout is not None
        opened = json.loads(sink.stdout.readline())
        out = subprocess.run(
            [
                *("ip", "netns", "exec", a, sys.executable, "-c", PEER, "send"),
                *(str(opened["port"]), opened["token"], str(streams), str(seconds)),
            ],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        result = json.loads(out.stdout)
        return Run(result["bytes_per_second"], result["cpu_seconds_per_gbit"])
    finally:
        sink.kill()
        sink.wait()


def machine() -> str:
    """The machine the figures belong to, in one line."""
    model = "unknown CPU"
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/sys/net/ipv4/tcp_congestion_control", encoding="ascii") as f:
        congestion = f.read().strip()
    version = sh("iperf3", "--version").stdout.split("(")[0].strip()
    return (
        f"{model}, {os.cpu_count()} cores, Linux {platform.release()}, "
        f"TCP {congestion}, {version}, Python {platform.python_version()}"
    )


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def measure_case(
    a: str, b: str, case: Case, rounds: int, seconds: int, before: str | None
) -> dict[str, list[Run]]:
    """Each tool's runs of one case, in turns (who goes first alternates by round)."""
    per_process = case.streams // case.processes
    tools: dict[str, Callable[[], Run]] = {
        "iperf3": lambda: iperf3(a, b, per_process, seconds, case.processes),
        "gpuprobe": lambda: gpuprobe(a, b, case.streams, seconds),
    }
    if before is not None:
        tools["before"] = lambda: gpuprobe(a, b, case.streams, seconds, before)
    runs: dict[str, list[Run]] = {name: [] for name in tools}
    order = list(tools)
    for i in range(rounds):
        for name in order[i % len(order) :] + order[: i % len(order)]:
            runs[name].append(tools[name]())
        line = ", ".join(f"{n} {r[-1].bytes_per_second * 8 / 1e9:.2f}" for n, r in runs.items())
        print(f"  {case.key} round {i + 1}: {line} Gbit/s (load {load()})", file=sys.stderr)
    return runs


def row(name: str, ours: list[Run], theirs: list[Run]) -> str:
    """A table row: medians, ratio of medians, paired ratios, CPU per Gbit."""
    t = statistics.median(r.bytes_per_second for r in theirs)
    o = statistics.median(r.bytes_per_second for r in ours)
    ratios = sorted(
        x.bytes_per_second / y.bytes_per_second for x, y in zip(ours, theirs, strict=True)
    )
    q1, _median, q3 = statistics.quantiles(ratios, n=4)
    paired = statistics.median(ratios)
    met = "met" if paired >= TARGET else "NOT met"
    cpu_t = statistics.median(r.cpu_seconds_per_gbit for r in theirs)
    cpu_o = statistics.median(r.cpu_seconds_per_gbit for r in ours)
    return (
        f"| {name} | {t * 8 / 1e9:.2f} Gbit/s | {o * 8 / 1e9:.2f} Gbit/s | {o / t:.3f} "
        f"| **{paired:.3f}** ({q1:.3f}–{q3:.3f}), {met} | {cpu_t:.4f} / {cpu_o:.4f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument(
        "--cases",
        default=",".join(c.key for c in CASES),
        help="comma-separated: " + ", ".join(f"{c.key} ({c.name})" for c in CASES),
    )
    parser.add_argument("--before", help="an earlier tree's agent/ directory, run alongside")
    args = parser.parse_args()
    chosen = [c for c in CASES if c.key in args.cases.split(",")]
    if args.rounds < 2 or not chosen:
        parser.error("need --rounds 2 or more and at least one known case")
    print(f"machine: {machine()}")
    table = []
    with veth_pair() as (a, b):
        for case in chosen:
            if case.capped:
                sh(
                    *("ip", "netns", "exec", a, "tc", "qdisc", "add", "dev", "va", "root"),
                    *("tbf", "rate", "1gbit", "burst", "256kb", "latency", "50ms"),
                )
            started = load()
            runs = measure_case(a, b, case, args.rounds, args.seconds, args.before)
            print(f"{case.name}: load average {started} before, {load()} after")
            table.append(row(case.name, runs["gpuprobe"], runs["iperf3"]))
            if args.before is not None:
                table.append(row(f"{case.name}, before", runs["before"], runs["iperf3"]))
    print(f"{args.rounds} rounds of {args.seconds} s per tool and case, taking turns")
    print(
        "| case | iperf3 median | gpuprobe median | ratio of medians "
        f"| paired ratios: median (quartiles), target ≥ {TARGET} "
        "| CPU s per Gbit, iperf3 / gpuprobe |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(table))


if __name__ == "__main__":
    main()
