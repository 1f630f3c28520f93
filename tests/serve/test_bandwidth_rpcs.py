"""MeasureBandwidth and OpenBandwidthSink between real agents on loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from gpuprobe.client import Client
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc
from serving import in_process_agent, wait_for

TOKEN = "s3cret-bandwidth-token"


@pytest.fixture
def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def measure(
    target: str, peer: str, seconds: float = 1.0, **fields: object
) -> pb.MeasureBandwidthResponse:
    request = pb.MeasureBandwidthRequest(peer=peer, **fields)  # type: ignore[arg-type]
    request.duration.FromTimedelta(timedelta(seconds=seconds))
    request.warmup.FromTimedelta(timedelta(seconds=0.2))
    with Client(target, token=TOKEN) as client:
        return client.measure_bandwidth(request, timeout=30)


@pytest.fixture
def idle_pair(token_file: str) -> Iterator[tuple[str, str, object]]:
    """Two agents on GPU-less snapshots (no GPU process can hold a test back)."""
    with (
        in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name="node-a") as a,
        in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name="node-b") as b,
    ):
        yield f"127.0.0.1:{a.grpc_port}", f"127.0.0.1:{b.grpc_port}", a


def test_an_agent_measures_toward_its_peer_and_remembers_it(
    idle_pair: tuple[str, str, object],
) -> None:
    a_target, b_target, a = idle_pair
    response = measure(a_target, b_target, streams=2)
    assert (response.source, response.peer, response.transport) == ("node-a", "node-b", "tcp")
    assert response.bytes_per_second > 10e6
    assert len(response.stream_bytes_per_second) == 2
    assert response.bytes_per_second == pytest.approx(sum(response.stream_bytes_per_second))
    assert 0.5 < response.elapsed.ToTimedelta().total_seconds() < 2

    def peer_line() -> str | None:
        page = a.metrics_page.render(None)[0].decode()  # type: ignore[attr-defined]
        prefix = "gpuprobe_peer_bandwidth_bytes_per_second{"
        return next((ln for ln in page.splitlines() if ln.startswith(prefix)), None)

    line = wait_for(peer_line)
    assert line.startswith(
        'gpuprobe_peer_bandwidth_bytes_per_second{peer="node-b",transport="tcp"} '
    )
    assert float(line.split()[-1]) == pytest.approx(response.bytes_per_second)


def test_the_bandwidth_rpcs_need_a_token(token_file: str) -> None:
    with (
        in_process_agent("kvm-epyc-nogpu", token_file=token_file) as agent,
        grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as channel,
    ):
        stub = pb_grpc.NodeDiagnosticsStub(channel)
        for call, request in (
            (stub.MeasureBandwidth, pb.MeasureBandwidthRequest()),
            (stub.OpenBandwidthSink, pb.OpenBandwidthSinkRequest()),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call(request, timeout=5)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_node_with_gpu_processes_refuses_a_sink_unless_forced(token_file: str) -> None:
    with (
        in_process_agent("synthetic-h100-8gpu-healthy", token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        with pytest.raises(grpc.RpcError) as busy:
            client.open_bandwidth_sink(pb.OpenBandwidthSinkRequest(transport="tcp"))
        forced = client.open_bandwidth_sink(
            pb.OpenBandwidthSinkRequest(transport="tcp", force=True)
        )
    assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "GPU processes are active on synthetic-h100-8gpu-healthy" in busy.value.details()
    assert forced.port > 0 and len(forced.ticket) == 64
    assert forced.node == "synthetic-h100-8gpu-healthy"


def test_a_busy_peer_fails_the_measurement_as_a_precondition(token_file: str) -> None:
    with (
        in_process_agent("kvm-epyc-nogpu", token_file=token_file) as a,
        in_process_agent("synthetic-h100-8gpu-healthy", token_file=token_file) as b,
        pytest.raises(grpc.RpcError) as err,
    ):
        measure(f"127.0.0.1:{a.grpc_port}", f"127.0.0.1:{b.grpc_port}")
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "refused a sink: GPU processes are active" in err.value.details()


def test_bad_requests(idle_pair: tuple[str, str, object]) -> None:
    a_target, b_target, _ = idle_pair
    cases = [
        ({"peer": "nohostport"}, grpc.StatusCode.INVALID_ARGUMENT, "is not host:port"),
        (
            {"peer": b_target, "transport": "carrier-pigeon"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown transport",
        ),
        (
            {"peer": b_target, "transport": "rdma", "rdma_device": "mlx5_0"},
            grpc.StatusCode.FAILED_PRECONDITION,
            "no RDMA device mlx5_0 on node-a",
        ),
    ]
    for fields, code, message in cases:
        with pytest.raises(grpc.RpcError) as err:
            measure(a_target, **fields)  # type: ignore[arg-type]
        assert err.value.code() == code
        assert message in err.value.details()
    with pytest.raises(grpc.RpcError) as too_long:
        measure(a_target, b_target, seconds=600)
    assert too_long.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_an_unreachable_peer_fails_fast(idle_pair: tuple[str, str, object]) -> None:
    a_target, _, _ = idle_pair
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            measure(a_target, dead)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - started < 15
