"""The fan-out: every target asked at once (up to the concurrency), all within one deadline
however many hang, the answers in the order of the targets."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time

from gpuprobe.audit.fanout import DEFAULT_CONCURRENCY, fetch_all, fetch_each
from gpuprobe.audit.run import AuditOptions, audit
from gpuprobe.client import Credentials, Fetched
from gpuprobe.targets import parse_targets
from gpuprobe.unreachable import Failure
from grpc_standins import hangs, report_of, standin


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def timed_fetch(targets: list[str], deadline: float, concurrency: int) -> tuple[float, list[str]]:
    """How long the fan-out took, and every target's reason (each must be a timeout)."""
    started = time.monotonic()
    fetched = fetch_all(targets, Credentials(), deadline, concurrency)
    elapsed = time.monotonic() - started
    assert [f.unreachable.failure if f.unreachable else None for f in fetched] == [
        Failure.TIMEOUT
    ] * len(targets)
    return elapsed, [f.unreachable.reason for f in fetched if f.unreachable]


def no_answer(deadline: float) -> str:
    return f"no answer within {deadline:g} s (the agent is down, hung or filtered)"


def not_asked(deadline: float, concurrency: int) -> str:
    return (
        f"not asked: the deadline ({deadline:g} s) passed while the {concurrency} agents asked "
        "at once did not answer (raise --concurrency)"
    )


def test_hung_agents_cost_one_deadline_whatever_the_concurrency() -> None:
    release = threading.Event()
    with standin(hangs(release), ports=6, workers=8) as server:
        try:
            # All six at once: one deadline, every one asked.
            elapsed, reasons = timed_fetch(server.targets, 0.4, 6)
            assert 0.4 <= elapsed < 0.4 + 0.6
            assert reasons == [no_answer(0.4)] * 6
            # Two at a time: still one deadline; the four behind the hung two are not asked.
            elapsed, reasons = timed_fetch(server.targets, 0.4, 2)
            assert 0.4 <= elapsed < 0.4 + 0.6
            assert reasons == [no_answer(0.4)] * 2 + [not_asked(0.4, 2)] * 4
        finally:
            release.set()


def test_more_hung_listeners_than_the_concurrency_take_one_deadline() -> None:
    """80 loopback listeners whose kernel completes the TCP handshake but that never answer
    (nothing accepts, nothing speaks HTTP/2), at the default concurrency of 64: the fan-out
    ends after one deadline, not two."""
    with contextlib.ExitStack() as stack:
        targets = []
        for _ in range(80):
            listener = stack.enter_context(socket.socket())
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            targets.append(f"127.0.0.1:{listener.getsockname()[1]}")
        elapsed, reasons = timed_fetch(targets, 0.5, DEFAULT_CONCURRENCY)
    assert 0.5 <= elapsed < 0.5 + 0.5
    assert reasons == [no_answer(0.5)] * 64 + [not_asked(0.5, 64)] * 16


def test_a_target_asked_late_says_it_had_only_part_of_the_deadline() -> None:
    """One thread: a slow agent answers after 0.8 s, then the hung one behind it gets the
    1.2 s left of 2 s; its reason blames the wait, not the agent alone."""
    response = report_of("synthetic-h100-8gpu-healthy", node="slow")

    def slow(context: object) -> object:
        time.sleep(0.8)
        return response

    release = threading.Event()
    with standin(slow) as answering, standin(hangs(release)) as hung:
        try:
            fetched = fetch_all([answering.target, hung.target], Credentials(), 2.0, 1)
        finally:
            release.set()
    assert fetched[0].report is not None and fetched[0].report.node == "slow"
    late = fetched[1].unreachable
    assert late is not None and late.failure == Failure.TIMEOUT
    assert re.fullmatch(
        r"no answer in the 1\.[12] s left of the 2 s deadline: it waited while the 1 agent "
        r"asked at once did not answer \(raise --concurrency\)",
        late.reason,
    ), late.reason


def test_answers_come_back_in_the_order_of_the_targets() -> None:
    response = report_of("synthetic-h100-8gpu-healthy", node="answering")
    dead = f"127.0.0.1:{closed_port()}"
    with standin(lambda context: response, ports=2) as server:
        targets = [server.targets[0], dead, server.targets[1]]
        fetched = fetch_all(targets, Credentials(), 5, 3)
    assert [f.target for f in fetched] == targets
    assert [f.report.node if f.report else None for f in fetched] == [
        "answering",
        None,
        "answering",
    ]
    assert fetched[1].unreachable is not None
    assert fetched[1].unreachable.failure == Failure.REFUSED


def test_no_targets() -> None:
    assert fetch_all([], Credentials()) == []


def test_a_device_of_an_odd_shape_is_passed_over_not_a_crash() -> None:
    """GetReport needs no token: anything listening at a target can answer anything. A
    workloads device whose `gpu` is a list once ended the whole audit with a traceback."""
    response = report_of("synthetic-k8s-mig-single", node="odd")
    workloads = next(c for c in response.report.checks if c.name == "workloads")
    devices = workloads.data.fields["devices"].list_value.values
    devices[0].struct_value.fields["gpu"].list_value.values.add().number_value = 1
    healthy = report_of("synthetic-h100-8gpu-healthy", node="fine")
    with standin(lambda context: response) as odd, standin(lambda context: healthy) as fine:
        report = audit(
            AuditOptions(parse_targets(f"{odd.targets[0]},{fine.targets[0]}"), deadline=5)
        )
    assert [(n.node, n.reachable) for n in report.nodes] == [("odd", True), ("fine", True)]


def test_a_digest_that_raises_becomes_an_unreadable_target() -> None:
    response = report_of("synthetic-h100-8gpu-healthy", node="answering")

    def digest(fetched: Fetched) -> str:
        if fetched.report is not None:
            raise ValueError("no such fact")
        assert fetched.unreachable is not None
        return f"{fetched.unreachable.failure.value}: {fetched.unreachable.reason}"

    with standin(lambda context: response) as server:
        got = fetch_each(server.targets, Credentials(), digest, 5)
    assert got == ["error: unreadable report: ValueError: no such fact"]
