"""NCCL's own words in published logs (tests/fixtures/nccl/README.md and the issue threads
named below), and the machines the ranks ran on."""

from __future__ import annotations

import pytest

from conftest import ROOT
from gpuprobe.mesh.nccl import logs
from gpuprobe.mesh.nccl.logs import Said
from gpuprobe.mesh.nccl_rank import FAILED_MARK

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"


def test_a_failed_two_node_run_gives_each_machines_words_in_order() -> None:
    text = (FIXTURES / "nccl-tests-2node-failed-excerpt.txt").read_text()
    assert logs.failures(text) == [
        Said(
            "DisAI-4090-2",
            "Test NCCL failure common.cu:961 'internal error - please report this issue to the "
            "NCCL developers / '",
        ),
        Said(
            "DisAI-4090-3",
            "NCCL WARN socketProgress: Connection closed by remote peer 10.102.0.232<40318>",
        ),
    ]


def test_an_infiniband_completion_error_is_read_with_its_plugin_prefix() -> None:
    text = (FIXTURES / "nccl-ib-completion-error-excerpt.txt").read_text()
    assert logs.failures(text) == [
        Said(
            "kolyoz2",
            "NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> with error 4, opcode "
            "5327, len 5327, vendor err 81 (Send)",
        )
    ]


# Single lines of published logs: NVIDIA/nccl issue #928 (an IPv6 peer: colons in the text),
# NVIDIA/nccl issue #1405 (a Kubernetes pod's hostname), NVIDIA/nccl-tests issue #166 (the
# proxy's warning after the socket's).
@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion "
            "from peer fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, "
            "vendor err 81 (Send)",
            Said(
                "H100-2",
                "NCCL WARN NET/IB : Got completion from peer fe80::966d:ae03:8b:df78%ib0<53249> "
                "with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
            ),
        ),
        (
            "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion "
            "from peer 10.216.210.236<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) "
            "localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f",
            Said(
                "kp-ddp-worker-0",
                "NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> with "
                "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid "
                "fd00:1148:9000:5000:4:200:3:ff22 remoteGidsfd00:1148:9000:5000:4:200:3:ff1f",
            ),
        ),
        (
            "gpu004:2200689:2200706 [3] proxy.cc:1143 NCCL WARN Socket recv failed while "
            "polling for opId=0x7f4774cc9620",
            Said("gpu004", "NCCL WARN Socket recv failed while polling for opId=0x7f4774cc9620"),
        ),
    ],
)
def test_a_warning_line_is_read(line: str, said: Said) -> None:
    assert logs.failures(line + "\n") == [said]


def test_info_lines_and_the_table_say_nothing() -> None:
    text = (FIXTURES / "all_reduce_perf-2node-2x8xh100.txt").read_text()
    assert logs.failures(text) == []
    assert logs.failures("kolyoz1:27255:27934 [0] NCCL INFO proxy.cc:698 -> 6\n") == []


def test_the_rank_programs_own_failure_line_names_no_machine() -> None:
    line = f"{FAILED_MARK} RuntimeError: this pod sees no GPU (torch.cuda.device_count() is 0)"
    assert logs.failures(line) == [
        Said(
            "",
            "gpuprobe-nccl-rank FAILED: RuntimeError: this pod sees no GPU "
            "(torch.cuda.device_count() is 0)",
        )
    ]


def test_each_machine_keeps_its_first_words_nccls_before_nccl_tests() -> None:
    said = [
        Said("a", "Test NCCL failure common.cu:961 'internal error'"),
        Said("a", "NCCL WARN Net : Connection closed by remote peer"),
        Said("b", "NCCL WARN first"),
        Said("b", "NCCL WARN second"),
        Said("c", "NCCL WARN " + "x" * 400),
        Said("d", "NCCL WARN fourth machine"),
    ]
    kept = logs.first_per_host(said)
    assert [s.host for s in kept] == ["a", "b", "c"]  # at most three machines
    assert kept[0].words == "NCCL WARN Net : Connection closed by remote peer"
    assert kept[1].words == "NCCL WARN first"
    assert len(kept[2].words) == logs.MOST_CHARACTERS and kept[2].words.endswith("…")


def test_the_ranks_machines_are_read_from_the_table_header() -> None:
    text = (FIXTURES / "all_reduce_perf-2node-2x8xh100.txt").read_text()
    hosts = logs.rank_hosts(text)
    assert sorted(hosts) == list(range(16))
    assert {hosts[r] for r in range(8)} == {"ztan-mig-235z"}
    assert {hosts[r] for r in range(8, 16)} == {"ztan-mig-gq73"}
    # Releases before `Group` (NVIDIA/nccl-tests issue #107).
    old = "#   Rank  0 Pid   1320 on ip-172-31-20-228 device  0 [0x00] Tesla V100-SXM2-16GB"
    assert logs.rank_hosts(old) == {0: "ip-172-31-20-228"}


def test_last_words_are_the_last_lines_that_say_something() -> None:
    text = (FIXTURES / "openmpi-process-exited.txt").read_text()
    assert logs.last_words(text) == (
        "the job to be terminated. The first process to do so was: / Process name: "
        "[[12167,1],10] / Exit code:    3"
    )


def test_without_nccls_words_the_first_line_telling_of_an_error_is_kept() -> None:
    text = (FIXTURES / "mpijob-launcher-ssh-unresolved-excerpt.txt").read_text()
    assert logs.failures(text) == []
    assert logs.telling_words(text) == (
        "ssh: Could not resolve hostname nccl-tests-worker-0.nccl-tests.default.svc: Name or "
        "service not known"
    )
    # NCCL's INFO lines tell nothing; nor does a log without an error line (its last lines).
    info = "kolyoz2:25146:25854 [0] NCCL INFO proxy.cc:878 -> 6 [Progress Thread]\ndone\n"
    assert logs.telling_words(info) == (
        "kolyoz2:25146:25854 [0] NCCL INFO proxy.cc:878 -> 6 [Progress Thread] / done"
    )
