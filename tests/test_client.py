"""The client library other tools import: credentials read once, the token on every call,
reports fetched whole or by selected data keys, findings iterated, failures as values."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
import pytest

from certs import make_pki
from gpuprobe import __version__
from gpuprobe.client import Client, Credentials, dial_target, fetch_report
from gpuprobe.errors import UsageError
from gpuprobe.report import Action, Finding, Severity
from gpuprobe.unreachable import Failure
from grpc_standins import report_of, standin, wants_token
from serving import in_process_agent

REMAP_RESOURCE = "gpu:3:GPU-5f1c0003-8e2b-4c1d-9a7e-000000000003"


def test_credentials_read_their_files_once(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    token = tmp_path / "token"
    token.write_text("abc123\n")
    credentials = Credentials.load(
        token_file=str(token),
        ca_file=pki.ca,
        cert_file=pki.client_cert,
        key_file=pki.client_key,
        server_name="agent.example",
    )
    assert credentials.token == "abc123"
    assert credentials.ca == Path(pki.ca).read_bytes()
    assert credentials.tls
    assert credentials.metadata == (("authorization", "Bearer abc123"),)
    assert credentials.channel_credentials is credentials.channel_credentials  # made once
    assert not Credentials().tls
    assert Credentials().channel_credentials is None
    assert Credentials().metadata == ()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"token_file": "missing"}, "--token-file {d}/missing: No such file or directory"),
        ({"ca_file": "missing"}, "--tls-ca {d}/missing: No such file or directory"),
        ({"ca_file": "token"}, "--tls-ca {d}/token: not a PEM file"),
        (
            {"cert_file": "client.crt"},
            "a client certificate and its key go together (--tls-cert, --tls-key)",
        ),
        (
            {"key_file": "client.key"},
            "a client certificate and its key go together (--tls-cert, --tls-key)",
        ),
    ],
)
def test_bad_credential_files_are_usage_errors(
    tmp_path: Path, flags: dict[str, str], message: str
) -> None:
    make_pki(tmp_path)
    (tmp_path / "token").write_text("abc\n")
    with pytest.raises(UsageError) as err:
        Credentials.load(**{k: str(tmp_path / v) for k, v in flags.items()})
    assert str(err.value) == message.format(d=tmp_path)


def test_the_token_travels_with_get_report() -> None:
    answer = report_of("synthetic-h100-8gpu-healthy", node="behind-a-proxy")
    with standin(wants_token("s3cret", answer)) as server:
        fetched = fetch_report(server.target, Credentials(token="s3cret"), timeout=5)
        assert fetched.report is not None and fetched.report.node == "behind-a-proxy"
        assert server.calls[-1]["authorization"] == "Bearer s3cret"
        with Client(server.target, token="s3cret") as client:
            assert client.get_report().node == "behind-a-proxy"
        refused = fetch_report(server.target, Credentials(), timeout=5)
        assert refused.unreachable is not None
        assert refused.unreachable.failure == Failure.UNAUTHORISED
        assert "authorization" not in server.calls[-1]


def test_fetch_report_with_selected_data_keys() -> None:
    with in_process_agent("synthetic-remap-pending") as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        whole = fetch_report(target, Credentials(), timeout=5)
        some = fetch_report(
            target,
            Credentials(),
            timeout=5,
            data={"driver": {"driver_version": None}, "gpus": {"gpus": {"index": None}}},
        )
    assert whole.report is not None and some.report is not None
    assert whole.target == some.target == target
    assert whole.agent_version == __version__
    assert whole.unreachable is None
    assert whole.seconds > 0
    driver, gpus = some.report.check("driver"), some.report.check("gpus")
    assert driver is not None and gpus is not None
    assert driver.data == {"driver_version": "550.54.15"}
    assert gpus.data == {"gpus": [{"index": i} for i in range(8)]}
    assert all(c.data == {} for c in some.report.checks[2:])  # checks not named: no data
    # Everything but the data is whole.
    assert some.report.findings() == whole.report.findings()
    assert [c.status for c in some.report.checks] == [c.status for c in whole.report.checks]
    whole_gpus = whole.report.check("gpus")
    assert whole_gpus is not None
    assert [g["index"] for g in whole_gpus.data["gpus"]] == list(range(8))
    assert whole_gpus.data["gpus"][3]["remapped_rows_pending"] is True


def test_findings_of_an_agent() -> None:
    with (
        in_process_agent("synthetic-remap-pending") as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        findings = list(client.findings())
    assert findings == [
        (
            "gpus",
            Finding(
                "ROW_REMAP_PENDING",
                Severity.CRITICAL,
                "GPU 3 (0000:5d:00.0) has 2 uncorrectable rows remapped; a GPU reset is "
                "pending to activate the remapping: drain the GPU and reset it",
                Action.RESET_GPU,
                REMAP_RESOURCE,
            ),
        )
    ]


def test_watch_reports_ends_quietly_at_its_timeout() -> None:
    """docs/grpc.md's loop `for report in agent.watch_reports(timeout=600)`: the loop ends
    when the time is up, with no DEADLINE_EXCEEDED."""
    with (
        in_process_agent() as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        started = time.monotonic()
        reports = list(client.watch_reports(timeout=1.0))
        took = time.monotonic() - started
    # The latest report first; the active checks' first round (a random part of their jitter
    # window after the start) may land within the second and add one more.
    assert [r.node for r in reports][:1] == ["synthetic-h100-8gpu-healthy"]
    assert len(reports) <= 2 and {r.node for r in reports} == {"synthetic-h100-8gpu-healthy"}
    assert 1.0 <= took < 3


def test_watch_reports_raises_when_the_agent_never_answers() -> None:
    """A port that takes the connection and never answers (listening, never accepting): no
    first report within the timeout is an error, not an empty watch."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with (
            Client(f"127.0.0.1:{silent.getsockname()[1]}") as client,
            pytest.raises(grpc.RpcError) as err,
        ):
            next(client.watch_reports(timeout=0.5))
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize(
    ("target", "dialled"),
    [
        ("10.0.0.7:50051", "ipv4:10.0.0.7:50051"),
        ("[fd00::7]:50051", "ipv6:[fd00::7]:50051"),
        ("[fe80::1%eth0]:50051", "ipv6:[fe80::1%eth0]:50051"),
        ("gpu-node-7:50051", "gpu-node-7:50051"),  # a name: gRPC's resolver looks it up
        ("010.0.0.7:50051", "010.0.0.7:50051"),  # not an address in either parser
        ("unix:/run/gpuprobe.sock", "unix:/run/gpuprobe.sock"),
    ],
)
def test_addresses_skip_the_resolver_and_names_do_not(target: str, dialled: str) -> None:
    assert dial_target(target) == dialled
