"""The TLS overlay, run: `gpuprobe serve` with the container arguments the overlay renders
(their container paths mapped onto this machine, on loopback and a snapshot) serves gRPC over
TLS to a client trusting the CA, and the probes' paths answer as the kubelet expects."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from certs import make_pki
from conftest import snapshot
from deployment import find, objects
from gpuprobe.client import Client
from serving import serve_process, wait_for

TOKEN = "fleet-token"


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_overlays_arguments_serve_tls_and_its_probes_answer(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "config.yaml").write_text(f"xid: {{state_dir: {tmp_path / 'state'}}}\n")
    container = find(objects("overlays/tls"), "DaemonSet")["spec"]["template"]["spec"][
        "containers"
    ][0]
    on_this_machine = {
        "/etc/gpuprobe/tls/tls.crt": pki.server_cert,
        "/etc/gpuprobe/tls/tls.key": pki.server_key,
        "/etc/gpuprobe/token/token": str(tmp_path / "token"),
        "/etc/gpuprobe/config/config.yaml": str(tmp_path / "config.yaml"),
    }
    args = []
    for arg in container["args"][1:]:  # after "serve"
        flag, _, value = arg.partition("=")
        if flag in ("--grpc-listen", "--metrics-listen", "--root"):
            continue  # loopback ports and a snapshot here instead
        args.append(f"{flag}={on_this_machine[value]}")
    assert [a.split("=")[0] for a in args] == [
        "--token-file",
        "--config",
        "--tls-cert",
        "--tls-key",
    ]
    readiness = container["readinessProbe"]["httpGet"]["path"]
    liveness = container["livenessProbe"]["httpGet"]["path"]
    with serve_process(*args, "--snapshot", snapshot("synthetic-h100-8gpu-healthy")) as agent:
        assert agent.logs[-1]["tls"] == "tls"
        assert probe(agent.metrics_port, liveness) == 200
        wait_for(lambda: probe(agent.metrics_port, readiness) == 200)
        with Client(agent.grpc_target, ca_file=pki.ca, token=TOKEN) as client:
            assert client.get_report().status.value == "OK"
            assert [c.name for c in client.run_checks(["driver"]).checks] == ["driver"]
