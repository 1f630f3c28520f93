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
from gpuprobe.config import Config
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
    assert out.stderr.endswith(" (see gpuprobe mesh --help)\n")  # as every usage error
    return out.stderr.removeprefix("gpuprobe: ").removesuffix(" (see gpuprobe mesh --help)\n")


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


def refused_by_n3(
    agents: list[str], token_file: str
) -> tuple[int, list[tuple[str, ...]], list[tuple[str, ...]]]:
    """A mesh over the agents (n1, n2 alike, n3 not): its exit status, its links (source,
    target, verdict, error) and its findings (code, resource, message)."""
    out = gpuprobe(
        *("mesh", "--json", "--seconds", "0.3", "--warmup", "0.1"),
        *("--targets", ",".join(agents), "--token-file", token_file),
    )
    result = json.loads(out.stdout)
    links = sorted(
        (x["source"], x["target"], x["verdict"], x.get("error", "")) for x in result["links"]
    )
    findings = [(f["code"], f["resource"], f["message"]) for f in result["findings"]]
    return out.returncode, links, findings


def test_one_agent_with_another_token_is_its_own_finding_not_the_callers(
    token_file: str, tmp_path: Path
) -> None:
    """A node whose Secret went stale refuses the mesh's token while the others take it: the
    mesh goes on and names that node, where refusing everyone stops the run (above)."""
    other = tmp_path / "other-token"
    other.write_text("a-token-of-its-own")
    with ExitStack() as stack:
        agents = [
            stack.enter_context(in_process_agent("kvm-epyc-nogpu", token_file=path, node_name=n))
            for n, path in (("n1", token_file), ("n2", token_file), ("n3", str(other)))
        ]
        code, links, findings = refused_by_n3(
            [f"127.0.0.1:{a.grpc_port}" for a in agents], token_file
        )
    why = (
        "n3 refused the mesh's token, which the other agents took (wrong bearer token): its "
        "token file differs from theirs"
    )
    assert links == [
        ("n1", "n2", "OK", ""),
        ("n1", "n3", "FAILED", why),
        ("n2", "n1", "OK", ""),
        ("n2", "n3", "FAILED", why),
        ("n3", "n1", "FAILED", why),
        ("n3", "n2", "FAILED", why),
    ]
    assert findings == [
        ("BANDWIDTH_TEST_UNAVAILABLE", "peer:n3", f"n3's bandwidth could not be tested: {why}")
    ]
    assert code == 3  # UNKNOWN: n3 is not known to be slow, only untested


def test_one_agent_refusing_the_tests_parameters_is_its_own_finding(token_file: str) -> None:
    """n3 keeps the default peer networks (the private ranges), which leave loopback out: it
    refuses the others' address as invalid, while n1 and n2 take it."""
    with ExitStack() as stack:
        agents = [
            stack.enter_context(
                in_process_agent(
                    "kvm-epyc-nogpu", config=config, token_file=token_file, node_name=n
                )
            )
            for n, config in (("n1", None), ("n2", None), ("n3", Config()))
        ]
        code, links, findings = refused_by_n3(
            [f"127.0.0.1:{a.grpc_port}" for a in agents], token_file
        )
    assert [link[:3] for link in links] == [
        ("n1", "n2", "OK"),
        ("n1", "n3", "FAILED"),
        ("n2", "n1", "OK"),
        ("n2", "n3", "FAILED"),
        ("n3", "n1", "FAILED"),
        ("n3", "n2", "FAILED"),
    ]
    (finding,) = findings
    assert finding[:2] == ("BANDWIDTH_TEST_UNAVAILABLE", "peer:n3")
    assert finding[2].startswith(
        "n3's bandwidth could not be tested: n3 refused the test, which the other agents took ("
    )
    assert "127.0.0.1 is not within this agent's peer networks" in finding[2]
    assert finding[2].endswith("): it runs another version or configuration")
    assert code == 3
