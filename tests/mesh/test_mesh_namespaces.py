"""`gpuprobe mesh` across agents on separate hosts: network namespaces joined by a bridge.

Four agents, each in its own namespace; the mesh runs from the bridge namespace. One node's
link is slowed with tbf: the mesh must flag exactly that node and keep the healthy links OK.
A peer killed in the middle of a mesh must be reported unreachable within the bound. Every
namespace, link and process is removed on every way out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import require_root, require_tool, snapshot
from fabric import Fabric

TOKEN = "mesh-namespaces-token"
NODES = 4

# Heavy: one xdist worker runs these one after another, so they never load the machine
# together (a latency bound would measure the other test).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("heavy")]


@pytest.fixture
def fabric(tmp_path: Path) -> Iterator[tuple[Fabric, str, list[subprocess.Popen[str]]]]:
    """Four agents on a bridged fabric; yields it, the token file and the agents."""
    require_root()
    require_tool("tc")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    with Fabric(NODES) as net:
        agents = [
            net.serve(i, f"node{i}", snapshot("kvm-epyc-nogpu"), str(token), 50051, "127.0.0.1:0")
            for i in range(1, NODES + 1)
        ]
        yield net, str(token), agents
    assert net.namespaces_left() == []


def mesh(net: Fabric, token: str, *flags: str, timeout: float = 240) -> tuple[int, dict]:  # type: ignore[type-arg]
    targets = ",".join(f"{net.address(i)}:50051" for i in range(1, NODES + 1))
    done = net.run(
        None,
        sys.executable,
        "-m",
        "gpuprobe",
        "mesh",
        "--targets",
        targets,
        "--json",
        "--token-file",
        token,
        *flags,
        timeout=timeout,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_slowed_node_is_flagged_and_healthy_links_stay_ok(
    fabric: tuple[Fabric, str, list[subprocess.Popen[str]]],
) -> None:
    net, token, _ = fabric
    net.slow(3, "150mbit")
    # The namespaces share two cores: healthy figures swing, so only a halving is LOW here.
    code, result = mesh(
        net, token, "--seconds", "1.5", "--warmup", "0.5", "--streams", "2", "--min-drop", "0.5"
    )
    links = {(link["source"], link["target"]): link for link in result["links"]}
    assert len(links) == NODES * (NODES - 1)
    slow = {pair for pair in links if "node3" in pair}
    assert {pair for pair, link in links.items() if link["verdict"] == "LOW"} == slow
    assert all(links[pair]["verdict"] == "OK" for pair in links if pair not in slow)
    assert all(links[pair]["bytes_per_second"] < 150e6 / 8 * 1.1 for pair in slow)
    assert [(f["code"], f["severity"], f["resource"]) for f in result["findings"]] == [
        ("LINK_BANDWIDTH_LOW", "WARNING", "peer:node3")
    ]
    assert result["status"] == "WARNING" and code == 1


def test_a_peer_killed_mid_mesh_is_unreachable_within_the_bound(
    fabric: tuple[Fabric, str, list[subprocess.Popen[str]]],
) -> None:
    net, token, agents = fabric
    threading.Timer(2.0, agents[3].kill).start()  # node4 dies during the first round
    started = time.monotonic()
    # Figures are not the point here (and the namespaces share this machine's two cores, so a
    # dying pair's round runs faster than its neighbours'): only a near-total drop is LOW.
    code, result = mesh(
        net, token, "--seconds", "2", "--warmup", "0.2", "--deadline", "3", "--min-drop", "0.9"
    )
    assert time.monotonic() - started < 120
    failed = {
        (link["source"], link["target"]) for link in result["links"] if link["verdict"] == "FAILED"
    }
    assert failed and all("node4" in pair for pair in failed), result
    assert all(
        link["verdict"] == "OK"
        for link in result["links"]
        if "node4" not in (link["source"], link["target"])
    )
    codes = [(f["code"], f["resource"]) for f in result["findings"]]
    assert ("PEER_UNREACHABLE", "peer:node4") in codes
    assert all(resource == "peer:node4" for _, resource in codes)
    assert result["status"] == "CRITICAL" and code == 2
