"""gpuprobe's TCP bandwidth test against iperf3 on the same veth link, in one run.

Two network namespaces joined by a veth pair; for each case the two tools take turns
(iperf3, gpuprobe, iperf3, gpuprobe, ...) so that both see the same machine noise, and the
medians and their ratio are printed as a Markdown table, with each tool's CPU seconds (both
ends together) per Gbit moved. Cases: one stream (`iperf3 -P1`), four streams (`iperf3 -P4`),
four streams against four iperf3 processes side by side (the machine's ceiling for four
flows: iperf3 before 3.16 drives all its streams from one thread), and one stream over a link
capped at 1 Gbit/s with `tc qdisc ... tbf`.

Run as root from the repository root:  .venv/bin/python bench/tcp_vs_iperf3.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

SERVER_IP, CLIENT_IP = "10.99.0.2", "10.99.0.1"


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


def gpuprobe(a: str, b: str, streams: int, seconds: int) -> Run:
    sink = subprocess.Popen(
        ["ip", "netns", "exec", b, sys.executable, "-c", PEER, "sink", str(streams)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None
        opened = json.loads(sink.stdout.readline())
        out = sh(
            "ip",
            "netns",
            "exec",
            a,
            sys.executable,
            "-c",
            PEER,
            "send",
            str(opened["port"]),
            opened["token"],
            str(streams),
            str(seconds),
        )
        result = json.loads(out.stdout)
        return Run(result["bytes_per_second"], result["cpu_seconds_per_gbit"])
    finally:
        sink.kill()
        sink.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with veth_pair() as (a, b):
        for name, streams, processes, capped in (
            ("1 stream (iperf3 -P1)", 1, 1, False),
            ("4 streams (iperf3 -P4)", 4, 1, False),
            ("4 streams (4 iperf3 processes)", 4, 4, False),
            ("1 stream, tbf 1 Gbit/s", 1, 1, True),
        ):
            if capped:
                sh(
                    "ip",
                    "netns",
                    "exec",
                    a,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    "va",
                    "root",
                    "tbf",
                    "rate",
                    "1gbit",
                    "burst",
                    "256kb",
                    "latency",
                    "50ms",
                )
            ours: list[Run] = []
            theirs: list[Run] = []
            # iperf3 -P4 is one client; four processes of one stream each are the ceiling.
            theirs_streams = streams if processes == 1 else 1
            for i in range(args.rounds):
                # Alternate who goes first, so neither always meets a warmer machine.
                if i % 2:
                    ours.append(gpuprobe(a, b, streams, args.seconds))
                    theirs.append(iperf3(a, b, theirs_streams, args.seconds, processes))
                else:
                    theirs.append(iperf3(a, b, theirs_streams, args.seconds, processes))
                    ours.append(gpuprobe(a, b, streams, args.seconds))
            rows.append((name, theirs, ours))
    print(f"{args.rounds} rounds of {args.seconds} s per tool and case, taking turns")
    print(
        "| case | iperf3 median | gpuprobe median | ratio of medians | paired ratios "
        "| CPU s per Gbit, iperf3 / gpuprobe |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, theirs, ours in rows:
        t = statistics.median(r.bytes_per_second for r in theirs)
        o = statistics.median(r.bytes_per_second for r in ours)
        ratios = sorted(
            x.bytes_per_second / y.bytes_per_second for x, y in zip(ours, theirs, strict=True)
        )
        q1, _median, q3 = statistics.quantiles(ratios, n=4)
        paired = f"median {statistics.median(ratios):.3f}, quartiles {q1:.3f}–{q3:.3f}"
        cpu_t = statistics.median(r.cpu_seconds_per_gbit for r in theirs)
        cpu_o = statistics.median(r.cpu_seconds_per_gbit for r in ours)
        gbit = f"{t * 8 / 1e9:.2f} Gbit/s | {o * 8 / 1e9:.2f} Gbit/s"
        print(f"| {name} | {gbit} | {o / t:.3f} | {paired} | {cpu_t:.4f} / {cpu_o:.4f} |")


if __name__ == "__main__":
    main()
