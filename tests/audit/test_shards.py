"""The fan-out split over processes: the same answers in the same order as one process, one
deadline for all of them, and a helper that fails costs time, never targets."""

from __future__ import annotations

import os
import pickle
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuprobe.audit import shards
from gpuprobe.audit.cluster import AuditedNode, audited
from gpuprobe.audit.fanout import Asking
from gpuprobe.audit.keys import data_keys
from gpuprobe.audit.run import AuditOptions, audit
from gpuprobe.audit.shards import PER_PROCESS, fetch_sharded, processes_for, split
from gpuprobe.client import Credentials
from gpuprobe.targets import parse_targets
from gpuprobe.unreachable import Failure
from gpuprobe.v1 import diagnostics_pb2 as pb
from grpc_standins import hangs, report_of, standin, wants_token

TOKEN = "s3cret-shard-token"


def asking(deadline: float, credentials: Credentials | None = None) -> Asking:
    return Asking(
        credentials or Credentials(token=TOKEN),
        deadline,
        time.monotonic() + deadline,
        8,
        data_keys(),
        pb.REPORT_VIEW_SUMMARY,
    )


def test_shares_are_contiguous_and_differ_by_at_most_one() -> None:
    targets = [f"t{i}" for i in range(10)]
    assert split(targets, 3) == [targets[0:4], targets[4:7], targets[7:10]]
    assert split(targets, 1) == [targets]
    assert split(targets[:2], 5) == [["t0"], ["t1"]]
    assert split([], 2) == [[]]


def test_one_process_per_share_of_targets_up_to_the_cores() -> None:
    assert processes_for(PER_PROCESS - 1, cores=16) == 1
    assert processes_for(10_000, cores=2) == 2
    assert processes_for(10_000, cores=16) == 5
    assert processes_for(1_000_000, cores=64) == shards.MAX_PROCESSES
    assert processes_for(10_000, cores=1) == 1


def nodes_of(got: list[AuditedNode]) -> list[tuple[str, str | None, str | None]]:
    return [(n.target, n.node, n.unreachable.failure.value if n.unreachable else None) for n in got]


def helper_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "audit helper" in r.getMessage()]


def test_three_processes_answer_as_one_does_in_the_order_of_the_targets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The token travels to the helpers (the agents refuse calls without it), and each
    helper hands back the digests of its share (no helper failed and was stood in for)."""
    answer = report_of("synthetic-h100-8gpu-healthy", node="sharded")
    with standin(wants_token(TOKEN, answer), ports=7) as server:
        targets = server.targets
        alone = fetch_sharded(targets, asking(10), audited, 1)
        split_up = fetch_sharded(targets, asking(10), audited, 3)
        refused = fetch_sharded(targets, asking(10, Credentials()), audited, 3)
    assert split_up == alone
    assert nodes_of(split_up) == [(t, "sharded", None) for t in targets]
    assert {n.unreachable.failure for n in refused if n.unreachable} == {Failure.UNAUTHORISED}
    assert len(refused) == 7
    assert helper_warnings(caplog) == []


def test_a_hung_agent_in_a_helpers_share_costs_the_one_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    answer = report_of("synthetic-h100-8gpu-healthy", node="fine")
    with standin(lambda context: answer, ports=3) as fine, standin(hangs(release)) as hung:
        try:
            targets = [*fine.targets, hung.targets[0]]  # the hung one is in the 2nd share
            started = time.monotonic()
            got = fetch_sharded(targets, asking(1.5), audited, 2)
            elapsed = time.monotonic() - started
        finally:
            release.set()
    assert nodes_of(got) == [(t, "fine", None) for t in fine.targets] + [
        (hung.targets[0], None, "timeout")
    ]
    # the helper's own start-up did not make its call "asked late"
    assert got[-1].unreachable is not None
    assert got[-1].unreachable.reason == (
        "no answer within 1.5 s (the agent is down, hung or filtered)"
    )
    assert 1.5 <= elapsed < 1.5 + 1.5
    assert helper_warnings(caplog) == []


def test_a_failed_helpers_share_is_asked_beside_this_ones_not_after_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """This process's share holds an agent that hangs until the deadline; the helper
    cannot start. Its share is asked at once, not when the deadline has passed."""
    monkeypatch.setattr(shards.sys, "executable", "/nonexistent/python3")
    release = threading.Event()
    answer = report_of("synthetic-h100-8gpu-healthy", node="fine")
    with standin(hangs(release)) as hung, standin(lambda context: answer, ports=3) as fine:
        try:
            targets = [hung.targets[0], fine.targets[0], *fine.targets[1:]]
            got = fetch_sharded(targets, asking(1.5), audited, 2)
        finally:
            release.set()
    assert nodes_of(got) == [(hung.targets[0], None, "timeout")] + [
        (t, "fine", None) for t in fine.targets
    ]
    assert helper_warnings(caplog) == [
        "audit helper failed (not started: FileNotFoundError: [Errno 2] No such file or "
        "directory: '/nonexistent/python3'); asking its 2 targets here"
    ]


@pytest.mark.parametrize(
    "executable",
    ["/bin/false", "/nonexistent/python3"],
    ids=["helper-exits-non-zero", "helper-cannot-start"],
)
def test_a_helper_that_fails_has_its_share_asked_here(
    executable: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(shards.sys, "executable", executable)
    answer = report_of("synthetic-h100-8gpu-healthy", node="redone")
    with standin(wants_token(TOKEN, answer), ports=4) as server:
        got = fetch_sharded(server.targets, asking(10), audited, 2)
    assert nodes_of(got) == [(t, "redone", None) for t in server.targets]
    assert any("audit helper" in r.getMessage() for r in caplog.records)


def test_a_helper_killed_midway_has_its_share_asked_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper dies before it hands anything over (SIGKILL, the OOM killer's way)."""
    started: list[subprocess.Popen[bytes]] = []
    real = subprocess.Popen

    def popen(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        process = real(*args, **kwargs)  # type: ignore[call-overload]
        started.append(process)
        process.kill()
        return process  # type: ignore[no-any-return]

    monkeypatch.setattr(shards.subprocess, "Popen", popen)
    answer = report_of("synthetic-h100-8gpu-healthy", node="redone")
    with standin(wants_token(TOKEN, answer), ports=4) as server:
        got = fetch_sharded(server.targets, asking(10), audited, 2)
    assert len(started) == 1 and started[0].returncode is not None
    assert nodes_of(got) == [(t, "redone", None) for t in server.targets]


def test_the_helper_command_runs_a_job_from_anywhere(tmp_path: Path) -> None:
    """The helper's command line as `fetch_sharded` starts it, from another directory and
    without PYTHONPATH: it reads the pickled job on stdin and writes the digests."""
    answer = report_of("synthetic-h100-8gpu-healthy", node="job")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with standin(lambda context: answer, ports=2) as server:
        job = pickle.dumps((server.targets, asking(10), audited))
        done = subprocess.run(
            shards.helper_command(),
            input=job,
            capture_output=True,
            cwd=tmp_path,
            env=env,
            timeout=60,
            check=True,
        )
    assert nodes_of(pickle.loads(done.stdout)) == [(t, "job", None) for t in server.targets]


def test_an_audit_of_many_targets_takes_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    """`audit` itself splits a large fleet (here the share size lowered to 2 targets)."""
    monkeypatch.setattr(shards, "PER_PROCESS", 2)
    spawned: list[object] = []
    real = shards.Helper

    class Counted(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args: object) -> None:
            spawned.append(args)
            super().__init__(*args)

    monkeypatch.setattr(shards, "Helper", Counted)
    answer = report_of("synthetic-h100-8gpu-healthy", node="n")
    with standin(lambda context: answer, ports=4) as server:
        report = audit(AuditOptions(parse_targets(",".join(server.targets)), deadline=10))
    assert len(spawned) == min(2, shards.usable_cores()) - 1
    assert [n.target for n in report.nodes] == server.targets
    assert report.totals.reachable_nodes == 4
