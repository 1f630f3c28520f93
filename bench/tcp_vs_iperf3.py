"""gpuprobe's TCP bandwidth test against iperf3 on the same veth link, in one run.

Two network namespaces joined by a veth pair; for each case the two tools take turns
(iperf3, gpuprobe, iperf3, gpuprobe, ...) so that both see the same machine noise, and the
medians and their ratio are printed as a Markdown table. Cases: one stream, four streams, and
one stream over a link capped at 1 Gbit/s with `tc qdisc ... tbf`.

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


def iperf3(a: str, b: str, streams: int, seconds: int) -> float:
    server = subprocess.Popen(
        ["ip", "netns", "exec", b, "iperf3", "-s", "-1", "-p", "5299"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(50):
            probe = sh(
                "ip",
                "netns",
                "exec",
                a,
                "iperf3",
                "-c",
                SERVER_IP,
                "-p",
                "5299",
                "-t",
                str(seconds),
                "-P",
                str(streams),
                "-O",
                "1",
                "-J",
                check=False,
            )
            result = json.loads(probe.stdout)
            if "error" not in result:
                return float(result["end"]["sum_received"]["bits_per_second"]) / 8
            time.sleep(0.1)  # the server is not listening yet
        raise RuntimeError("iperf3 did not run: " + str(result.get("error")))
    finally:
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
    print(result.bytes_per_second)
"""


def gpuprobe(a: str, b: str, streams: int, seconds: int) -> float:
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
        return float(out.stdout.strip())
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
        for name, streams, capped in (
            ("1 stream", 1, False),
            ("4 streams", 4, False),
            ("1 stream, tbf 1 Gbit/s", 1, True),
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
            ours, theirs = [], []
            for i in range(args.rounds):
                # Alternate who goes first, so neither always meets a warmer machine.
                if i % 2:
                    ours.append(gpuprobe(a, b, streams, args.seconds))
                    theirs.append(iperf3(a, b, streams, args.seconds))
                else:
                    theirs.append(iperf3(a, b, streams, args.seconds))
                    ours.append(gpuprobe(a, b, streams, args.seconds))
            ratios = sorted(o / t for o, t in zip(ours, theirs, strict=True))
            rows.append((name, statistics.median(theirs), statistics.median(ours), ratios))
    print(f"{args.rounds} rounds of {args.seconds} s per tool and case, taking turns")
    print("| case | iperf3 median | gpuprobe median | ratio of medians | paired ratios |")
    print("| --- | --- | --- | --- | --- |")
    for name, theirs, ours, ratios in rows:
        gbit = f"{theirs * 8 / 1e9:.2f} Gbit/s | {ours * 8 / 1e9:.2f} Gbit/s"
        q1, _median, q3 = statistics.quantiles(ratios, n=4)
        paired = f"median {statistics.median(ratios):.3f}, quartiles {q1:.3f}–{q3:.3f}"
        print(f"| {name} | {gbit} | {ours / theirs:.3f} | {paired} |")


if __name__ == "__main__":
    main()
