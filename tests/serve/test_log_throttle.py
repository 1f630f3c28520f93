"""Refused calls are logged at most once a minute per caller and reason, with the count held
back (one client wrote 7,524 "call refused" lines in 10 s); the refusals themselves are not
throttled, only their lines. Loopback only."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from gpuprobe.client import Client
from gpuprobe.serve.logs import Throttle
from serving import in_process_agent

TOKEN = "s3cret-token"


def test_the_throttle_tells_the_first_then_once_per_interval_with_the_count() -> None:
    now = [0.0]
    throttle = Throttle(every=60.0, clock=lambda: now[0])
    assert throttle.allow("10.0.0.5 wrong bearer token") == 0
    assert [throttle.allow("10.0.0.5 wrong bearer token") for _ in range(500)] == [None] * 500
    assert throttle.allow("10.0.0.6 wrong bearer token") == 0  # another caller: told at once
    now[0] = 59.9
    assert throttle.allow("10.0.0.5 wrong bearer token") is None
    now[0] = 60.0
    assert throttle.allow("10.0.0.5 wrong bearer token") == 501


def test_the_throttle_forgets_rather_than_grows() -> None:
    throttle = Throttle(every=60.0, max_keys=10, clock=lambda: 0.0)
    for caller in range(1000):
        assert throttle.allow(f"10.0.{caller // 256}.{caller % 256}") == 0
    assert len(throttle._last) <= 10


def test_two_hundred_refused_calls_make_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with (
        in_process_agent(names=["driver"], token_file=str(token_file)) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token="wrong-token") as client,
        caplog.at_level(logging.WARNING, logger="gpuprobe.serve"),
    ):
        codes = set()
        for _ in range(200):
            with pytest.raises(grpc.RpcError) as err:
                client.run_checks(["driver"])
            codes.add(err.value.code())
    assert codes == {grpc.StatusCode.UNAUTHENTICATED}
    lines = [r for r in caplog.records if r.getMessage() == "call refused"]
    assert len(lines) == 1
    assert getattr(lines[0], "reason", None) == "wrong bearer token"
    assert getattr(lines[0], "held_back", None) == 0
