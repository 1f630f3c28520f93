"""What `gpuprobe mesh` says when it cannot measure: credentials the agents refuse, TLS the
wrong way round, fewer than two agents. Real agents on loopback, the real command."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from certs import Pki, make_pki
from conftest import gpuprobe
from grpc_standins import report_of, standin, wants_token
from serving import in_process_agent

TOKEN = "mesh-token"


@pytest.fixture
def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    return str(path)


@pytest.fixture
def guarded(token_file: str) -> Iterator[list[str]]:
    """Two agents that require the token for their guarded RPCs (GetReport needs none)."""
    with ExitStack() as stack:
        started = [
            stack.enter_context(
                in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name=f"n{i}")
            )
            for i in (1, 2)
        ]
        yield [f"127.0.0.1:{a.grpc_port}" for a in started]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def usage_error(*args: str) -> str:
    """The one line of a mesh that ends in a usage error (exit 64, nothing on stdout)."""
    out = gpuprobe("mesh", "--seconds", "0.3", "--warmup", "0.1", *args)
    assert (out.returncode, out.stdout) == (64, ""), out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("gpuprobe: ")
    return out.stderr.removeprefix("gpuprobe: ").rstrip("\n")


def test_without_the_token_the_mesh_names_the_flag(guarded: list[str], tmp_path: Path) -> None:
    """The agents answer GetReport to anyone, then refuse the sink: the caller's problem,
    one line naming --token-file, not two CRITICAL PEER_UNREACHABLE findings."""
    line = usage_error("--targets", ",".join(guarded))
    assert line == (
        "n2 refused the test: this RPC needs a bearer token (authorization: Bearer <token>): "
        "pass the agents' token with --token-file"
    )
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    line = usage_error("--targets", ",".join(guarded), "--token-file", str(wrong))
    assert (
        line == "n2 refused the test: wrong bearer token: pass the agents' token with --token-file"
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_the_wrong_way_round_names_the_flag(pki: Pki) -> None:
    with in_process_agent(
        "kvm-epyc-nogpu", tls_cert=pki.server_cert, tls_key=pki.server_key
    ) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        targets = f"{target},localhost:{agent.grpc_port}"
        assert usage_error("--targets", targets) == (
            f"{target}: the agent closed the connection at setup: it serves TLS: call it with "
            "--tls-ca"
        )
        stranger = str(Path(pki.ca).parent / "stranger-ca.crt")
        line = usage_error("--targets", targets, "--tls-ca", stranger)
        assert line.startswith(f"{target}: TLS handshake failed: ")
        assert line.endswith(
            "(check --tls-ca (the CA that signed the agents) and --tls-server-name)"
        )
    with in_process_agent("kvm-epyc-nogpu") as plain:
        target = f"127.0.0.1:{plain.grpc_port}"
        line = usage_error("--targets", f"{target},localhost:{plain.grpc_port}", "--tls-ca", pki.ca)
    assert line == (
        f"{target}: it does not speak TLS: call it without --tls-ca (a plain-text agent), or "
        "check the port"
    )


@pytest.mark.parametrize("targets", ["127.0.0.1:{port}", "127.0.0.1:{port},127.0.0.1:{port}"])
def test_fewer_than_two_targets_named_is_a_usage_error(targets: str) -> None:
    line = usage_error("--targets", targets.format(port=closed_port()))
    assert line == "--targets names 1 agent: a mesh measures between two at least"


def test_one_agent_behind_two_addresses_measures_nothing_and_says_so(token_file: str) -> None:
    """As a DNS name that resolved to one pod: one node answered, nothing was measured, the
    status is UNKNOWN (exit 3), never OK."""
    with in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name="n1") as agent:
        targets = f"127.0.0.1:{agent.grpc_port},localhost:{agent.grpc_port}"
        out = gpuprobe("mesh", "--targets", targets, "--token-file", token_file, "--json")
        text = gpuprobe("mesh", "--targets", targets, "--token-file", token_file)
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert (result["status"], result["links"]) == ("UNKNOWN", [])
    assert result["findings"] == [
        {
            "code": "BANDWIDTH_TEST_UNAVAILABLE",
            "severity": "UNKNOWN",
            "message": "n1's bandwidth could not be tested: it is the only node that answered "
            "(at 2 of 2 addresses), and a mesh measures between two nodes at least",
            "action": "NONE",
            "resource": "peer:n1",
        }
    ]
    assert text.returncode == 3
    assert text.stdout.splitlines()[0] == "status UNKNOWN"


def test_one_agent_and_a_dead_address(token_file: str) -> None:
    with in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name="n1") as agent:
        dead = f"127.0.0.1:{closed_port()}"
        targets = f"127.0.0.1:{agent.grpc_port},{dead}"
        out = gpuprobe("mesh", "--targets", targets, "--token-file", token_file, "--json")
    assert out.returncode == 2  # the dead one is CRITICAL
    codes = [(f["code"], f["resource"]) for f in json.loads(out.stdout)["findings"]]
    assert codes == [
        ("PEER_UNREACHABLE", f"peer:{dead}"),
        ("BANDWIDTH_TEST_UNAVAILABLE", "peer:n1"),
    ]


def test_a_busy_node_names_the_flag_that_runs_anyway(token_file: str) -> None:
    """A node with GPU processes refuses tests; the finding says how to run anyway."""
    with (
        in_process_agent("synthetic-h100-8gpu-healthy", token_file=token_file) as busy,
        in_process_agent("kvm-epyc-nogpu", token_file=token_file, node_name="n2") as idle,
    ):
        targets = f"127.0.0.1:{busy.grpc_port},127.0.0.1:{idle.grpc_port}"
        out = gpuprobe(
            "mesh", "--targets", targets, "--token-file", token_file, "--json", "--seconds", "0.3"
        )
    findings = json.loads(out.stdout)["findings"]
    assert [(f["code"], f["resource"]) for f in findings] == [
        ("BANDWIDTH_TEST_UNAVAILABLE", "peer:synthetic-h100-8gpu-healthy")
    ]
    assert findings[0]["message"].endswith(
        "bandwidth tests wait for idle GPUs (pass --force to run anyway)"
    )
    assert out.returncode == 3


def test_an_auth_proxy_refusing_get_report_names_the_token_flag(tmp_path: Path) -> None:
    """A proxy before the agents that wants the token even for GetReport."""
    answer = report_of("kvm-epyc-nogpu")
    with standin(wants_token(TOKEN, answer)) as server:
        port = server.target.rsplit(":", 1)[1]
        targets = f"{server.target},localhost:{port}"
        assert usage_error("--targets", targets) == (
            f"{server.target}: refused our credentials (UNAUTHENTICATED): bearer token required "
            "(pass the agents' token with --token-file)"
        )
        wrong = tmp_path / "wrong"
        wrong.write_text("not-the-token")
        assert usage_error("--targets", targets, "--token-file", str(wrong)) == (
            f"{server.target}: refused our credentials (PERMISSION_DENIED): token not allowed "
            "(--token-file: is it the agents' token?)"
        )
