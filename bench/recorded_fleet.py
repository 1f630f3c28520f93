"""A fleet of recorded agents for audit benchmarks: thousands of loopback addresses, a few
processes, each answering GetReport with a report recorded from a real agent.

    python bench/recorded_fleet.py --count 10000 --processes 2 \\
        --snapshot tests/snapshots/synthetic-h100-8gpu-healthy

First it starts one real agent (`gpuprobe serve`'s Agent, as tests/fleet.py does) per snapshot
and records its GetReport answers, the whole report and the summary view. Then each of
`--processes` processes listens on its share of the addresses 127.1.0.1, 127.1.0.2, ... (one
gRPC server per process, on gRPC's core without grpcio's thread pool, one port on each
address) and answers every GetReport with a
recorded answer, the node named after the address asked (`fleet-node-000042`). It prints one
JSON line `{"targets_file": ..., "count": N, "pids": [...]}` and serves until its stdin closes.
So an audit of 10,000 agents meets 10,000 distinct agents and real answers, while the fleet
itself costs a fraction of what 10,000 agents would: what is measured is the audit.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PORT = 50051
PLACEHOLDER = "fleet-node-XXXXXX"
PER_OCTET = 250
GET_REPORT = "/gpuprobe.v1.NodeDiagnostics/GetReport"
# Calls the server is ready to take at once before the loop asks for the next one.
WAITING_CALLS = 64


def address(i: int) -> str:
    """The `i`-th agent's loopback address (127.1.0.1 onwards, 250 per third octet)."""
    high, low = divmod(i, PER_OCTET)
    return f"127.{1 + high // 256}.{high % 256}.{low + 1}"


def index_of(host: str) -> int:
    """The agent index whose address `host` (host:port as the caller dialled it) is."""
    _, second, third, fourth = host.rpartition(":")[0].split(".")
    return ((int(second) - 1) * 256 + int(third)) * PER_OCTET + int(fourth) - 1


def record(snapshots: Sequence[str]) -> list[dict[str, str]]:
    """Each snapshot's GetReport answers (whole and summary view), recorded from a real
    agent, with the node name replaced by PLACEHOLDER (base64 of the serialized response)."""
    sys.path.insert(0, str(ROOT / "agent"))
    sys.path.insert(0, str(ROOT / "tests"))
    import grpc

    from fleet import fleet
    from gpuprobe.v1 import diagnostics_pb2 as pb

    recorded = []
    with fleet(snapshots, len(snapshots)) as agents:
        for agent in agents:
            answers = {}
            with grpc.insecure_channel(agent.target) as channel:
                call = channel.unary_unary(
                    "/gpuprobe.v1.NodeDiagnostics/GetReport",
                    request_serializer=pb.GetReportRequest.SerializeToString,
                    response_deserializer=pb.GetReportResponse.FromString,
                )
                for view, name in (
                    (pb.REPORT_VIEW_FULL, "full"),
                    (pb.REPORT_VIEW_SUMMARY, "summary"),
                ):
                    response = call(pb.GetReportRequest(view=view), timeout=30)
                    response.report.node = PLACEHOLDER
                    raw = response.SerializeToString()
                    assert raw.count(PLACEHOLDER.encode()) == 1, "the node name is not unique"
                    answers[name] = base64.b64encode(raw).decode()
            recorded.append(answers)
    return recorded


def serve_share(recorded_file: str, count: int, share: int, shares: int, port: int) -> int:
    """Serve the addresses i with i % shares == share on `port`, until stdin closes.

    The server is gRPC's core driven from one thread through its completion queue (the
    `grpc._cython.cygrpc` layer that grpcio's own server is built on), without that server's
    thread pool and per-call bookkeeping: about a third less CPU per answer
    (docs/benchmarks.md), which on a machine the audit shares with its fleet is CPU the audit
    gets. It answers GetReport; any other method is UNIMPLEMENTED."""
    from grpc._cython import cygrpc

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    recorded = json.loads(Path(recorded_file).read_text())
    answers = [{k: base64.b64decode(v) for k, v in r.items()} for r in recorded]
    placeholder = PLACEHOLDER.encode()

    def answer(host: bytes, request: bytes | None) -> bytes:
        # The caller's :authority (the address it dialled) names the agent.
        i = index_of(host.decode())
        # GetReportRequest: field 1 (view) varint; 2 is the summary view.
        view = "summary" if request == b"\x08\x02" else "full"
        return answers[i % len(answers)][view].replace(placeholder, f"fleet-node-{i:06d}".encode())

    queue = cygrpc.CompletionQueue()
    # No SO_REUSEPORT: a second fleet on the same addresses and port fails to start rather
    # than sharing (and, as it stops, cancelling) the first one's connections.
    options = (("grpc.enable_channelz", 0), ("grpc.http2.bdp_probe", 0), ("grpc.so_reuseport", 0))
    server = cygrpc.Server(options, False)
    server.register_completion_queue(queue)
    for i in range(share, count, shares):
        if not server.add_http2_port(f"{address(i)}:{port}".encode()):
            raise SystemExit(f"recorded_fleet: cannot listen on {address(i)}:{port}")
    server.start()
    new_call, done = object(), object()
    for _ in range(WAITING_CALLS):
        server.request_call(queue, queue, new_call)
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    print("ready", flush=True)

    def finish(call: Any, code: Any, details: bytes, message: bytes | None = None) -> None:
        operations = [cygrpc.SendInitialMetadataOperation((), 0)]
        if message is not None:
            operations.append(cygrpc.SendMessageOperation(message, 0))
        operations += [
            cygrpc.SendStatusFromServerOperation((), code, details, 0),
            cygrpc.ReceiveCloseOnServerOperation(0),
        ]
        call.start_server_batch(operations, done)

    while not closed.is_set():
        event = queue.poll(time.time() + 0.5)
        tag = event.tag
        if tag is new_call:
            server.request_call(queue, queue, new_call)  # the next caller's
            if event.call_details.method != GET_REPORT.encode():
                finish(event.call, cygrpc.StatusCode.unimplemented, b"Method not found!")
            else:  # read the request first: it says which view
                event.call.start_server_batch(
                    (cygrpc.ReceiveMessageOperation(0),), (event.call, event.call_details.host)
                )
        elif isinstance(tag, tuple) and event.success:  # (a caller gone meanwhile: nothing)
            call, host = tag
            try:
                reply = answer(host, event.batch_operations[0].message())
            except Exception as exc:  # an address outside the fleet's: say so, keep serving
                finish(call, cygrpc.StatusCode.internal, str(exc).encode())
            else:
                finish(call, cygrpc.StatusCode.ok, b"", reply)
    shut, bound = object(), time.monotonic() + 10
    server.shutdown(queue, shut)
    server.cancel_all_calls()
    while time.monotonic() < bound and queue.poll(time.time() + 1).tag is not shut:
        pass  # the calls' last events, until the server has shut down
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Record the answers, start the serving processes, print where they listen."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, required=True, help="how many agents")
    parser.add_argument("--processes", type=int, default=2, help="serving processes")
    parser.add_argument("--snapshot", action="append", help="a snapshot directory (repeatable)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port on each address")
    parser.add_argument("--share", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--recorded", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.share is not None:
        return serve_share(args.recorded, args.count, args.share, args.processes, args.port)
    snapshots = args.snapshot or [str(ROOT / "tests/snapshots/synthetic-h100-8gpu-healthy")]
    with tempfile.TemporaryDirectory(prefix="gpuprobe-fleet-") as tmp:
        recorded = Path(tmp) / "recorded.json"
        recorded.write_text(json.dumps(record(snapshots)))
        targets = Path(tmp) / "targets"
        targets.write_text("".join(f"{address(i)}:{args.port}\n" for i in range(args.count)))
        children = [
            subprocess.Popen(
                [
                    *(sys.executable, __file__, "--count", str(args.count)),
                    *("--processes", str(args.processes), "--share", str(k)),
                    *("--port", str(args.port)),
                    *("--recorded", str(recorded)),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "GRPC_VERBOSITY": "NONE"},
            )
            for k in range(args.processes)
        ]
        try:
            for child in children:
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise SystemExit(f"a serving process exited ({child.wait()})")
            pids = [c.pid for c in children]
            print(json.dumps({"targets_file": str(targets), "count": args.count, "pids": pids}))
            sys.stdout.flush()
            threading.Thread(target=sys.stdin.read, daemon=True).run()
        finally:
            for child in children:
                if child.stdin is not None:
                    child.stdin.close()
            for child in children:
                try:
                    child.wait(10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
