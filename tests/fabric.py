"""Test hosts on one machine: network namespaces joined by veth through a bridge namespace.

    with Fabric(4) as fabric:          # nodes 10.77.<k>.1 .. .4, the bridge namespace .254
        fabric.slow(3, "200mbit")      # tbf both ways on node 3's link
        fabric.run(2, "gpuprobe", ...) # a process inside node 2's namespace
        fabric.forward(2, 9760)        # a loopback port here that reaches node 2's :9760

Built with pyroute2; every namespace, link and process it started is removed on every way
out, the test's failure included. Traffic stays inside these namespaces, but for what a forward
carries between one of them and the loopback of the namespace the test runs in.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from pyroute2 import IPRoute, NetNS, netns

FORWARD = Path(__file__).with_name("portforward.py")


class Fabric:
    """N node namespaces and a bridge namespace, on a private /24."""

    def __init__(self, nodes: int, subnet: int = 77) -> None:
        tag = uuid.uuid4().hex[:6]
        self.tag = tag
        self.bridge_ns = f"gp-br-{tag}"
        self.node_ns = [f"gp-n{i}-{tag}" for i in range(1, nodes + 1)]
        self.prefix = f"10.{subnet}.{int(tag[:2], 16)}"
        self.processes: list[subprocess.Popen[str]] = []

    def namespaces_left(self) -> list[str]:
        """This fabric's namespaces that still exist (none once it is closed). Other tests
        running beside it make their own, so only its tag counts."""
        return [name for name in namespaces() if name.endswith(f"-{self.tag}")]

    def address(self, node: int) -> str:
        """Node `node`'s (1-based) address on the fabric."""
        return f"{self.prefix}.{node}"

    @property
    def bridge_address(self) -> str:
        """The bridge namespace's own address (where a mesh or audit client runs)."""
        return f"{self.prefix}.254"

    def __enter__(self) -> Fabric:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self) -> None:
        for name in (self.bridge_ns, *self.node_ns):
            netns.create(name)
        with NetNS(self.bridge_ns) as br:
            br.link("add", ifname="gpbr0", kind="bridge")
            bridge = br.link_lookup(ifname="gpbr0")[0]
            br.addr("add", index=bridge, address=self.bridge_address, prefixlen=24)
            br.link("set", index=bridge, state="up")
            br.link("set", index=br.link_lookup(ifname="lo")[0], state="up")
        with IPRoute() as root:
            for i, ns in enumerate(self.node_ns, start=1):
                outside, inside = f"gpv{i}{self.tag[:4]}", f"gpn{i}{self.tag[:4]}"
                root.link("add", ifname=outside, kind="veth", peer=inside)
                root.link("set", index=root.link_lookup(ifname=inside)[0], net_ns_fd=ns)
                root.link(
                    "set", index=root.link_lookup(ifname=outside)[0], net_ns_fd=self.bridge_ns
                )
                with NetNS(ns) as node:
                    index = node.link_lookup(ifname=inside)[0]
                    node.link("set", index=index, ifname="eth0")
                    node.addr("add", index=index, address=self.address(i), prefixlen=24)
                    node.link("set", index=index, state="up")
                    node.link("set", index=node.link_lookup(ifname="lo")[0], state="up")
                with NetNS(self.bridge_ns) as br:
                    port = br.link_lookup(ifname=outside)[0]
                    br.link("set", index=port, master=br.link_lookup(ifname="gpbr0")[0])
                    br.link("set", index=port, state="up")

    def slow(self, node: int, rate: str) -> None:
        """Cap node `node`'s link at `rate` both ways (tbf on each end's egress)."""
        outside = f"gpv{node}{self.tag[:4]}"
        for ns, dev in ((self.node_ns[node - 1], "eth0"), (self.bridge_ns, outside)):
            subprocess.run(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns,
                    "tc",
                    "qdisc",
                    "add",
                    "dev",
                    dev,
                    "root",
                    "tbf",
                    "rate",
                    rate,
                    "burst",
                    "256kb",
                    "latency",
                    "100ms",
                ],
                check=True,
            )

    def cap_flows(self, node: int, rate: str, first_port: int = 40000, ports: int = 8) -> None:
        """Cap each TCP connection that node `node` opens at `rate`: its connections take
        source ports from `ports` ports at `first_port` only, and an HTB class of its own
        holds each port to `rate` (other traffic is not held). N parallel streams then move N
        times one stream's figure, if they add up; the link, not the CPU, is their limit."""
        ns = self.node_ns[node - 1]

        def tc(*args: str) -> None:
            subprocess.run(["ip", "netns", "exec", ns, "tc", *args], check=True)

        last = first_port + ports - 1
        subprocess.run(
            [
                *("ip", "netns", "exec", ns, "sysctl", "-q", "-w"),
                f"net.ipv4.ip_local_port_range={first_port} {last}",
            ],
            check=True,
        )
        tc("qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "9999")
        for i in range(ports):
            classid = f"1:{10 + i}"
            tc(
                "class",
                "add",
                "dev",
                "eth0",
                "parent",
                "1:",
                "classid",
                classid,
                "htb",
                "rate",
                rate,
            )
            tc(
                *("filter", "add", "dev", "eth0", "parent", "1:", "protocol", "ip", "u32"),
                *("match", "ip", "sport", str(first_port + i), "0xffff", "flowid", classid),
            )

    def popen(self, node: int | None, *args: str, **kwargs: object) -> subprocess.Popen[str]:
        """Start a process in node `node`'s namespace (None: the bridge namespace)."""
        ns = self.bridge_ns if node is None else self.node_ns[node - 1]
        env = {**os.environ, **kwargs.pop("env", {})}  # type: ignore[dict-item]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *args],
            text=True,
            env=env,
            **kwargs,  # type: ignore[call-overload]
        )
        self.processes.append(proc)
        return proc  # type: ignore[no-any-return]

    def serve(
        self, node: int, name: str, snapshot: str, token: str, grpc_port: int, metrics: str
    ) -> subprocess.Popen[str]:
        """`gpuprobe serve` of `snapshot` as node `name` in node `node`'s namespace, gRPC on
        its fabric address, /metrics on `metrics`; returns once it listens."""
        agent = self.popen(
            node,
            sys.executable,
            "-m",
            "gpuprobe",
            "serve",
            "--snapshot",
            snapshot,
            "--node-name",
            name,
            "--grpc-listen",
            f"{self.address(node)}:{grpc_port}",
            "--metrics-listen",
            metrics,
            "--token-file",
            token,
            "--interval",
            "3600",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        assert agent.stderr is not None
        timer = threading.Timer(60, agent.kill)
        timer.start()
        logs: list[dict[str, Any]] = []
        for line in agent.stderr:
            logs.append(json.loads(line))
            if logs[-1]["msg"] == "listening":
                break
        timer.cancel()
        assert logs and logs[-1]["msg"] == "listening", f"serve did not start: {logs}"
        threading.Thread(target=agent.stderr.read, daemon=True).start()
        return agent

    def forward(self, node: int, port: int) -> int:
        """A port on this namespace's loopback whose connections reach node `node`'s
        address:port, for clients outside the fabric (Prometheus, a test's gRPC client). The
        forward is a process in the node's namespace, stopped with the fabric."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(64)
            fd = listener.fileno()
            args = (str(FORWARD), str(fd), self.address(node), str(port))
            self.popen(node, sys.executable, *args, pass_fds=(fd,))
            return int(listener.getsockname()[1])  # the forward holds it open from here

    def run(
        self, node: int | None, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a process in a namespace to its end (None: the bridge namespace)."""
        ns = self.bridge_ns if node is None else self.node_ns[node - 1]
        return subprocess.run(
            ["ip", "netns", "exec", ns, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
        )

    def veth_names(self) -> list[str]:
        """Both ends of every node's veth pair, as created in the root namespace."""
        return [
            f"{end}{i}{self.tag[:4]}"
            for i in range(1, len(self.node_ns) + 1)
            for end in ("gpv", "gpn")
        ]

    def close(self) -> None:
        """Stop every process and remove every namespace (their links go with them), and any
        veth end still in the root namespace (a build that failed before moving it)."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        with IPRoute() as root:
            for name in self.veth_names():
                for index in root.link_lookup(ifname=name):
                    with contextlib.suppress(Exception):  # its peer's removal took it already
                        root.link("del", index=index)
        for name in (*self.node_ns, self.bridge_ns):
            with contextlib.suppress(OSError):
                netns.remove(name)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def namespaces() -> list[str]:
    """The network namespaces that exist now (to prove a test left none behind)."""
    return sorted(netns.listnetns())
