"""Clearing sticky XIDs of a GPU index the node does not have is refused (`clear-xid --gpu N`
one line, exit 64; ClearFindings INVALID_ARGUMENT), rather than "cleared 0" read as done."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from conftest import gpuprobe, snapshot
from gpuprobe.checks.context import CheckContext
from gpuprobe.client import Client
from gpuprobe.config import Config
from gpuprobe.daemon.core import sticky_clearer
from gpuprobe.host import snapshot_host
from serving import in_process_agent, serve_process, wait_for

TOKEN = "s3cret-token"
GPUS = "0, 1, 2, 3, 4, 5, 6, 7"


def test_clear_xid_refuses_a_gpu_the_node_does_not_have(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(Path(snapshot("synthetic-xid-critical")) / "rootfs", root)
    state = tmp_path / "state"
    state.mkdir()
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text(f"xid:\n  state_dir: {state}\n")
    for gpu in ("8", "99"):
        out = gpuprobe("clear-xid", "--gpu", gpu, "--root", str(root), "--config", str(cfg))
        assert (out.returncode, out.stdout, out.stderr) == (
            64,
            "",
            f"gpuprobe: clear-xid: no GPU {gpu} on this node (its GPUs are {GPUS}) "
            "(see gpuprobe clear-xid --help)\n",
        )
    assert list(state.iterdir()) == []  # nothing written
    out = gpuprobe("clear-xid", "--gpu", "6", "--root", str(root), "--config", str(cfg))
    assert (out.returncode, out.stdout) == (0, "gpuprobe: cleared 2 sticky findings on GPU 6\n")


def test_clear_xid_on_a_node_without_gpus_names_none(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text(f"xid:\n  state_dir: {tmp_path}\n")
    root = Path(snapshot("kvm-epyc-nogpu")) / "rootfs"
    out = gpuprobe("clear-xid", "--gpu", "3", "--root", str(root), "--config", str(cfg))
    assert (out.returncode, out.stderr) == (
        64,
        "gpuprobe: clear-xid: no GPU 3 on this node (it has no NVIDIA GPU) "
        "(see gpuprobe clear-xid --help)\n",
    )


def test_clear_findings_refuses_a_gpu_the_node_does_not_have(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    clearer = sticky_clearer(
        CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), Config()
    )
    with (
        in_process_agent(
            "synthetic-xid-critical",
            names=["xid"],
            clear_xid=clearer,
            token_file=str(token_file),
        ) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        with pytest.raises(grpc.RpcError) as err:
            client.clear_findings(gpu=99)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == f"no GPU 99 on this node (its GPUs are {GPUS})"
        cleared, _ = client.clear_findings(gpu=6)
        assert cleared == 2


def first_report(client: Client) -> bool:
    """Whether the agent has its first report (UNAVAILABLE until its first round ends)."""
    try:
        return client.get_report().check("xid") is not None
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        return False


def test_the_daemons_clearing_reaches_its_running_check_without_a_state_dir(
    tmp_path: Path,
) -> None:
    """`gpuprobe serve` on a replay with no state directory keeps a clearing only in memory:
    the ClearFindings RPC and the check's rounds share the runner's states, so the re-run
    (and every later round) no longer reports GPU 6's sticky XIDs, and no file is written."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = ("--snapshot", snapshot("synthetic-xid-critical"), "--token-file", str(token_file))
    with (
        serve_process(*args) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        wait_for(lambda: first_report(client))
        before = [f.resource for c, f in client.get_report().findings() if c == "xid"]
        assert before.count("gpu:6:GPU-5f1c0006-8e2b-4c1d-9a7e-000000000006") == 2
        cleared, report = client.clear_findings(gpu=6)
        assert cleared == 2
        after = [f.resource for c, f in report.findings() if c == "xid"]
        assert after == [r for r in before if not r.startswith("gpu:6:")]
        client.run_checks(["xid"])  # a later round still holds the clearing
        again = [f.resource for c, f in client.get_report().findings() if c == "xid"]
        assert again == after
