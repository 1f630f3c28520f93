"""`audit --deadline N` bounds the whole audit against an API server that never answers, drips
its answers, or answers a page of a million items; and the view says one line per cause.

Each case runs the real command (`python -m gpuprobe audit --kubeconfig`) under a small
wrapper that reports its wall time and peak RSS (the children's `ru_maxrss`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from kube_standin import AUDITOR, KubeStandIn, auditor_rules, running

TOKEN = "auditor-token"
# Runs the command, then prints its wall time (s) and peak RSS (MiB) on the last line.
MEASURED = """
import os, resource, subprocess, sys, time
start = time.monotonic()
done = subprocess.run([sys.executable, "-m", "gpuprobe", *sys.argv[1:]], capture_output=True,
                      text=True, env={**os.environ, "NO_COLOR": "1"})
took = time.monotonic() - start
sys.stdout.write(done.stdout)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(f"\\n{done.returncode} {took:.2f} {rss:.0f}")
"""


def measured(*args: str) -> tuple[int, float, float, str]:
    """(exit status, seconds, peak RSS in MiB, stdout) of `gpuprobe ARGS`."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *args], capture_output=True, text=True, timeout=120
    )
    out, _, last = done.stdout.rstrip("\n").rpartition("\n")
    code, took, rss = last.split()
    return int(code), float(took), float(rss), out


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        stand_in.add_user(TOKEN, AUDITOR, auditor_rules())
        yield stand_in


@contextmanager
def silent_server(tmp_path: Path) -> Iterator[Path]:
    """A kubeconfig for a server that accepts connections and never answers (nor reads): a
    hung API server, or a load balancer in front of a dead one."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    path = tmp_path / "kubeconfig-silent"
    cluster = {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "silent", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": TOKEN}}],
                "contexts": [{"name": "c", "context": {"cluster": "silent", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    try:
        yield path
    finally:
        stop.set()
        listener.close()
        for connection in held:
            connection.close()


def test_an_api_that_never_answers_costs_the_deadline_and_one_line_per_cause(
    tmp_path: Path,
) -> None:
    """Issue 40: `--deadline 3` took 13.6 s (a second list of the nodes' signals, with its
    own timeout, after the view's had timed out); the view said "not read" some 30 times."""
    with silent_server(tmp_path) as kubeconfig:
        code, took, _, out = measured("audit", "--kubeconfig", str(kubeconfig), "--deadline", "3")
    assert code == 3
    assert took < 6.0, took  # the deadline, the interpreter's start, the view's grace
    lines = out.splitlines()
    assert lines[0].startswith(
        "cluster UNKNOWN  0 targets: the agents' pods could not be read from the API server "
        "(timeout: "
    )
    causes = [line for line in lines if line.startswith("  not read (")]
    assert 1 <= len(causes) <= 2, causes
    # The items not read for one source are one line; why, once per cause, below.
    assert sum("not read" in line for line in lines) <= 4 + len(causes)
    at = lines.index(
        "  control_plane, agents, gpu_resources, device_stack, gpu_quarantine, sharing, "
        "interconnect, spot, autoscaling"
    )
    assert lines[at + 1] == "                    UNKNOWN   not read: nodes (below)"


def test_a_dripping_api_costs_the_deadline(standin: KubeStandIn) -> None:
    """Issue 41: an API server that sends each answer a byte at a time held `--deadline 1`
    for 11.45 s and `--deadline 5` for 15.5 s."""
    standin.add_node("gpu-node-18", {"nvidia.com/gpu.present": "true"})
    standin.faults.drip = 0.05
    kubeconfig = str(standin.kubeconfig(TOKEN))
    for deadline, most in ((1, 4.5), (3, 6.5)):
        code, took, _, out = measured(
            "audit", "--kubeconfig", kubeconfig, "--deadline", str(deadline), "--json"
        )
        assert code == 3
        assert took < most, (deadline, took)
        assert json.loads(out)["cluster"]["status"] == "UNKNOWN"


def test_a_page_of_a_million_items_is_refused_in_bounded_memory_and_time(
    standin: KubeStandIn,
) -> None:
    """Issue 41: 1,000,000 empty items in one 3 MB page (asked with `limit=500`) cost 809 MB
    RSS and 9.1 s with `--deadline 5`. A page with more items than asked is refused: the
    nodes source fails with why, and the items that read it are UNKNOWN."""
    page = b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":['
    page += b"{}," * 999_999 + b"{}]}"
    standin.faults.served = {"/api/v1/nodes": page}
    kubeconfig = str(standin.kubeconfig(TOKEN))
    code, took, rss, out = measured(
        "audit", "--kubeconfig", kubeconfig, "--deadline", "5", "--json"
    )
    assert took < 7.0, took
    assert rss < 300, rss
    cluster = json.loads(out)["cluster"]
    nodes = next(s for s in cluster["sources"] if s["source"] == "nodes")
    assert nodes["state"] == "failed"
    assert nodes["detail"] == (
        "invalid: nodes: the list's page holds 1000000 items where at most 500 were asked: not read"
    )
    items = {i["item"]: i for i in cluster["checklist"]}
    assert items["gpu_resources"]["status"] == "UNKNOWN"
    assert items["gpu_resources"]["summary"] == f"not read: nodes: {nodes['detail']}"
    assert code == 1  # the view's own WARNINGs stand: no gang scheduler, no shared storage


def test_a_list_that_never_ends_is_bounded(standin: KubeStandIn) -> None:
    """Issue 41: a server that ignores `limit` or hands out a `continue` token forever (the
    same full page each time) would have the reader hold an unbounded list until the
    deadline; a list stops at `most` objects, all pages together."""
    from gpuprobe.audit.view import kinds
    from gpuprobe.kube.api import Access, KubeError
    from gpuprobe.kube.reader import MOST_ITEMS, ClusterReader

    items = [{"metadata": {"name": f"n{i}"}} for i in range(500)]
    page = {"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "again"}}
    standin.faults.served = {"/api/v1/nodes": json.dumps({**page, "items": items}).encode()}
    reader = ClusterReader(Access(kubeconfig=str(standin.kubeconfig(TOKEN))), time.monotonic() + 20)
    seen = 0
    try:
        with pytest.raises(KubeError) as raised:
            for _ in reader.each(kinds.NODES, most=2000):
                seen += 1
    finally:
        reader.close()
    assert seen == 2000 and reader.requests == 5
    assert (raised.value.code, raised.value.message) == (
        "too_large",
        "nodes: more than 2000 objects: not read past",
    )
    assert MOST_ITEMS == 100_000
